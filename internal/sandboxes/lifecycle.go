package sandboxes

import (
	"context"
	"errors"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/store"
)

// A sandbox's life after its create: snapshots, hibernate and wake, kill, and the record kept
// following the state its host reports (the host may hibernate an idle sandbox by itself, and any
// call on a hibernated sandbox wakes it).

// LifecycleTimeout bounds one fork, snapshot, hibernate or wake on a host (restores on a
// software-emulated CPU are slow). Like creates, they run detached from the caller's
// cancellation so that what a host made is always recorded or undone.
const LifecycleTimeout = 10 * time.Minute

// RefreshTimeout bounds a state check on a sandbox's host.
const RefreshTimeout = 2 * time.Second

// KillTimeout bounds a kill (or a snapshot delete) on a host.
const KillTimeout = 30 * time.Second

// Target returns a client for the host of a sandbox that calls can reach (running, or
// hibernated: its host wakes it); else why not (errdefs.Conflict).
func (s *Service) Target(ctx context.Context, sb store.Sandbox) (*agentclient.Client, error) {
	if err := Usable(sb); err != nil {
		return nil, err
	}
	return s.Client(ctx, sb)
}

// Metrics returns a running sandbox's resource figures from its host. A hibernated sandbox has
// none (a conflict): reading them neither wakes it nor counts as use.
func (s *Service) Metrics(ctx context.Context, sb store.Sandbox) (agentclient.SandboxMetrics, error) {
	if sb.State == store.StateHibernated {
		return agentclient.SandboxMetrics{}, errdefs.Conflictf("sandbox %s is hibernated: it has figures again once it wakes", sb.ID)
	}
	c, err := s.Target(ctx, sb)
	if err != nil {
		return agentclient.SandboxMetrics{}, err
	}
	m, err := c.SandboxMetrics(ctx, sb.ID)
	if isAgentStatus(err, errdefs.Conflict) {
		s.Refresh(ctx, sb, c, RefreshTimeout) // hibernated or stopped meanwhile: the record follows
	}
	return m, err
}

// Snapshot snapshots a usable sandbox on its host (waking it if hibernated) and records the
// snapshot; a snapshot the store fails to record is deleted on the host again. The host copies
// the sandbox's volumes with it (SnapshotVolumes) and publishes the copies with the snapshot when
// it has a blob store, so it restores on any host. A sandbox with a read-only volume is refused
// (copyableVolumes).
func (s *Service) Snapshot(ctx context.Context, sb store.Sandbox) (store.Snapshot, error) {
	c, err := s.Target(ctx, sb)
	if err == nil {
		_, err = s.copyableVolumes(ctx, sb, "snapshots")
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
	defer cancel()
	sn, err := c.CreateSnapshot(ctx, sb.ID)
	s.Touched(ctx, sb, c, err) // a hibernated sandbox was woken for its snapshot
	if err != nil {
		return store.Snapshot{}, err
	}
	faultpoint.Reach("server.snapshot.taken") // on the host, unrecorded
	tmpl := sb.Template
	if sn.Template != "" {
		tmpl = sn.Template
	}
	rec, err := s.store.CreateSnapshot(ctx, store.Snapshot{ID: sn.ID, TeamID: sb.TeamID, SandboxID: sb.ID, HostID: sb.HostID,
		Template: tmpl, SizeBytes: sn.SizeBytes, CreatedAt: s.clock(), Published: sn.Published, Owner: sb.Owner})
	if err != nil {
		// An unrecorded snapshot would only take disk: drop it.
		if derr := c.DeleteSnapshot(ctx, sn.ID); derr != nil {
			s.log.Error("could not delete a snapshot the store failed to record", "snapshot", sn.ID, "host", sb.HostID, "err", derr)
		}
		return store.Snapshot{}, err
	}
	s.log.Info("snapshot taken", "sandbox", sb.ID, "snapshot", rec.ID, "host", rec.HostID, "size_bytes", rec.SizeBytes, "published", rec.Published)
	return rec, nil
}

// DeleteSnapshot records the team's snapshot deleted, then deletes it on its host. Sandboxes made
// from it keep running (the host keeps its files until the last of them is gone). A host that is
// down or does not answer does not block the delete: its next reconcile deletes the snapshot
// there. Deleting it again is not an error; another team's is NotFound like a missing one.
func (s *Service) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	sn, err := s.store.GetSnapshot(ctx, id)
	if err := ownedBy(err, teamID, sn.TeamID, "snapshot", id); err != nil || sn.Deleted {
		return err
	}
	if err := s.store.DeleteSnapshot(ctx, teamID, sn.ID); err != nil {
		return err
	}
	err = s.onHost(ctx, sn.HostID, KillTimeout, func(ctx context.Context, c *agentclient.Client) error {
		return c.DeleteSnapshot(ctx, sn.ID)
	})
	if err != nil && err != errHostDown && !isAgentStatus(err, errdefs.NotFound) {
		s.log.Warn("deleting a snapshot on its host failed; recorded deleted, the host's reconcile will delete it",
			"snapshot", sn.ID, "host", sn.HostID, "err", err)
	}
	return nil
}

// onHost runs call against hostID's agent, detached from ctx's cancellation and bounded by
// timeout, when that host is known and up as placement sees it (Scheduler.Host); otherwise it
// returns why not (the store's error, or errHostDown).
func (s *Service) onHost(ctx context.Context, hostID string, timeout time.Duration, call func(context.Context, *agentclient.Client) error) error {
	h, err := s.sched.Host(ctx, hostID)
	if err != nil {
		return err
	}
	if h.State != store.HostUp {
		return errHostDown
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return call(ctx, s.sched.Client(h))
}

// errHostDown: the host is not up; a call to it was not tried.
var errHostDown = errors.New("host is down")

// isAgentStatus says whether err is a host agent's refusal with kind k's status.
func isAgentStatus(err error, k errdefs.Kind) bool {
	var ae *agentclient.Error
	return errors.As(err, &ae) && ae.Status == k.Status()
}

// Hibernate saves a usable sandbox's memory on its host and stops its VM, and returns the sandbox
// in the state its host reports.
func (s *Service) Hibernate(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	return s.lifecycle(ctx, sb, (*agentclient.Client).Hibernate)
}

// Wake restores a hibernated sandbox (a running one stays running) and returns it in the state
// its host reports.
func (s *Service) Wake(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	return s.lifecycle(ctx, sb, (*agentclient.Client).Wake)
}

func (s *Service) lifecycle(ctx context.Context, sb store.Sandbox, call func(*agentclient.Client, context.Context, string) (agentclient.Sandbox, error)) (store.Sandbox, error) {
	c, err := s.Target(ctx, sb)
	if err != nil {
		return sb, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
	defer cancel()
	a, err := call(c, ctx, sb.ID)
	if err != nil {
		s.Refresh(ctx, sb, c, RefreshTimeout) // a failed wake leaves it in state error
		return sb, err
	}
	return s.Follow(ctx, sb, a), nil
}

// SetTTL makes a usable sandbox expire ttlSeconds from now (and records that as its ttl policy,
// which its forks inherit), and returns it as recorded.
func (s *Service) SetTTL(ctx context.Context, sb store.Sandbox, ttlSeconds int64) (store.Sandbox, error) {
	if err := Usable(sb); err != nil {
		return sb, err
	}
	ok, err := s.store.SetSandboxExpiry(ctx, sb.ID, s.clock().Add(time.Duration(ttlSeconds)*time.Second), ttlSeconds)
	if err == nil && !ok {
		err = errdefs.Conflictf("sandbox %s was killed", sb.ID)
	}
	if err != nil {
		return sb, err
	}
	return s.store.GetSandbox(ctx, sb.ID)
}

// Current is the record brought up to date from the sandbox's host when it is running or
// hibernated there (the host may have hibernated it for idleness, or it may have failed): one
// cheap call, skipped when the host is down or slow.
func (s *Service) Current(ctx context.Context, sb store.Sandbox) store.Sandbox {
	if !sandboxstate.State(sb.State).Reachable() {
		return sb
	}
	if h, err := s.store.GetHost(ctx, sb.HostID); err == nil && h.State == store.HostUp {
		return s.Refresh(ctx, sb, s.sched.Client(h), RefreshTimeout)
	}
	return sb
}

// Expire ends a sandbox whose timeout ran out: it is stopped on its host, or, when it pauses on
// timeout (E2B's lifecycle.onTimeout "pause", store.PausesOnTimeout) and is running, hibernated
// and given the longest lifetime (a call or a connect wakes it; the next timeout of a hibernated
// one kills it). pauses is what the store says of it (store.PausingOnTimeout: the reaper reads a
// batch's at once); paused reports which was done. A stopped sandbox is not recorded killed here:
// the caller records a batch of them at once with RecordExpired (until then its row is expired
// and not final, so a later pass stops it again — a host answers that for a gone sandbox too).
func (s *Service) Expire(ctx context.Context, sb store.Sandbox, pauses bool) (paused bool, err error) {
	if sb.State == store.StateRunning && pauses {
		if _, err := s.Hibernate(ctx, sb); err != nil {
			s.log.Warn("pausing an expired sandbox failed; killing it", "sandbox", sb.ID, "err", err)
			return false, s.Kill(ctx, sb, "ttl expired (pause failed)")
		}
		_, err := s.store.SetSandboxExpiry(ctx, sb.ID, s.clock().Add(s.maxTTL), 0)
		return true, err
	}
	if !sandboxstate.State(sb.State).Final() {
		s.stop(ctx, sb)
	}
	return false, nil
}

// RecordExpired records the sandboxes of ids, which Expire stopped, killed in one statement.
func (s *Service) RecordExpired(ctx context.Context, ids []string) error {
	_, err := s.store.SetSandboxesState(context.WithoutCancel(ctx), ids, store.StateKilled, "ttl expired")
	if err == nil {
		s.DropSandboxVolumes(ctx, ids...)
	}
	return err
}

// Kill stops a sandbox on its host (if the host is up) and records it killed with reason. A host
// that cannot be reached does not block the kill: the sandbox is recorded killed, and the host's
// next reconcile stops the VM. Killing a killed sandbox does nothing.
func (s *Service) Kill(ctx context.Context, sb store.Sandbox, reason string) error {
	if sandboxstate.State(sb.State).Final() {
		return nil
	}
	s.stop(ctx, sb)
	_, err := s.store.SetSandboxState(context.WithoutCancel(ctx), sb.ID, store.StateKilled, reason)
	if err == nil {
		s.DropSandboxVolumes(ctx, sb.ID)
	}
	return err
}

// stop kills sb's VM on its host, if it has one and the host is up; a failure is logged (the
// host's reconcile stops a VM whose record is killed).
func (s *Service) stop(ctx context.Context, sb store.Sandbox) {
	if sb.HostID == "" {
		return
	}
	freed := func(bool) {}
	if sb.State == store.StateRunning { // its slot is free before the host's next report says so
		freed = s.sched.Freeing(sb.HostID, sb.ID, s.sched.TemplateMemMiB(ctx, sb.Template))
	}
	err := s.onHost(ctx, sb.HostID, KillTimeout, func(ctx context.Context, c *agentclient.Client) error {
		return c.KillSandbox(ctx, sb.ID)
	})
	freed(err == nil)
	if err != nil && err != errHostDown {
		s.log.Warn("killing on the host failed; recorded killed, the host's reconcile will stop it", "sandbox", sb.ID, "host", sb.HostID, "err", err)
	}
}

// Follow makes the record take the state the host reports for the sandbox (running, hibernated,
// or error with its reason), if the record is still in the state it was read in. It returns the
// record as it now is.
func (s *Service) Follow(ctx context.Context, sb store.Sandbox, a agentclient.Sandbox) store.Sandbox {
	sb = s.follow(ctx, sb, a)
	if sb.State == store.StateHibernated && a.Hibernated != sb.HibernatedImage {
		// The host published the hibernation: the sandbox now outlives that host.
		if ok, err := s.store.SetHibernatedImage(context.WithoutCancel(ctx), sb.ID, a.Hibernated); err != nil {
			s.log.Warn("could not record a hibernated sandbox's published image", "sandbox", sb.ID, "err", err)
		} else if ok {
			sb.HibernatedImage = a.Hibernated
		}
	}
	return sb
}

func (s *Service) follow(ctx context.Context, sb store.Sandbox, a agentclient.Sandbox) store.Sandbox {
	from, to := sandboxstate.State(sb.State), sandboxstate.State(a.State)
	reason := ""
	switch to {
	case sandboxstate.Running, sandboxstate.Hibernated:
	case sandboxstate.Error:
		reason = a.Error
		if reason == "" {
			reason = "the host reports an error"
		}
	default:
		return sb
	}
	if to == from && reason == sb.Error || !sandboxstate.CanMove(from, to) {
		return sb
	}
	ctx = context.WithoutCancel(ctx)
	ok, err := s.store.SetSandboxState(ctx, sb.ID, string(to), reason, sb.State)
	if err != nil {
		s.log.Warn("could not record a sandbox's state from its host", "sandbox", sb.ID, "state", to, "err", err)
		return sb
	}
	if !ok { // changed meanwhile: answer what is recorded now
		if cur, err := s.store.GetSandbox(ctx, sb.ID); err == nil {
			return cur
		}
		return sb
	}
	sb.State, sb.Error = string(to), reason
	return sb
}

// Refresh asks the sandbox's host for its state and follows it. Any failure (the host slow or
// not answering, the sandbox unknown there: the reconcile decides about that) keeps the record.
func (s *Service) Refresh(ctx context.Context, sb store.Sandbox, c *agentclient.Client, timeout time.Duration) store.Sandbox {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	a, err := c.GetSandbox(rctx, sb.ID)
	if err != nil {
		s.log.Debug("sandbox state check on its host failed; answering the record", "sandbox", sb.ID, "err", err)
		return sb
	}
	return s.Follow(ctx, sb, a)
}

// Touched updates the record after a call went to the sandbox's host: a hibernated sandbox was
// woken by it, so it is running; a call that failed on a hibernated sandbox, or that the host
// refused as a conflict, may have left it in state error (a wake that failed), so ask.
func (s *Service) Touched(ctx context.Context, sb store.Sandbox, c *agentclient.Client, callErr error) {
	switch {
	case callErr == nil && sb.State == store.StateHibernated:
		if _, err := s.store.SetSandboxState(context.WithoutCancel(ctx), sb.ID, store.StateRunning, "", store.StateHibernated); err != nil {
			s.log.Warn("could not record a woken sandbox running", "sandbox", sb.ID, "err", err)
		}
	case callErr != nil && (sb.State == store.StateHibernated || isAgentStatus(callErr, errdefs.Conflict)):
		s.Refresh(ctx, sb, c, RefreshTimeout)
	}
}
