package database

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
)

// Scale to zero: a database no client has been connected to — through any server replica — for
// its suspend_after_seconds is hibernated (its VM's memory to disk, the VM stopped); the next connection through the router
// or the broker wakes it (its host wakes a hibernated sandbox for any call) and is held until
// postgres answers.

// DefaultSuspendInterval is how often idle databases are looked for.
const DefaultSuspendInterval = 5 * time.Second

// CancelKeyLifetime is how long a connection's cancel key is kept for the other replicas when the
// replica it came through died without deleting it.
const CancelKeyLifetime = 24 * time.Hour

// StateSuspended is a database whose VM is hibernated.
const StateSuspended = "suspended"

// activity is this replica's view of the databases' client connections, and what the other
// replicas reported at the last pass (store.ReportDatabaseClients): a database is idle only when
// no replica has a client on it, since its last client anywhere.
type activity struct {
	mu      sync.Mutex
	replica string               // this replica's name in the reports
	open    map[string]int       // connections open now, per database
	last    map[string]time.Time // when a connection last opened or closed
	dirty   map[string]bool      // databases whose connections changed since the last report
	start   time.Time            // the service's start: a database unseen since is idle from then
	// As of the last pass: clients other replicas have, and the last client anywhere.
	elsewhere    map[string]int
	lastAnywhere map[string]time.Time
	staleAfter   time.Duration // a report older than this is a replica that is gone
}

func newActivity() activity {
	return activity{replica: auth.NewID("r_"), open: map[string]int{}, last: map[string]time.Time{}, dirty: map[string]bool{},
		start: time.Now(), staleAfter: 3 * DefaultSuspendInterval}
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
	a.dirty[id] = true
}

// share reports this replica's clients (those that changed, and renews those open) and reads
// the other replicas' reports.
func (s *Service) share(ctx context.Context) error {
	a := &s.act
	a.mu.Lock()
	open, last := map[string]int{}, map[string]time.Time{}
	for id := range a.dirty {
		open[id], last[id] = a.open[id], a.last[id]
	}
	maps.Copy(open, a.open)
	dirty := a.dirty
	a.dirty = map[string]bool{}
	replica, staleAfter := a.replica, a.staleAfter
	a.mu.Unlock()
	now := s.cfg.Store.Clock(ctx)
	err := s.cfg.Store.ReportDatabaseClients(ctx, replica, now, open, last, now.Add(-staleAfter))
	var elsewhere map[string]int
	var lastAnywhere map[string]time.Time
	if err == nil {
		elsewhere, err = s.cfg.Store.DatabaseClientsElsewhere(ctx, replica, now.Add(-staleAfter))
	}
	if err == nil {
		lastAnywhere, err = s.cfg.Store.DatabaseLastClients(ctx)
	}
	if err == nil { // the router's shared cancel keys that their replica did not delete (it died)
		_, err = s.cfg.Store.PruneCancelKeys(ctx, now.Add(-CancelKeyLifetime))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		maps.Copy(a.dirty, dirty) // reported at the next pass
		return err
	}
	a.elsewhere, a.lastAnywhere = elsewhere, lastAnywhere
	return nil
}

// idleSince is when database d last had a client on any replica, or false while one has.
func (s *Service) idleSince(d store.Database) (time.Time, bool) {
	a := &s.act
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open[d.ID] > 0 || a.elsewhere[d.ID] > 0 {
		return time.Time{}, false
	}
	t, ok := a.last[d.ID]
	if other, known := a.lastAnywhere[d.ID]; known && other.After(t) {
		t, ok = other, true
	}
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
			delete(a.dirty, id)
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
	if err := s.share(ctx); err != nil {
		return 0, fmt.Errorf("sharing client counts with the other replicas: %w (nothing suspended)", err)
	}
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
			if _, err := s.drain(ctx, d, sb, true); err != nil {
				s.log.Warn("database: draining archived WAL before suspending failed", "database", d.ID, "err", err)
			}
		}
		if _, err := s.cfg.Sandboxes.Hibernate(ctx, sb); err != nil {
			s.log.Warn("database: could not suspend an idle database", "database", d.ID, "sandbox", sb.ID, "err", err)
			continue
		}
		idleFor := int64(time.Since(since).Seconds())
		s.log.Info("database suspended (idle)", "database", d.ID, "idle_seconds", idleFor)
		s.event(ctx, d, store.DatabaseEvent{Type: webhooks.DatabaseSuspended, IdleSeconds: idleFor})
		n++
	}
	return n, nil
}

// RunSuspender suspends idle databases every interval (0: DefaultSuspendInterval) until ctx ends.
func (s *Service) RunSuspender(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultSuspendInterval
	}
	s.act.mu.Lock()
	s.act.staleAfter = 3 * interval
	s.act.mu.Unlock()
	s.every(ctx, interval, "looking for idle databases", s.SuspendIdle)
}

// every runs pass every interval until ctx ends; a failed pass is logged as what failed.
func (s *Service) every(ctx context.Context, interval time.Duration, what string, pass func(context.Context) (int, error)) {
	periodic.Every(ctx, interval, func() {
		if _, err := pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("database: "+what+" failed", "err", err)
		}
	})
}

// withState is d with its state as its VM has it: suspended while hibernated.
func (s *Service) withState(ctx context.Context, d store.Database) store.Database {
	if sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID); err == nil && sb.State == store.StateHibernated {
		d.State = StateSuspended
	}
	return d
}
