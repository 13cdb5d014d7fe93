package api

import (
	"context"
	"sync"

	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// Reaper tuning: kills of one pass run on up to reapWorkers at once (each is a host call of up to
// sandboxes.KillTimeout), in batches of reapBatch expired rows.
const (
	reapWorkers = 16
	reapBatch   = 100
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

// RunReaper kills expired sandboxes every ReapInterval until ctx ends. Of the replicas sharing a
// database only the one holding the reaper lock reaps; another takes over when it dies.
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
// first failure ends the pass after the kills under way.
func (s *Server) ReapOnce(ctx context.Context) (int, error) {
	if mine, err := s.reapLock().Hold(ctx); err != nil || !mine {
		return 0, err
	}
	n := 0
	for {
		batch, err := s.store.ExpiredSandboxes(ctx, s.now(), reapBatch)
		if err != nil || len(batch) == 0 {
			return n, err
		}
		killed, err := s.reapBatch(ctx, batch)
		n += killed
		if err != nil || len(batch) < reapBatch {
			return n, err
		}
	}
}

// reapBatch kills batch on up to reapWorkers at once and returns how many it killed and the
// first error (no new kill starts after one).
func (s *Server) reapBatch(ctx context.Context, batch []store.Sandbox) (int, error) {
	var (
		mu    sync.Mutex
		n     int
		first error
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, reapWorkers)
	for _, sb := range batch {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		slots <- struct{}{}
		wg.Add(1)
		go func(sb store.Sandbox) {
			defer func() { <-slots; wg.Done() }()
			paused, err := s.svc.Expire(ctx, sb)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			if paused {
				s.log.Info("sandbox expired: paused (it pauses on timeout)", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
				return
			}
			s.log.Info("sandbox expired: killed", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
			s.metrics.reapedOne()
			n++
		}(sb)
	}
	wg.Wait()
	return n, first
}
