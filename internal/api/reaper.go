package api

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// Reaper tuning: a pass reads the expired rows reapBatch at a time and kills them on up to
// reapWorkers at once (each is a host call of up to sandboxes.KillTimeout). The next read is made
// as soon as all but the last reapWorkers kills of a batch have started, so it runs while those
// are under way: no batch waits for its slowest kill. reapWorkers stays at half of a replica's
// 32 store connections: with 64 (tried), a loaded machine's kills held the pool and heartbeats
// timed out behind them.
// The kills' records are written reapRecordBatch at a time (one statement each), as soon as that
// many are stopped, and the rest at the end of the pass.
const (
	reapWorkers     = 16
	reapBatch       = 100
	reapRecordBatch = 32
)

// reaper is the TTL reaper's state: the store lock that makes one replica the reaper.
type reaper struct {
	once sync.Once
	lock *store.Lock
}

func (s *Server) reapLock() *store.Lock {
	s.reaper.once.Do(func() { s.reaper.lock = s.store.NewLock("reaper") })
	return s.reaper.lock
}

// RunReaper kills expired sandboxes every ReapInterval until ctx ends (a pass that outlasts the
// interval is followed by the next at once). Of the replicas sharing a database only the one
// holding the reaper lock reaps; another takes over when it dies.
func (s *Server) RunReaper(ctx context.Context) {
	defer s.reapLock().Release()
	periodic.Every(ctx, s.cfg.ReapInterval, func() {
		if _, err := s.ReapOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("reaper failed", "err", err)
		}
	})
}

// ReapOnce kills every sandbox whose TTL has run out and returns how many it killed; a replica
// that does not hold the reaper lock kills none (another one reaps). Kills run in parallel; the
// first failure ends the pass after the kills under way (they keep ctx: a failure does not cut
// them short). Every sandbox stopped is recorded killed before it returns, failure or not.
func (s *Server) ReapOnce(ctx context.Context) (int, error) {
	if mine, err := s.reapLock().Hold(ctx); err != nil || !mine {
		return 0, err
	}
	g, failed := errgroup.WithContext(ctx) // failed ends at the first failure: no kill starts after it
	g.SetLimit(reapWorkers)
	rec := &reapRecords{s: s, ctx: ctx}
	var readErr error         // a read of the store that failed (the pass ends)
	seen := map[string]bool{} // rows this pass started (or ended) a kill of
	// A read asks for reapWorkers rows more than a batch: the kills still under way are expired
	// rows yet, and are skipped.
	const limit = reapBatch + reapWorkers
	for failed.Err() == nil {
		rows, err := s.store.ExpiredSandboxes(ctx, s.now(), limit)
		if err != nil {
			readErr = err
			break
		}
		var batch []store.Sandbox
		var ids []string
		for _, sb := range rows {
			if !seen[sb.ID] {
				seen[sb.ID] = true
				batch, ids = append(batch, sb), append(ids, sb.ID)
			}
		}
		if len(batch) == 0 {
			break
		}
		pausing, err := s.store.PausingOnTimeout(ctx, ids)
		if err != nil {
			readErr = err
			break
		}
		for _, sb := range batch {
			g.Go(func() error { // waits for a free worker
				if err := failed.Err(); err != nil {
					return err // a kill failed meanwhile
				}
				paused, err := s.svc.Expire(ctx, sb, pausing[sb.ID])
				if err != nil {
					return err
				}
				if paused {
					s.log.Info("sandbox expired: paused (it pauses on timeout)", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
					return nil
				}
				return rec.stopped(sb)
			})
		}
		if len(rows) < limit { // every expired row was read
			break
		}
	}
	err := g.Wait()
	err = cmp.Or(err, rec.flush(), readErr)
	return int(rec.killed.Load()), err
}

// reapRecords gathers the sandboxes a pass stopped and records them killed reapRecordBatch at a
// time: one statement a batch, not one a kill.
type reapRecords struct {
	s      *Server
	ctx    context.Context
	mu     sync.Mutex
	todo   []store.Sandbox
	killed atomic.Int64
}

// stopped adds sb, which its host stopped, and records the batch when it is full.
func (r *reapRecords) stopped(sb store.Sandbox) error {
	r.mu.Lock()
	r.todo = append(r.todo, sb)
	full := len(r.todo) >= reapRecordBatch
	r.mu.Unlock()
	if !full {
		return nil
	}
	return r.flush()
}

// flush records every stopped sandbox not recorded yet killed, and logs and counts each.
func (r *reapRecords) flush() error {
	r.mu.Lock()
	batch := r.todo
	r.todo = nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ids := make([]string, len(batch))
	for i, sb := range batch {
		ids[i] = sb.ID
	}
	if err := r.s.svc.RecordExpired(r.ctx, ids); err != nil {
		return err
	}
	now := r.s.now()
	for _, sb := range batch {
		r.s.log.Info("sandbox expired: killed", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
		r.s.metrics.reapedOne(now.Sub(sb.ExpiresAt))
	}
	r.killed.Add(int64(len(batch)))
	return nil
}
