package sandboxes

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
)

// What hosts publish to the blob store outlives its use: a deleted snapshot, the snapshot behind a
// cross-host fork (never recorded), a hibernation its sandbox has since woken from. SweepPublished
// deletes those manifests, then the chunks no manifest names any more (artifact.Sweep). Templates'
// publications are kept: any host may pull them.

// Kinds of publications the sweep looks after (internal/host/snapshot and internal/host/sandbox).
const (
	snapshotKind   = "snapshot"
	hibernatedKind = "hibernated"
)

// SweepPublished deletes the publications nothing needs that are older than grace (a host
// publishes a snapshot before the store records it, and a push in progress has chunks no manifest
// names yet: grace must outlast both), then the unreferenced chunks. It returns how many
// manifests and chunks it deleted.
func (s *Service) SweepPublished(ctx context.Context, bs blob.Store, grace time.Duration) (manifests, chunks int, err error) {
	cutoff := s.clock().Add(-grace)
	for _, kind := range []string{snapshotKind, hibernatedKind} {
		var dead []string
		prefix := "manifests/" + kind + "/"
		err := bs.List(ctx, prefix, func(in blob.Info) error {
			name := strings.TrimSuffix(strings.TrimPrefix(in.Key, prefix), ".json")
			if in.Modified.Before(cutoff) && !s.publicationNeeded(ctx, kind, name, cutoff) {
				dead = append(dead, name)
			}
			return nil
		})
		if err != nil {
			return manifests, 0, err
		}
		for _, name := range dead {
			if err := artifact.Delete(ctx, bs, kind, name); err != nil {
				return manifests, 0, err
			}
			manifests++
		}
	}
	chunks, err = artifact.Sweep(ctx, bs, grace)
	return manifests, chunks, err
}

// publicationNeeded: a snapshot that is recorded and not deleted, or the hibernation a sandbox
// would wake from — or has woken from since cutoff: a host that woke it lazily may still be
// fetching its chunks (internal/artifact/lazy). A store error counts as needed (nothing is
// deleted on doubt).
func (s *Service) publicationNeeded(ctx context.Context, kind, name string, cutoff time.Time) bool {
	switch kind {
	case snapshotKind:
		sn, err := s.store.GetSnapshot(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		return err != nil || !sn.Deleted
	case hibernatedKind:
		id, _, ok := strings.Cut(name, "-")
		if !ok {
			return false
		}
		sb, err := s.store.GetSandbox(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		return err != nil || sb.HibernatedImage == name || sb.UpdatedAt.After(cutoff)
	}
	return true
}

// RunPublishedSweeper sweeps the blob store every interval until ctx ends.
func (s *Service) RunPublishedSweeper(ctx context.Context, bs blob.Store, interval, grace time.Duration) {
	periodic.Every(ctx, interval, func() {
		m, c, err := s.SweepPublished(ctx, bs, grace)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("blob store: sweeping unused publications failed", "err", err)
		case m > 0 || c > 0:
			s.log.Info("blob store: swept unused publications", "manifests", m, "chunks", c)
		}
	})
}
