package sandboxes

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// DrainReport is what a drain did: how many of the host's sandboxes will wake elsewhere on their
// next call, and those that stay (with why).
type DrainReport struct {
	Host  string
	Moved int
	Kept  []KeptSandbox
}

// KeptSandbox is a sandbox a drain could not make movable.
type KeptSandbox struct {
	ID, Reason string
}

// Drain stops placing sandboxes on a host and hibernates every sandbox on it, so that each wakes
// on another host on its next call (wake anywhere: the host publishes each hibernation). A
// sandbox that cannot move — volumes live on their host, a host without a blob store publishes
// nothing, a hibernate that failed — stays where it is, reported in Kept. Idempotent.
func (s *Service) Drain(ctx context.Context, hostID string) (DrainReport, error) {
	if err := s.store.SetHostDraining(ctx, hostID, true); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return DrainReport{}, errdefs.NotFoundf("host %s not found", hostID)
		}
		return DrainReport{}, err
	}
	sbs, err := s.store.HostSandboxes(ctx, hostID, store.StateRunning, store.StateHibernated)
	if err != nil {
		return DrainReport{}, err
	}
	rep := DrainReport{Host: hostID}
	var mu sync.Mutex
	sem := make(chan struct{}, 4) // hibernations are disk- and CPU-heavy on the host
	var wg sync.WaitGroup
	for _, sb := range sbs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			reason := s.drainOne(ctx, sb)
			mu.Lock()
			defer mu.Unlock()
			if reason == "" {
				rep.Moved++
			} else {
				rep.Kept = append(rep.Kept, KeptSandbox{ID: sb.ID, Reason: reason})
			}
		})
	}
	wg.Wait()
	sort.Slice(rep.Kept, func(i, j int) bool { return rep.Kept[i].ID < rep.Kept[j].ID })
	s.log.Info("host drained", "host", hostID, "moved_on_next_call", rep.Moved, "kept", len(rep.Kept))
	return rep, nil
}

// drainOne hibernates sb (if it runs) and says why it cannot move ("": it can).
func (s *Service) drainOne(ctx context.Context, sb store.Sandbox) string {
	if sb.State == store.StateRunning {
		if _, err := s.Hibernate(ctx, sb); err != nil {
			return "hibernate failed: " + err.Error()
		}
	}
	cur, err := s.store.GetSandbox(ctx, sb.ID)
	switch {
	case err != nil:
		return err.Error()
	case cur.HostID != sb.HostID || cur.State == store.StateKilled:
		return "" // moved or killed meanwhile
	case cur.State != store.StateHibernated:
		return "it is " + cur.State
	case cur.HibernatedImage == "":
		return "its hibernation was not published (it has volumes, or its host has no blob store)"
	}
	return ""
}

// Undrain places sandboxes on the host again.
func (s *Service) Undrain(ctx context.Context, hostID string) error {
	err := s.store.SetHostDraining(ctx, hostID, false)
	if errors.Is(err, store.ErrNotFound) {
		return errdefs.NotFoundf("host %s not found", hostID)
	}
	return err
}
