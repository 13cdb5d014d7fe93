package database

import (
	"context"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// Scale to zero: a database no client has been connected to for its suspend_after_seconds is
// hibernated (its VM's memory to disk, the VM stopped); the next connection through the router
// or the broker wakes it (its host wakes a hibernated sandbox for any call) and is held until
// postgres answers.

// DefaultSuspendInterval is how often idle databases are looked for.
const DefaultSuspendInterval = 5 * time.Second

// StateSuspended is a database whose VM is hibernated.
const StateSuspended = "suspended"

// activity is this replica's view of the databases' client connections.
type activity struct {
	mu    sync.Mutex
	open  map[string]int       // connections open now, per database
	last  map[string]time.Time // when a connection last opened or closed
	start time.Time            // the service's start: a database unseen since is idle from then
}

// Active is told when a client connection to database id opens (delta 1) or closes (-1).
func (s *Service) Active(id string, delta int) {
	a := &s.act
	a.mu.Lock()
	defer a.mu.Unlock()
	a.open[id] += delta
	if a.open[id] <= 0 {
		delete(a.open, id)
	}
	a.last[id] = time.Now()
}

// idleSince is when database d last had a client on this replica, or -1 when one is connected.
func (s *Service) idleSince(d store.Database) (time.Time, bool) {
	a := &s.act
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open[d.ID] > 0 {
		return time.Time{}, false
	}
	t, ok := a.last[d.ID]
	if !ok {
		t = a.start
		if d.CreatedAt.After(t) {
			t = d.CreatedAt
		}
	}
	return t, true
}

// forgetOthers drops what is known of databases not in list that have no connection open (deleted
// ones, names a client made up, ones that never suspend): the maps stay the size of the fleet.
func (s *Service) forgetOthers(list []store.Database) {
	keep := make(map[string]bool, len(list))
	for _, d := range list {
		keep[d.ID] = true
	}
	a := &s.act
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.last {
		if !keep[id] && a.open[id] == 0 {
			delete(a.last, id)
		}
	}
}

// SuspendIdle hibernates every database whose VM is running and that has had no client for its
// suspend_after_seconds (0: never), and returns how many it hibernated.
func (s *Service) SuspendIdle(ctx context.Context) (int, error) {
	list, err := s.cfg.Store.ListSuspendableDatabases(ctx)
	if err != nil {
		return 0, err
	}
	s.forgetOthers(list)
	n := 0
	for _, d := range list {
		since, idle := s.idleSince(d)
		if !idle || time.Since(since) < time.Duration(d.SuspendAfterSeconds)*time.Second {
			continue
		}
		sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
		if err != nil || sb.State != store.StateRunning {
			continue
		}
		if s.archiving() { // what is archived leaves before the VM sleeps
			if _, err := s.drain(ctx, d, sb); err != nil {
				s.log.Warn("database: draining archived WAL before suspending failed", "database", d.ID, "err", err)
			}
		}
		if _, err := s.cfg.Sandboxes.Hibernate(ctx, sb); err != nil {
			s.log.Warn("database: could not suspend an idle database", "database", d.ID, "sandbox", sb.ID, "err", err)
			continue
		}
		s.log.Info("database suspended (idle)", "database", d.ID, "idle_seconds", int(time.Since(since).Seconds()))
		n++
	}
	return n, nil
}

// RunSuspender suspends idle databases every interval (0: DefaultSuspendInterval) until ctx ends.
func (s *Service) RunSuspender(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultSuspendInterval
	}
	s.every(ctx, interval, "looking for idle databases", s.SuspendIdle)
}

// every runs pass every interval until ctx ends; a failed pass is logged as what failed.
func (s *Service) every(ctx context.Context, interval time.Duration, what string, pass func(context.Context) (int, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := pass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("database: "+what+" failed", "err", err)
			}
		}
	}
}

// withState is d with its state as its VM has it: suspended while hibernated.
func (s *Service) withState(ctx context.Context, d store.Database) store.Database {
	if sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID); err == nil && sb.State == store.StateHibernated {
		d.State = StateSuspended
	}
	return d
}
