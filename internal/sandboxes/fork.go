package sandboxes

import (
	"context"
	"errors"
	"maps"
	"strconv"

	"github.com/pandastack/pandastack/internal/store"
)

// Fork makes count children of a usable parent on the parent's host and records them, all in one
// transaction. A parent with volumes is refused; the host must have a slot for every child (the
// host admits their guest memory against its commit limit: a refusal there is capacity too). The
// host makes all children or none; if recording fails they are killed there, so a failed fork
// leaves no child anywhere. Children belong to the parent's team, copy its metadata and get a
// fresh TTL from the parent's ttl policy.
func (s *Service) Fork(ctx context.Context, parent store.Sandbox, count int) ([]store.Sandbox, error) {
	if err := Usable(parent); err != nil {
		return nil, err
	}
	c, err := s.Client(ctx, parent)
	if err == nil {
		err = s.RefuseWithVolumes(ctx, parent, "forks")
	}
	if err == nil {
		_, err = s.sched.PlaceOn(ctx, parent.HostID, count, 0)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
	defer cancel()
	releases := make([]func(), count)
	for i := range releases {
		releases[i] = s.sched.Reserve(parent.HostID, 0)
	}
	releaseAll := func() {
		for _, f := range releases {
			f()
		}
	}
	got, err := c.Fork(ctx, parent.ID, count)
	if err != nil {
		releaseAll()
		s.Touched(ctx, parent, c, err)
		return nil, err
	}
	// The parent was woken for the fork if it was hibernated.
	s.Touched(ctx, parent, c, nil)
	undo := func(cause error) ([]store.Sandbox, error) {
		for _, ch := range got {
			if ch.ID == "" {
				continue
			}
			if kerr := c.KillSandbox(ctx, ch.ID); kerr != nil {
				s.log.Error("could not kill a fork child that was not recorded", "sandbox", ch.ID, "host", parent.HostID, "err", kerr)
			}
		}
		releaseAll()
		return nil, cause
	}
	if len(got) != count {
		return undo(errors.New("host " + parent.HostID + " answered a fork of " + strconv.Itoa(count) + " with " + strconv.Itoa(len(got)) + " children"))
	}
	now := s.clock()
	recs := make([]store.Sandbox, count)
	for i, ch := range got {
		if ch.ID == "" {
			return undo(errors.New("host " + parent.HostID + " answered a fork with a child without an id"))
		}
		md := make(map[string]string, len(parent.Metadata))
		maps.Copy(md, parent.Metadata)
		tmpl := parent.Template
		if ch.Template != "" {
			tmpl = ch.Template
		}
		recs[i] = store.Sandbox{ID: ch.ID, TeamID: parent.TeamID, Template: tmpl, State: store.StateRunning, HostID: parent.HostID,
			Metadata: md, CreatedAt: now, ExpiresAt: now.Add(s.TTL(parent.TTLSeconds)), TTLSeconds: parent.TTLSeconds, ForkOf: parent.ID,
			TrafficTokenHash: parent.TrafficTokenHash}
	}
	out, err := s.store.CreateSandboxes(ctx, recs)
	if err != nil {
		return undo(err)
	}
	s.log.Info("forked sandbox", "sandbox", parent.ID, "host", parent.HostID, "children", count)
	return out, nil
}
