package apps

import (
	"context"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// ErrServerStopped is the error of a deployment whose server stopped (or restarted) before it
// finished.
const ErrServerStopped = "the server restarted during the build; deploy again"

// LeaseTime is how long an unfinished deployment stays its replica's without a renewal (renewed
// every quarter of it); after that it is recorded failed (Recover).
const LeaseTime = 2 * time.Minute

// renew extends deployment id's lease until stop is closed.
func (s *Service) renew(id string, stop <-chan struct{}) {
	s.cfg.Store.HoldLease(stop, LeaseTime, func(ctx context.Context, until time.Time) error {
		return s.cfg.Store.RenewDeployment(ctx, id, until)
	}, func(err error) {
		s.log.Warn("apps: could not renew a deployment's lease", "deployment", id, "err", err)
	})
}

// Recover records failed (ErrServerStopped) the deployments left queued, building or deploying
// by a server that stopped: those whose lease passed and, at start over SQLite (one server per
// database), every one the server before this one left (its last lease renewal was before this
// service started: the lease ends before started+LeaseTime; this service's own end after).
// Their build sandboxes and unreleased instances are killed and their release snapshots
// dropped; a deployment a route serves is never touched.
func (s *Service) Recover(ctx context.Context, atStart bool) error {
	before := s.cfg.Store.Clock(ctx)
	if atStart && s.cfg.Store.Dialect() == store.SQLite {
		before = s.started.Add(LeaseTime)
	}
	deps, err := s.cfg.Store.FailOrphanedDeployments(ctx, before, ErrServerStopped)
	for _, d := range deps {
		s.log.Warn("apps: a deployment's server stopped before it finished; recorded failed", "app", d.AppID, "deployment", d.ID, "was", d.State)
		sbs, _, lerr := s.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: d.TeamID,
			Metadata: map[string]string{"pandastack.deployment": d.ID}, Limit: 100})
		if lerr != nil {
			s.log.Warn("apps: could not list a failed deployment's sandboxes", "deployment", d.ID, "err", lerr)
		}
		for _, sb := range sbs {
			s.stopInstance(sb.ID, "app deployment's server stopped", 0)
		}
		if d.SnapshotID != "" {
			s.dropSnapshot(ctx, d.TeamID, d.SnapshotID)
		}
	}
	return err
}
