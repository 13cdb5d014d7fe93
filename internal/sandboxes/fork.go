package sandboxes

import (
	"context"
	"errors"
	"maps"
	"strconv"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/fanout"
	"github.com/pandastack/pandastack/internal/store"
)

// Fork makes count children of a usable parent on the parent's host and records them, all in one
// transaction. Each child of a parent with volumes gets a copy of each (ForkVolumes), made by the
// host at the fork's instant and recorded with the children; the host must have a slot for every child (the
// host admits their guest memory against its commit limit: a refusal there is capacity too). The
// host makes all children or none; if recording fails they are killed there, so a failed fork
// leaves no child anywhere. Children belong to the parent's team, copy its metadata and get a
// fresh TTL from the parent's ttl policy.
func (s *Service) Fork(ctx context.Context, parent store.Sandbox, count int) ([]store.Sandbox, error) {
	return s.ForkOwned(ctx, parent, count, "")
}

// ForkOwned is Fork with the children's volume copies recorded as owned by volumeOwner (a
// service: store.OwnerDatabase for a database's branch; "": the team's own).
func (s *Service) ForkOwned(ctx context.Context, parent store.Sandbox, count int, volumeOwner string) ([]store.Sandbox, error) {
	c, copies, _, doneAll, err := s.prepareFork(ctx, parent, parent.HostID, count)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
	defer cancel()
	got, err := c.Fork(ctx, parent.ID, count)
	doneAll(err == nil)
	if err != nil {
		s.Touched(ctx, parent, c, err)
		return nil, err
	}
	faultpoint.Reach("server.fork.started") // the children run, unrecorded
	// The parent was woken for the fork if it was hibernated.
	s.Touched(ctx, parent, c, nil)
	undo := func(cause error) ([]store.Sandbox, error) {
		s.dropUnrecorded(ctx, c, parent.HostID, got, nil) // a child's volumes are copies
		return nil, cause
	}
	if len(got) != count {
		return undo(errors.New("host " + parent.HostID + " answered a fork of " + strconv.Itoa(count) + " with " + strconv.Itoa(len(got)) + " children"))
	}
	for _, ch := range got {
		if ch.ID == "" {
			return undo(errors.New("host " + parent.HostID + " answered a fork with a child without an id"))
		}
	}
	vols, atts, err := s.copiedVolumes(parent.TeamID, parent.HostID, got, copies, volumeOwner)
	if err != nil {
		return undo(err)
	}
	out, err := s.store.CreateSandboxesWithVolumes(ctx, s.childRecords(parent, parent.HostID, got), vols, atts)
	if err != nil {
		return undo(err)
	}
	s.log.Info("forked sandbox", "sandbox", parent.ID, "host", parent.HostID, "children", count)
	return out, nil
}

// prepareFork is what a fork needs before its parent's host acts: a usable parent, its host's
// client, the copies of its volumes the children get (ForkVolumes) and a slot for each child on
// hostID (placeSlots: call done once the children are made, or not).
func (s *Service) prepareFork(ctx context.Context, parent store.Sandbox, hostID string, count int) (src *agentclient.Client, copies []VolumeCopy, target store.Host, done func(placed bool), err error) {
	if err = Usable(parent); err != nil {
		return
	}
	if src, err = s.Client(ctx, parent); err != nil {
		return
	}
	if copies, err = s.ForkVolumes(ctx, parent); err != nil {
		return
	}
	target, done, err = s.placeSlots(ctx, hostID, count)
	return
}

// placeSlots checks that hostID has room for a fork's count children (Scheduler.PlaceOn) and
// holds a slot there for each (Scheduler.Reserve: all or none); call the returned done once the
// host answered, with whether the children are there.
func (s *Service) placeSlots(ctx context.Context, hostID string, count int) (h store.Host, done func(placed bool), err error) {
	if h, err = s.sched.PlaceOn(ctx, hostID, count, 0); err != nil {
		return store.Host{}, nil, err
	}
	dones := make([]func(bool), 0, count)
	done = func(placed bool) {
		for _, f := range dones {
			f(placed)
		}
	}
	for range count {
		f, err := s.sched.Reserve(hostID, 0)
		if err != nil {
			done(false)
			return store.Host{}, nil, err
		}
		dones = append(dones, f)
	}
	return h, done, nil
}

// childRecords are the records of a fork's children on hostID: the parent's team, metadata, ttl
// policy and port privacy, running now.
func (s *Service) childRecords(parent store.Sandbox, hostID string, got []agentclient.Sandbox) []store.Sandbox {
	now := s.clock()
	recs := make([]store.Sandbox, len(got))
	for i, ch := range got {
		tmpl := parent.Template
		if ch.Template != "" {
			tmpl = ch.Template
		}
		md := make(map[string]string, len(parent.Metadata))
		maps.Copy(md, parent.Metadata)
		recs[i] = store.Sandbox{ID: ch.ID, TeamID: parent.TeamID, Template: tmpl, State: store.StateRunning, HostID: hostID,
			Metadata: md, CreatedAt: now, ExpiresAt: now.Add(s.TTL(parent.TTLSeconds)), TTLSeconds: parent.TTLSeconds,
			ForkOf: parent.ID, TrafficTokenHash: parent.TrafficTokenHash, Owner: parent.Owner}
	}
	return recs
}

// ForkTo makes count children of a usable parent on another host than its parent's: the parent
// is snapshotted on its host, which publishes the snapshot to the blob store; the target host
// pulls it once and restores every child from it (each with the parent's memory, files, env and
// egress, like a same-host fork's, and copies of its volumes: the target makes them from the
// snapshot's volume copies, and they are recorded as the team's volumes on the target). Both
// hosts need the blob store: a snapshot that was not published is deleted again and the fork
// refused. All children or none (a child that is not recorded is killed and its copies deleted);
// the snapshot itself is deleted on both hosts once the children are recorded (their files stay
// while children use them).
func (s *Service) ForkTo(ctx context.Context, parent store.Sandbox, count int, hostID string) ([]store.Sandbox, error) {
	if hostID == parent.HostID {
		return s.Fork(ctx, parent, count)
	}
	src, copies, target, done, err := s.prepareFork(ctx, parent, hostID, count)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
	defer cancel()
	placed := false
	defer func() { done(placed) }()
	sn, err := src.CreateForkSnapshot(ctx, parent.ID)
	s.Touched(ctx, parent, src, err) // a hibernated parent was woken for its snapshot
	if err != nil {
		return nil, err
	}
	dst := s.sched.Client(target)
	defer func() {
		for _, c := range []*agentclient.Client{src, dst} {
			if derr := c.DeleteSnapshot(ctx, sn.ID); derr != nil && !errdefs.Is(derr, errdefs.NotFound) {
				s.log.Warn("could not delete a cross-host fork's snapshot; the host's reconcile will not know it", "snapshot", sn.ID, "err", derr)
			}
		}
	}()
	if !sn.Published {
		return nil, errdefs.Conflictf("sandbox %s cannot be forked onto host %s: its host %s has no blob store to publish the fork's snapshot to (docs/multi-host.md)", parent.ID, hostID, parent.HostID)
	}
	got, err := fanout.Each(count, func(int) (agentclient.Sandbox, error) {
		return dst.CreateSandbox(ctx, agentclient.CreateRequest{ID: auth.NewID("sb_"), SnapshotID: sn.ID, ForkOf: parent.ID})
	})
	// A child that failed has no id: dropUnrecorded passes it by.
	var vols []store.Volume
	var atts []store.VolumeAttachment
	if err == nil {
		placed = true
		vols, atts, err = s.copiedVolumes(parent.TeamID, target.ID, got, copies, "")
	}
	var out []store.Sandbox
	if err == nil {
		out, err = s.store.CreateSandboxesWithVolumes(ctx, s.childRecords(parent, target.ID, got), vols, atts)
	}
	if err != nil {
		s.dropUnrecorded(ctx, dst, target.ID, got, nil)
		return nil, err
	}
	s.log.Info("forked sandbox onto another host", "sandbox", parent.ID, "host", parent.HostID, "to", hostID, "children", count)
	return out, nil
}
