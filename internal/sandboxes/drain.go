package sandboxes

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
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
// sandbox that cannot move — a read-only volume (its guest's overlay lives on the host; read-write
// volumes travel as copies in the hibernation), a host without a blob store publishes nothing, a
// hibernate that failed — stays where it is, reported in Kept. Idempotent.
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
		return "its hibernation was not published (a read-only volume, or its host has no blob store)"
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

// unrecordedAfter is how old a snapshot on a host must be before the doctor calls it unrecorded
// (a snapshot in flight has its files before its record). Sandboxes wait for the reconcile's
// grace (scheduler.DefaultUnrecordedGrace): longer than any create or fork in flight.
const unrecordedAfter = 10 * time.Minute

// Doctor asks a host for its leftovers and adds the control plane's: sandboxes the host runs that
// the store does not know, or records killed or on another host, and snapshots the host keeps
// that the store never recorded. With repair, they are removed (such sandboxes killed, such
// snapshots deleted on the host).
func (s *Service) Doctor(ctx context.Context, hostID string, repair bool) ([]hostapi.DoctorFinding, error) {
	h, err := s.store.GetHost(ctx, hostID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errdefs.NotFoundf("host %s not found", hostID)
	}
	if err != nil {
		return nil, err
	}
	if h.State != store.HostUp {
		return nil, errdefs.Conflictf("host %s is down: the doctor runs on the host", hostID)
	}
	c := s.sched.Client(h)
	rep, err := c.Doctor(ctx, repair)
	if err != nil {
		return nil, err
	}
	on, err := c.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, sb := range on {
		created, _ := time.Parse(time.RFC3339, sb.CreatedAt)
		if s.clock().Sub(created) < faultpoint.DoctorMinAge(s.sched.UnrecordedGrace()) {
			continue
		}
		rec, err := s.store.GetSandbox(ctx, sb.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) || err == nil && rec.HostID == hostID && rec.State != store.StateKilled {
			continue // recorded here (or the store cannot say: nothing is killed on doubt)
		}
		f := hostapi.DoctorFinding{Kind: "unrecorded_sandbox", Resource: sb.ID, Detail: s.unrecordedDetail(hostID, sb.ID, rec, err)}
		repairWith(&f, repair, func() error { return c.KillSandbox(ctx, sb.ID) })
		rep.Findings = append(rep.Findings, f)
	}
	snaps, err := c.ListSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		if s.clock().Sub(sn.CreatedAt) < faultpoint.DoctorMinAge(unrecordedAfter) {
			continue
		}
		if _, err := s.store.GetSnapshot(ctx, sn.ID); !errors.Is(err, store.ErrNotFound) {
			continue // recorded (one recorded deleted is the reconcile's), or the store cannot say
		}
		f := hostapi.DoctorFinding{Kind: "unrecorded_snapshot", Resource: sn.ID,
			Detail: "a snapshot this host keeps that the store does not know (its server died before recording it)"}
		repairWith(&f, repair, func() error { return c.DeleteSnapshot(ctx, sn.ID) })
		rep.Findings = append(rep.Findings, f)
	}
	return rep.Findings, nil
}

// unrecordedDetail says why the doctor reports sandbox id on host (rec and err: its record) and
// what reconcile does with it.
func (s *Service) unrecordedDetail(hostID, id string, rec store.Sandbox, err error) string {
	switch {
	case err == nil && rec.State == store.StateKilled:
		return "a sandbox recorded killed that this host still runs: reconcile kills it there on its next round"
	case err == nil:
		return "a copy of a sandbox recorded on host " + rec.HostID + ": reconcile kills it here on its next round"
	}
	grace := s.sched.UnrecordedGrace()
	d := "a sandbox this host runs that no record names (its server died before recording it): reconcile kills it once it has seen it so for " + grace.String()
	if seen, ok := s.sched.UnrecordedFor(hostID, id); ok {
		return d + "; this server's reconcile first saw it " + seen.Round(time.Second).String() + " ago (killed in about " +
			max(grace-seen, 0).Round(time.Second).String() + ")"
	}
	return d + "; this server's reconcile has not seen it yet (another server's may have)"
}

// repairWith runs fix when repair is asked for, and records on f whether it worked.
func repairWith(f *hostapi.DoctorFinding, repair bool, fix func() error) {
	if !repair {
		return
	}
	if err := fix(); err != nil {
		f.Error = err.Error()
	} else {
		f.Repaired = true
	}
}
