package api

import (
	"context"
	"time"

	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// Defaults of the killed-sandbox prune.
const (
	DefaultKilledRetention     = 7 * 24 * time.Hour
	DefaultKilledPruneInterval = time.Hour
)

// RunKilledPruner deletes the records of sandboxes killed longer than the retention ago, once at
// start and every KilledPruneInterval, until ctx ends.
func (s *Server) RunKilledPruner(ctx context.Context) {
	pass := func() {
		n, err := s.PruneKilled(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("killed sandboxes: prune failed", "err", err, "pruned", n)
		case n > 0:
			s.log.Info("killed sandboxes: pruned old records", "sandboxes", n, "retention", s.cfg.KilledRetention.String())
		}
	}
	pass()
	periodic.Every(ctx, s.cfg.KilledPruneInterval, pass)
}

// PruneKilled deletes, store.PruneKilledBatch rows a statement, the killed sandboxes whose record
// last changed more than KilledRetention ago (except those a snapshot, database or app deployment
// still points at: store.PruneKilledSandboxes), and returns how many went. Of the replicas
// sharing a database one prunes at a time: a replica that finds the prune lock held prunes
// nothing. The lock is let go after the pass (it is hourly work: no session is kept for it).
func (s *Server) PruneKilled(ctx context.Context) (int64, error) {
	mine, err := s.pruneLock.Hold(ctx)
	if err != nil || !mine {
		return 0, err
	}
	defer s.pruneLock.Release()
	return s.store.PruneKilledSandboxes(ctx, s.now().Add(-s.cfg.KilledRetention), store.PruneKilledBatch)
}
