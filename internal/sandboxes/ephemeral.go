package sandboxes

import (
	"context"
	"errors"
	"time"

	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// A sandbox's own volumes (store.OwnerSandbox: its copy of an ephemeral template data volume)
// go when it does: a kill releases them at once, and a sweeper releases those whose sandboxes
// ended any other way (a kill from another replica, a lost create, a pruned record).

// releaseBatch bounds one release: the volumes of a batch of kills, or one sweeper pass.
const releaseBatch = 500

// DropSandboxVolumes deletes the sandbox-owned volumes of the given sandboxes, which were just
// killed, on their hosts. Failures are logged: the volumes are recorded deleted, and a host
// that missed the call deletes them at its next reconcile.
func (s *Service) DropSandboxVolumes(ctx context.Context, sandboxIDs ...string) {
	if len(sandboxIDs) == 0 {
		return
	}
	s.releaseVolumes(context.WithoutCancel(ctx), sandboxIDs)
}

// releaseVolumes releases (store.ReleaseSandboxVolumes) and deletes on their hosts the
// sandbox-owned volumes no sandbox holds: of sandboxIDs, or any (nil). It returns how many.
func (s *Service) releaseVolumes(ctx context.Context, sandboxIDs []string) int {
	vols, err := s.store.ReleaseSandboxVolumes(ctx, sandboxIDs, releaseBatch)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sandbox volumes: could not release the volumes of ended sandboxes", "err", err)
		}
		return 0
	}
	for _, v := range vols {
		if err := s.deleteVolumeOnHost(ctx, v); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("sandbox volumes: deleting on the host failed; recorded deleted, the host's reconcile will delete it",
				"volume", v.ID, "host", v.HostID, "err", err)
		}
	}
	return len(vols)
}

// RunVolumeSweeper releases, every interval until ctx ends, the sandbox-owned volumes of
// sandboxes that ended without a kill here. Of the replicas sharing a database one sweeps at a
// time (lock): a replica that finds it held skips the pass.
func (s *Service) RunVolumeSweeper(ctx context.Context, lock *store.Lock, interval time.Duration) {
	periodic.Every(ctx, interval, func() {
		mine, err := lock.Hold(ctx)
		if err != nil || !mine {
			return
		}
		defer lock.Release()
		for ctx.Err() == nil {
			n := s.releaseVolumes(ctx, nil)
			if n > 0 {
				s.log.Info("sandbox volumes: deleted the volumes of ended sandboxes", "volumes", n)
			}
			if n < releaseBatch {
				return
			}
		}
	})
}
