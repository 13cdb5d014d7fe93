package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
)

// DefaultUnrecordedGrace is how long reconcile must have seen a sandbox on a host without a
// record before it kills it as an orphan.
//
// Why this never kills a create in flight (on this server or another): a sandbox is on its host
// before its record only while internal/sandboxes makes it — a create (create.go: the host call,
// the guest CA install, then the record) or a from-snapshot create runs all of that under one
// context of sandboxes.CreateTimeout (15 min) taken before the first host call; a fork (host
// fork, then the children's records) under sandboxes.LifecycleTimeout (10 min). A wake on
// another host keeps its record (same id). Reconcile notes the first time it sees an id without
// a record as the time the host's list had answered: the VM was on the host by then, so the
// create that made it had started before. It kills the id only in a later round whose list
// answered at least the grace after that, and only when the store, read after that list, still
// has no record. By then the creating server's context ran out at least grace − 15 min ago:
// the create either wrote its record (the read finds it: nothing is killed) or gave up for
// good. 20 min leaves 5 min for a record statement caught at its deadline. Times are this
// process's own (monotonic) clock, not the host's, so host clock skew does not matter; ids are
// random and never reused, so no sighting predates its create; a replica restart or the
// reconciler lock moving to another replica only starts the wait again. The doctor reports such
// sandboxes only past the same grace (by the host's created_at), so its repair cannot kill a
// create in flight either (a test in internal/sandboxes checks the grace against the timeouts).
const DefaultUnrecordedGrace = 20 * time.Minute

// orphans is what reconcile knows of sandboxes found on hosts with no record.
type orphans struct {
	mu     sync.Mutex
	seen   map[string]map[string]time.Time // host -> sandbox -> first seen without a record
	killed atomic.Int64
}

// since is when this process's reconcile first saw sandbox id on host without a record.
func (o *orphans) since(hostID, id string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.seen[hostID][id]
	return t, ok
}

// set replaces what is known of host's unrecorded sandboxes (those gone, recorded or killed
// are forgotten).
func (o *orphans) set(hostID string, seen map[string]time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(seen) == 0 {
		delete(o.seen, hostID)
		return
	}
	o.seen[hostID] = seen
}

// killOrphan handles sandbox sb that host h ran, as listed at at, with no record in the store:
// it is killed there once it has been seen so for UnrecordedGrace (see DefaultUnrecordedGrace),
// else left. It returns when it was first seen and whether to keep watching it (not killed).
func (s *Scheduler) killOrphan(ctx context.Context, h store.Host, sb agentclient.Sandbox, at time.Time) (time.Time, bool) {
	first, ok := s.orphans.since(h.ID, sb.ID)
	if !ok {
		first = at
	}
	if at.Sub(first) < s.cfg.UnrecordedGrace {
		return first, true
	}
	if err := s.Client(h).KillSandbox(ctx, sb.ID); err != nil {
		s.cfg.Logger.Warn("killing an orphan sandbox (no record) failed; tried again next reconcile", "sandbox", sb.ID, "host", h.ID, "err", err)
		return first, true
	}
	s.orphans.killed.Add(1)
	s.cfg.Logger.Warn("killed an orphan sandbox: its host ran it with no record (a create or fork whose server died before recording it)",
		"sandbox", sb.ID, "host", h.ID, "template", sb.Template, "host_created_at", sb.CreatedAt,
		"unrecorded_for", at.Sub(first).Round(time.Second), "grace", s.cfg.UnrecordedGrace)
	return time.Time{}, false
}

// OrphansKilled is how many sandboxes this process's reconcile killed for having no record.
func (s *Scheduler) OrphansKilled() int64 { return s.orphans.killed.Load() }

// UnrecordedGrace is how long a sandbox must be seen without a record before reconcile kills it.
func (s *Scheduler) UnrecordedGrace() time.Duration { return s.cfg.UnrecordedGrace }

// UnrecordedFor is how long ago this process's reconcile first saw sandbox id on host without a
// record (false: it has not, or no longer does).
func (s *Scheduler) UnrecordedFor(hostID, id string) (time.Duration, bool) {
	first, ok := s.orphans.since(hostID, id)
	if !ok {
		return 0, false
	}
	return s.cfg.Now().Sub(first), true
}
