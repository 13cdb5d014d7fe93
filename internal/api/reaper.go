package api

import (
	"context"
	"sync"

	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// Reaper tuning: a pass reads the expired rows reapBatch at a time and kills them on up to
// reapWorkers at once (each is a host call of up to sandboxes.KillTimeout). The next read is made
// as soon as all but the last reapWorkers kills of a batch have started, so it runs while those
// are under way: no batch waits for its slowest kill. reapWorkers stays at half of a replica's
// 32 store connections: with 64 (tried), a loaded machine's kills held the pool and heartbeats
// timed out behind them.
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
// first failure ends the pass after the kills under way.
func (s *Server) ReapOnce(ctx context.Context) (int, error) {
	if mine, err := s.reapLock().Hold(ctx); err != nil || !mine {
		return 0, err
	}
	p := &reapPass{s: s, slots: make(chan struct{}, reapWorkers)}
	seen := map[string]bool{} // rows this pass started (or ended) a kill of
	// A read asks for reapWorkers rows more than a batch: the kills still under way are expired
	// rows yet, and are skipped.
	const limit = reapBatch + reapWorkers
	for p.err() == nil {
		rows, err := s.store.ExpiredSandboxes(ctx, s.now(), limit)
		if err != nil {
			p.fail(err)
			break
		}
		var batch []store.Sandbox
		for _, sb := range rows {
			if !seen[sb.ID] {
				seen[sb.ID] = true
				batch = append(batch, sb)
			}
		}
		if len(batch) == 0 {
			break
		}
		ids := make([]string, len(batch))
		for i, sb := range batch {
			ids[i] = sb.ID
		}
		pausing, err := s.store.PausingOnTimeout(ctx, ids)
		if err != nil {
			p.fail(err)
			break
		}
		for _, sb := range batch {
			if !p.start(ctx, sb, pausing[sb.ID]) {
				break
			}
		}
		if len(rows) < limit { // every expired row was read
			break
		}
	}
	p.wg.Wait()
	return p.n, p.first
}

// reapPass is one pass's kills under way, how many killed and its first error.
type reapPass struct {
	s     *Server
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	n     int
	first error
}

func (p *reapPass) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first
}

func (p *reapPass) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first == nil {
		p.first = err
	}
}

// start begins expiring sb once one of the pass's workers is free; false (nothing started) once a
// kill of the pass has failed.
func (p *reapPass) start(ctx context.Context, sb store.Sandbox, pauses bool) bool {
	p.slots <- struct{}{}
	if p.err() != nil {
		<-p.slots
		return false
	}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.slots; p.wg.Done() }()
		s := p.s
		paused, err := s.svc.Expire(ctx, sb, pauses)
		if err != nil {
			p.fail(err)
			return
		}
		if paused {
			s.log.Info("sandbox expired: paused (it pauses on timeout)", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
			return
		}
		s.log.Info("sandbox expired: killed", "sandbox", sb.ID, "team", sb.TeamID, "expires_at", sb.ExpiresAt)
		s.metrics.reapedOne(s.now().Sub(sb.ExpiresAt))
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}()
	return true
}
