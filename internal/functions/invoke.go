package functions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/timing"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Run states.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunTimedOut  = "timed_out"
)

// MaxLogs bounds the logs a run keeps (the runner keeps the tail too).
const MaxLogs = 64 << 10

// MaxBackoff caps the wait between retries of an async run (1 s, doubling).
const MaxBackoff = 30 * time.Second

// Invoke runs the team's function's latest version once with payload and waits for it: a fresh
// sandbox from the version's warm snapshot, the event handed to the running runner, the sandbox
// killed. The run is recorded; its outcome (result, logs, error) is in the returned run. The work
// goes on if the caller leaves (the run is still recorded).
func (s *Service) Invoke(ctx context.Context, teamID, id string, payload json.RawMessage, trigger string) (store.FunctionRun, error) {
	ctx, tr := timing.Ensure(ctx)
	fn, v, err := s.Get(ctx, teamID, id)
	if err != nil {
		return store.FunctionRun{}, err
	}
	timing.Mark(ctx, "lookup")
	run, ok, err := s.start(ctx, v, store.FunctionRun{ID: auth.NewID("run_"), FunctionID: fn.ID, TeamID: teamID,
		Version: v.Version, Trigger: trigger, Attempts: 1, Payload: string(payload)}, true)
	timing.Mark(ctx, "start")
	switch {
	case err != nil:
		return run, err
	case !ok:
		return store.FunctionRun{}, errdefs.New(errdefs.Exhausted, "function %s has %d invocations running, its max_concurrency: retry later", fn.Name, v.MaxConcurrency)
	}
	h := s.hold(context.WithoutCancel(ctx), run)
	defer h.stop()
	s.attempt(h.ctx, fn, v, &run)
	err = s.record(h, &run, true)
	timing.Mark(ctx, "record")
	s.logSteps(ctx, run, tr)
	if errors.Is(err, store.ErrLeaseLost) {
		// This server was cut off past the run's lease and another replica recorded it lost: its
		// record stands (the caller sees what GET …/runs/{run} shows).
		return s.cfg.Store.GetFunctionRun(context.WithoutCancel(ctx), run.FunctionID, run.ID)
	} else if err != nil {
		return run, err
	}
	return run, nil
}

// start starts run (a new one when insert, else its next attempt) in one of the function's
// max_concurrency slots, counted cluster-wide in the store (store.StartFunctionRun); false when
// they are all taken.
func (s *Service) start(ctx context.Context, v store.FunctionVersion, run store.FunctionRun, insert bool) (store.FunctionRun, bool, error) {
	now := s.dbNow(ctx)
	return s.cfg.Store.StartFunctionRun(ctx, run, insert, v.MaxConcurrency, now, now.Add(s.leaseTime()))
}

// InvokeAsync records a queued run and returns it at once; the run is attempted in the
// background, and retried with backoff (1 s, doubling, at most 30 s) up to the version's retries
// when it fails or times out.
func (s *Service) InvokeAsync(ctx context.Context, teamID, id string, payload json.RawMessage) (store.FunctionRun, error) {
	fn, v, err := s.Get(ctx, teamID, id)
	if err != nil {
		return store.FunctionRun{}, err
	}
	run, err := s.cfg.Store.CreateFunctionRun(ctx, store.FunctionRun{ID: auth.NewID("run_"), FunctionID: fn.ID, TeamID: teamID,
		Version: v.Version, Trigger: "async", Status: RunQueued, Payload: string(payload), LeaseUntil: s.dbNow(ctx).Add(s.leaseTime())})
	if err != nil {
		return run, err
	}
	s.bg.Go(func() {
		s.runAsync(fn, v, run)
	})
	return run, nil
}

func (s *Service) runAsync(fn store.Function, v store.FunctionVersion, run store.FunctionRun) {
	h := s.hold(s.bg.Ctx(), run)
	defer h.stop()
	backoff := time.Second
	for {
		for { // wait for a slot
			started, ok, err := h.start(s, v, run)
			if errors.Is(err, store.ErrLeaseLost) {
				return
			}
			if err != nil {
				s.log.Warn("functions: could not start an attempt", "run", run.ID, "err", err)
			}
			if ok {
				run = started
				break
			}
			if !s.sleep(200 * time.Millisecond) {
				return
			}
		}
		s.attempt(h.ctx, fn, v, &run)
		final := run.Status == RunSucceeded || run.Attempts > v.Retries
		if err := s.record(h, &run, final); errors.Is(err, store.ErrLeaseLost) {
			return
		} else if err != nil {
			s.log.Warn("functions: could not record a run", "run", run.ID, "err", err)
		}
		if final || !s.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, MaxBackoff)
	}
}

// LeaseTime is how long an unfinished run stays its replica's without a renewal (renewed every
// quarter of it); after that another replica takes it over (TakeOver) and its concurrency slot
// is free.
const LeaseTime = 2 * time.Minute

func (s *Service) leaseTime() time.Duration {
	if s.cfg.LeaseTime > 0 {
		return s.cfg.LeaseTime
	}
	return LeaseTime
}

// runHold is this replica's hold on an unfinished run: the lease end it last wrote, which each of
// its writes of the run must still find in the store (store.ErrLeaseLost otherwise: a replica
// took the run over after this one was cut off past the lease). It renews the lease every
// quarter of the lease time until stop or the service closes (a closed server's runs lapse like
// a dead one's); once the run is lost, the attempt under way (ctx) is ended.
type runHold struct {
	id     string
	ctx    context.Context // the attempts'; cancelled when the run is lost
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex // one write of the run at a time, each with the current lease
	until time.Time
	lost  bool
}

// hold starts holding run (its lease as run.LeaseUntil says) for attempts under parent.
func (s *Service) hold(parent context.Context, run store.FunctionRun) *runHold {
	h := &runHold{id: run.ID, until: run.LeaseUntil, done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(parent)
	go func() {
		t := time.NewTicker(s.leaseTime() / 4)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-s.bg.Ctx().Done():
				return
			case <-t.C:
				ctx := context.Background()
				until := s.dbNow(ctx).Add(s.leaseTime())
				err := h.write(func(held time.Time) (time.Time, error) {
					return until, s.cfg.Store.RenewFunctionRun(ctx, h.id, held, until)
				})
				if err != nil && !errors.Is(err, store.ErrLeaseLost) {
					s.log.Warn("functions: could not renew a run's lease", "run", h.id, "err", err)
				}
			}
		}
	}()
	return h
}

// stop ends the renewals.
func (h *runHold) stop() { close(h.done); h.cancel() }

// write makes one write of the run with the lease held (put returns the lease after it); a
// write that finds the lease gone marks the run lost and ends the attempt under way.
func (h *runHold) write(put func(held time.Time) (time.Time, error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return store.ErrLeaseLost
	}
	until, err := put(h.until)
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		h.lost = true
		h.cancel()
	case err == nil:
		h.until = until
	}
	return err
}

// start starts run's next attempt in a slot (Service.start) with the lease held.
func (h *runHold) start(s *Service, v store.FunctionVersion, run store.FunctionRun) (started store.FunctionRun, ok bool, err error) {
	err = h.write(func(held time.Time) (time.Time, error) {
		run.LeaseUntil = held
		started, ok, err = s.start(s.bg.Ctx(), v, run, false)
		if !ok || err != nil {
			return held, err
		}
		return started.LeaseUntil, nil
	})
	return started, ok, err
}

// record writes run's progress or end (final) with the lease held; store.ErrLeaseLost: another
// replica has the run (this outcome is dropped and logged).
func (s *Service) record(h *runHold, run *store.FunctionRun, final bool) error {
	err := h.write(func(held time.Time) (time.Time, error) {
		run.LeaseUntil = held
		return held, s.cfg.Store.UpdateFunctionRun(context.WithoutCancel(h.ctx), *run, final)
	})
	if errors.Is(err, store.ErrLeaseLost) {
		s.log.Warn("functions: another replica took over a run this server was cut off from; its outcome here is dropped",
			"run", run.ID, "function", run.FunctionID, "status", run.Status)
	}
	return err
}

// logSteps logs, at debug, how long each step of a sync invocation took (the bench's breakdown):
// lookup (function and version), start (the run recorded in a slot), snapshot (the warm
// snapshot looked up), place/host_create/sandbox_record (sandboxes.Service.Create: the host
// agent's restore is host_create), target, prepare, runner (the event to the runner in the VM
// and its answer), record (the run's outcome written).
func (s *Service) logSteps(ctx context.Context, run store.FunctionRun, tr *timing.Trace) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	s.log.Debug("function invoked", append([]any{"run", run.ID, "sandbox", run.SandboxID, "status", run.Status, "transport", s.transport(ctx),
		"handler_ms", run.DurationMS}, tr.LogArgs()...)...)
}

// dbNow is the database's clock (leases are compared across replicas), else the local one.
func (s *Service) dbNow(ctx context.Context) time.Time {
	if t, err := s.cfg.Store.DBNow(ctx); err == nil {
		return t
	}
	return time.Now().UTC()
}

// ServerLost is the error message of a run whose server stopped while it ran.
const ServerLost = "the server running this invocation was lost (it stopped renewing the run's lease)"

// TakeOver deals with the runs whose replica stopped (their lease passed), each claimed by one
// replica: a sync run (API, HTTP trigger, schedule: its caller is gone with the server) and an
// async run lost during its last attempt are recorded failed (the function may have run); other
// async runs are resumed here.
func (s *Service) TakeOver(ctx context.Context) error {
	now := s.dbNow(ctx)
	runs, err := s.cfg.Store.TakeOverFunctionRuns(ctx, now, now.Add(s.leaseTime()), 20)
	for _, r := range runs {
		fn, gerr := s.cfg.Store.GetFunction(ctx, r.FunctionID)
		v, verr := s.cfg.Store.GetFunctionVersion(ctx, r.FunctionID, r.Version)
		if gerr != nil || verr != nil || r.Trigger != "async" || r.Status == RunRunning && r.Attempts > v.Retries {
			r.Status, r.ErrorType, r.ErrorMessage, r.ErrorTraceback = RunFailed, "PlatformError", ServerLost, ""
			if uerr := s.cfg.Store.UpdateFunctionRun(ctx, r, true); errors.Is(uerr, store.ErrLeaseLost) {
				continue // its server came back and recorded it meanwhile
			} else if uerr != nil {
				return uerr
			}
			s.log.Warn("functions: a run's server was lost", "run", r.ID, "function", r.FunctionID, "trigger", r.Trigger)
			continue
		}
		s.log.Info("functions: resuming an async run whose server stopped", "run", r.ID, "function", fn.ID)
		s.bg.Go(func() {
			s.runAsync(fn, v, r)
		})
	}
	return err
}

// RunTakeOver calls TakeOver every interval until ctx ends.
func (s *Service) RunTakeOver(ctx context.Context, interval time.Duration) {
	for sleepCtx(ctx, interval) {
		if err := s.TakeOver(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("functions: taking over async runs failed", "err", err)
		}
	}
}

// sleep waits d unless the service closes (false).
func (s *Service) sleep(d time.Duration) bool { return sleepCtx(s.bg.Ctx(), d) }

// sleepCtx waits d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// InvokeHTTP runs function id (of any team: its id, unguessable, is the capability, as a sandbox
// port's host name is) for its HTTP trigger, with the request as the event.
func (s *Service) InvokeHTTP(ctx context.Context, id string, event json.RawMessage) (store.FunctionRun, error) {
	fn, err := s.cfg.Store.GetFunction(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.FunctionRun{}, errdefs.NotFoundf("function %s not found", trunc(id))
	}
	if err != nil {
		return store.FunctionRun{}, err
	}
	return s.Invoke(ctx, fn.TeamID, fn.ID, event, "http")
}

// InvokeForSchedule runs a function for a schedule (internal/schedules).
func (s *Service) InvokeForSchedule(ctx context.Context, teamID, id string, payload json.RawMessage) (runID, output string, failed bool, err error) {
	run, err := s.Invoke(ctx, teamID, id, payload, "schedule")
	if err != nil {
		return run.ID, "", true, err
	}
	out := run.Result
	if run.ErrorType != "" {
		out = run.ErrorType + ": " + run.ErrorMessage
	}
	return run.ID, out, run.Status != RunSucceeded, nil
}

// invocation is what the runner answers on POST /invoke.
type invocation struct {
	Result     json.RawMessage   `json:"result"`
	Logs       string            `json:"logs"`
	DurationMS int64             `json:"duration_ms"`
	Error      *v1.FunctionError `json:"error"`
}

// attempt runs one invocation of version v and writes its outcome into run.
func (s *Service) attempt(ctx context.Context, fn store.Function, v store.FunctionVersion, run *store.FunctionRun) {
	platform := func(typ string, err error) {
		run.Status, run.ErrorType, run.ErrorMessage, run.ErrorTraceback = RunFailed, typ, err.Error(), ""
	}
	run.Result, run.Logs, run.ErrorType, run.ErrorMessage, run.ErrorTraceback, run.DurationMS = "", "", "", "", "", 0
	snap, err := s.warmSnapshot(ctx, fn, v)
	if err != nil {
		platform("PlatformError", fmt.Errorf("no warm snapshot of version %d: %v", v.Version, err))
		return
	}
	secrets, err := s.unseal(v.Secrets)
	if err != nil {
		platform("PlatformError", errors.New("the function's secrets cannot be read on this server"))
		s.log.Error("functions: unsealing secrets failed", "function", fn.ID, "version", v.Version, "err", err)
		return
	}
	timing.Mark(ctx, "snapshot")
	timeout := time.Duration(v.TimeoutSeconds) * time.Second
	sb, err := s.cfg.Sandboxes.Create(ctx, fn.TeamID, sandboxes.CreateParams{Template: snap.Template, AgentTemplate: snap.Template,
		Snapshot: &snap, Metadata: map[string]string{"pandastack.function": fn.Name, "pandastack.function_run": run.ID},
		TTLSeconds: int64(timeout/time.Second) + 300, Owner: store.OwnerFunction})
	if err != nil {
		platform("PlatformError", fmt.Errorf("no sandbox for the invocation: %v", err))
		return
	}
	run.SandboxID = sb.ID
	defer s.kill(sb, "function invocation finished")
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		platform("PlatformError", err)
		return
	}
	timing.Mark(ctx, "target")
	if len(run.Payload) == 0 {
		run.Payload = "null"
	}
	body, _ := json.Marshal(map[string]any{"payload": json.RawMessage(run.Payload), "secrets": secrets,
		"context": map[string]any{"function_id": fn.ID, "function_name": fn.Name, "version": v.Version, "run_id": run.ID,
			"timeout_seconds": v.TimeoutSeconds}})
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out invocation
	timing.Mark(ctx, "prepare")
	err = s.runnerCall(ictx, c, sb.ID, "POST", "/invoke", body, &out)
	timing.Mark(ctx, "runner")
	switch {
	case errors.Is(ictx.Err(), context.DeadlineExceeded):
		run.Status, run.ErrorType = RunTimedOut, "Timeout"
		run.ErrorMessage = fmt.Sprintf("the function ran past its timeout of %d s; its VM was killed", v.TimeoutSeconds)
		run.DurationMS = timeout.Milliseconds()
		return
	case err != nil:
		platform("PlatformError", fmt.Errorf("the function's runner did not answer: %v", err))
		return
	}
	run.Logs, run.DurationMS = tailString(out.Logs, MaxLogs), out.DurationMS
	if out.Error != nil {
		run.Status, run.ErrorType, run.ErrorMessage, run.ErrorTraceback = RunFailed, out.Error.Type, out.Error.Message, out.Error.Traceback
		return
	}
	run.Status, run.Result = RunSucceeded, string(out.Result)
}

// warmSnapshot is the version's warm snapshot, baked again from the stored bundle when it is gone
// (deleted, or its host is down): a host loss costs one bake, not a redeploy. Re-bakes of one
// replica run one at a time; a bake that loses the race to record itself is dropped.
func (s *Service) warmSnapshot(ctx context.Context, fn store.Function, v store.FunctionVersion) (store.Snapshot, error) {
	if snap, ok := s.usableSnapshot(ctx, v.SnapshotID); ok {
		return snap, nil
	}
	s.rebakeMu.Lock()
	defer s.rebakeMu.Unlock()
	full, err := s.cfg.Store.GetFunctionVersionBundle(ctx, fn.ID, v.Version)
	if err != nil {
		return store.Snapshot{}, err
	}
	if snap, ok := s.usableSnapshot(ctx, full.SnapshotID); ok { // re-baked meanwhile
		return snap, nil
	}
	tarball, err := base64.StdEncoding.DecodeString(full.Bundle)
	if err != nil {
		return store.Snapshot{}, err
	}
	s.log.Warn("functions: the warm snapshot is gone; baking it again", "function", fn.ID, "version", v.Version, "snapshot", full.SnapshotID)
	id, err := s.bake(ctx, fn.TeamID, fn.Name, full, tarball)
	if err != nil {
		return store.Snapshot{}, err
	}
	if ok, err := s.cfg.Store.SetFunctionVersionSnapshot(ctx, fn.ID, v.Version, full.SnapshotID, id); err != nil || !ok {
		s.dropSnapshot(ctx, fn.TeamID, id)
		if err == nil {
			err = errors.New("another bake of this version was recorded first: retry")
		}
		return store.Snapshot{}, err
	}
	if full.SnapshotID != "" {
		s.dropSnapshot(ctx, fn.TeamID, full.SnapshotID) // a down host deletes it at its reconcile
	}
	snap, _ := s.usableSnapshot(ctx, id)
	return snap, nil
}

// usableSnapshot loads snapshot id if it is not deleted and its host is up.
func (s *Service) usableSnapshot(ctx context.Context, id string) (store.Snapshot, bool) {
	snap, err := s.cfg.Store.GetSnapshot(ctx, id)
	if err != nil || snap.Deleted {
		return snap, false
	}
	h, err := s.cfg.Store.GetHost(ctx, snap.HostID)
	return snap, err == nil && h.State == store.HostUp
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// seal turns secrets into their stored form with the service's key (internal/sealed).
func (s *Service) seal(secrets map[string]string) (string, error) {
	return sealed.Seal(s.cfg.SecretsKey, secrets)
}

// unseal opens secrets sealed by seal.
func (s *Service) unseal(stored string) (map[string]string, error) {
	return sealed.Open(s.cfg.SecretsKey, stored)
}
