// Package schedules runs cron schedules: a function invocation, or a command in a fresh sandbox
// of a template, at every instant a cron expression names in a time zone (DST honoured: see
// Cron). Every server replica runs an Engine over the same store; an instant fires once because
// a fire is claimed by inserting its (schedule, instant) row under a unique constraint. Runs are
// recorded (store.ScheduleRun). It calls the sandbox service (internal/sandboxes), never HTTP.
package schedules

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/background"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
)

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultGrace    = 2 * time.Minute
	// MaxOutput bounds the output a command run keeps (its tail).
	MaxOutput = 64 << 10
)

// FunctionInvoker runs a function for a schedule: the result's JSON, the invocation's run id,
// and whether it failed (with its message).
type FunctionInvoker interface {
	InvokeForSchedule(ctx context.Context, teamID, functionID string, payload json.RawMessage) (runID, output string, failed bool, err error)
}

// Config configures an Engine.
type Config struct {
	sandboxes.ProductDeps
	// Functions runs function targets (nil: a function schedule's run fails saying so).
	Functions FunctionInvoker
	// Now is the engine's clock; nil: the database's (store.DBNow), so that every replica sees
	// the same time.
	Now func() time.Time
	// Grace is how late an instant may be found and still run on time; older ones are missed
	// (the schedule's missed policy). Default 2 minutes.
	Grace time.Duration
}

// Engine finds due instants, claims them and runs them. Create with New.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	bg    *background.Group // runs in flight; their context is cancelled by Close
	check FunctionChecker   // nil: function targets refused
}

// New builds an engine.
func New(cfg Config) *Engine {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	defaults.Positive(&cfg.Grace, DefaultGrace)
	return &Engine{cfg: cfg, log: cfg.Logger, bg: background.New()}
}

// now is the engine's clock: the injected one, else the database's (the local clock if the
// database does not answer).
func (e *Engine) now() time.Time {
	if e.cfg.Now != nil {
		return e.cfg.Now().UTC()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t, err := e.cfg.Store.DBNow(ctx)
	if err != nil {
		return time.Now().UTC()
	}
	return t
}

// Run ticks every interval until ctx ends, then waits for the runs it started. It also ticks
// just after each minute boundary (cron's resolution), so that a run starts within
// milliseconds of its instant rather than up to an interval late.
func (e *Engine) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			e.Close()
			return
		case <-t.C:
		}
		if err := e.Tick(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("schedules: tick failed", "err", err)
		}
		now := time.Now()
		t.Reset(min(interval, now.Truncate(time.Minute).Add(time.Minute+20*time.Millisecond).Sub(now)))
	}
}

// Close cancels the runs in flight and waits for them to be recorded.
func (e *Engine) Close() { e.bg.Close() }

// Wait waits until no run this engine started is in flight (tests).
func (e *Engine) Wait() { e.bg.Wait() }

// Tick looks at every enabled schedule once: claims and starts what is due up to now, applies the
// missed policy to what is late or was skipped by a DST change, and starts queued runs whose
// predecessor has finished.
func (e *Engine) Tick(ctx context.Context) error {
	list, err := e.cfg.Store.ListEnabledSchedules(ctx)
	if err != nil {
		return err
	}
	now := e.now()
	for _, sc := range list {
		if err := e.tickOne(ctx, sc, now); err != nil {
			e.log.Warn("schedules: schedule pass failed", "schedule", sc.ID, "err", err)
		}
	}
	return nil
}

func (e *Engine) tickOne(ctx context.Context, sc store.Schedule, now time.Time) error {
	c, err := ParseCron(sc.Cron, sc.Timezone)
	if err != nil {
		return err // validated at create; a zone database without the zone keeps it idle
	}
	missedDone := false
	for _, in := range c.instants(sc.CheckedUntil, now) {
		fire := in.due && now.Sub(in.at) <= e.cfg.Grace
		if !fire && sc.Missed == "run_once" && !missedDone {
			// One run for all the instants missed in this pass, claimed under the first of them
			// (every replica that sees this window picks the same one).
			fire, missedDone = true, true
		}
		if fire {
			if _, err := e.claim(ctx, sc, "cron", in.at); err != nil {
				return err
			}
		}
	}
	if err := e.cfg.Store.AdvanceSchedule(ctx, sc.ID, now); err != nil {
		return err
	}
	// A run still "running" long past its timeout lost its replica (a crash, a kill -9): record
	// it failed, or overlap skip/queue would wait for it forever.
	if n, err := e.cfg.Store.ExpireScheduleRuns(ctx, sc.ID, now.Add(-e.runLimit(sc)), "the server running it stopped before it ended"); err != nil {
		return err
	} else if n > 0 {
		e.log.Warn("schedules: runs whose server stopped recorded failed", "schedule", sc.ID, "runs", n)
	}
	return e.startQueued(ctx, sc.ID)
}

// runLimit is how long a run of sc may be recorded running before it counts as abandoned: its
// timeout (a function's is at most 15 min) and ten minutes for its sandbox.
func (e *Engine) runLimit(sc store.Schedule) time.Duration {
	limit := time.Duration(sc.TimeoutSeconds) * time.Second
	if sc.FunctionID != "" {
		limit = 15 * time.Minute
	}
	return limit + 10*time.Minute
}

// claim records a run of sc for instant at (trigger cron or manual) and starts it when it is to
// run now. An instant already claimed (by another replica) returns the zero run.
func (e *Engine) claim(ctx context.Context, sc store.Schedule, trigger string, at time.Time) (store.ScheduleRun, error) {
	run, claimed, err := e.cfg.Store.ClaimScheduleRun(ctx, store.ScheduleRun{ID: auth.NewID("srun_"), ScheduleID: sc.ID,
		TeamID: sc.TeamID, Trigger: trigger, ScheduledFor: at}, sc.Overlap)
	if err != nil || !claimed {
		return run, err
	}
	e.log.Info("schedule fired", "schedule", sc.ID, "scheduled_for", at, "trigger", trigger, "status", run.Status)
	if run.Status == store.RunRunning {
		e.start(sc, run)
	}
	return run, nil
}

// startQueued starts the oldest queued run of a schedule if none is running.
func (e *Engine) startQueued(ctx context.Context, scheduleID string) error {
	run, ok, err := e.cfg.Store.StartQueuedRun(ctx, scheduleID)
	if err != nil || !ok {
		return err
	}
	sc, err := e.cfg.Store.GetSchedule(ctx, scheduleID)
	if err != nil {
		return err
	}
	e.start(sc, run)
	return nil
}

func (e *Engine) start(sc store.Schedule, run store.ScheduleRun) {
	e.bg.Go(func() {
		e.execute(e.bg.Ctx(), sc, run)
		if err := e.startQueued(context.WithoutCancel(e.bg.Ctx()), sc.ID); err != nil {
			e.log.Warn("schedules: starting a queued run failed", "schedule", sc.ID, "err", err)
		}
	})
}

// execute runs the target and records the run's end.
func (e *Engine) execute(ctx context.Context, sc store.Schedule, run store.ScheduleRun) {
	if sc.FunctionID != "" {
		e.runFunction(ctx, sc, &run)
	} else {
		e.runCommand(ctx, sc, &run)
	}
	if err := e.cfg.Store.FinishScheduleRun(context.WithoutCancel(ctx), run); err != nil {
		e.log.Error("schedules: could not record a run's end", "run", run.ID, "err", err)
	}
}

func (e *Engine) runFunction(ctx context.Context, sc store.Schedule, run *store.ScheduleRun) {
	if e.cfg.Functions == nil {
		run.Status, run.Error = store.RunFailed, "functions are not available on this server"
		return
	}
	runID, out, failed, err := e.cfg.Functions.InvokeForSchedule(ctx, sc.TeamID, sc.FunctionID, json.RawMessage(sc.Payload))
	run.FunctionRunID, run.Output = runID, tail(out)
	switch {
	case err != nil:
		run.Status, run.Error = store.RunFailed, err.Error()
	case failed:
		run.Status, run.Error = store.RunFailed, "the function failed (see its run)"
	default:
		run.Status = store.RunSucceeded
	}
}

// runCommand runs sc's command in a fresh sandbox of its template, then kills the sandbox.
func (e *Engine) runCommand(ctx context.Context, sc store.Schedule, run *store.ScheduleRun) {
	fail := func(err error) { run.Status, run.Error = store.RunFailed, err.Error() }
	recorded, agentName, host, err := e.cfg.Templates.Resolve(ctx, sc.TeamID, sc.Template)
	if err != nil {
		fail(err)
		return
	}
	timeout := time.Duration(sc.TimeoutSeconds) * time.Second
	sb, err := e.cfg.Sandboxes.Create(ctx, sc.TeamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName,
		TemplateHost: host, Metadata: map[string]string{"pandastack.schedule": sc.ID, "pandastack.schedule_run": run.ID},
		TTLSeconds: int64(timeout/time.Second) + 300})
	if err != nil {
		fail(err)
		return
	}
	run.SandboxID = sb.ID
	if err := e.cfg.Store.SetScheduleRunSandbox(ctx, run.ID, sb.ID, ""); err != nil {
		e.log.Warn("schedules: could not record a run's sandbox", "run", run.ID, "err", err)
	}
	defer func() {
		if err := e.cfg.Sandboxes.Kill(context.WithoutCancel(ctx), sb, "schedule run finished"); err != nil {
			e.log.Warn("schedules: could not kill a run's sandbox", "sandbox", sb.ID, "err", err)
		}
	}()
	c, err := e.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		fail(err)
		return
	}
	secs := timeout.Seconds()
	res, err := c.Exec(ctx, sb.ID, agentclient.ExecRequest{Cmd: sc.Cmd, TimeoutSeconds: &secs})
	if err != nil {
		fail(err)
		return
	}
	run.ExitCode, run.Output = int64(res.ExitCode), tail(res.Stdout+res.Stderr)
	switch {
	case res.TimedOut:
		run.Status, run.Error = store.RunTimedOut, "the command ran past its timeout and was killed"
	case res.ExitCode != 0:
		run.Status, run.Error = store.RunFailed, "the command exited with a non-zero status"
	default:
		run.Status = store.RunSucceeded
	}
}

// tail keeps the last MaxOutput bytes of s.
func tail(s string) string {
	if len(s) > MaxOutput {
		return s[len(s)-MaxOutput:]
	}
	return s
}
