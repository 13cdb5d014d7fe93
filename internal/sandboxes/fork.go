package sandboxes

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// LifecycleTimeout bounds one fork, snapshot, hibernate or wake on a host (restores on a
// software-emulated CPU are slow). Like creates, they run detached from the caller's
// cancellation so that what a host made is always recorded or undone.
const LifecycleTimeout = 10 * time.Minute

// RefreshTimeout bounds a state check on a sandbox's host.
const RefreshTimeout = 2 * time.Second

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
			Metadata: md, CreatedAt: now, ExpiresAt: now.Add(s.TTL(parent.TTLSeconds)), TTLSeconds: parent.TTLSeconds, ForkOf: parent.ID}
	}
	out, err := s.store.CreateSandboxes(ctx, recs)
	if err != nil {
		return undo(err)
	}
	s.log.Info("forked sandbox", "sandbox", parent.ID, "host", parent.HostID, "children", count)
	return out, nil
}

// Follow makes the record take the state the host reports for the sandbox (running, hibernated,
// or error with its reason), if the record is still in the state it was read in. It returns the
// record as it now is.
func (s *Service) Follow(ctx context.Context, sb store.Sandbox, a agentclient.Sandbox) store.Sandbox {
	reason := ""
	switch a.State {
	case store.StateRunning, store.StateHibernated:
	case store.StateError:
		reason = a.Error
		if reason == "" {
			reason = "the host reports an error"
		}
	default:
		return sb
	}
	if a.State == sb.State && reason == sb.Error {
		return sb
	}
	ctx = context.WithoutCancel(ctx)
	ok, err := s.store.SetSandboxState(ctx, sb.ID, a.State, reason, sb.State)
	if err != nil {
		s.log.Warn("could not record a sandbox's state from its host", "sandbox", sb.ID, "state", a.State, "err", err)
		return sb
	}
	if !ok { // changed meanwhile: answer what is recorded now
		if cur, err := s.store.GetSandbox(ctx, sb.ID); err == nil {
			return cur
		}
		return sb
	}
	sb.State, sb.Error = a.State, reason
	return sb
}

// Refresh asks the sandbox's host for its state and follows it. Any failure (the host slow or
// not answering, the sandbox unknown there: the reconcile decides about that) keeps the record.
func (s *Service) Refresh(ctx context.Context, sb store.Sandbox, c *agentclient.Client, timeout time.Duration) store.Sandbox {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	a, err := c.GetSandbox(rctx, sb.ID)
	if err != nil {
		s.log.Debug("sandbox state check on its host failed; answering the record", "sandbox", sb.ID, "err", err)
		return sb
	}
	return s.Follow(ctx, sb, a)
}

// Touched updates the record after a call went to the sandbox's host: a hibernated sandbox was
// woken by it, so it is running; a call that failed on a hibernated sandbox, or that the host
// refused as a conflict, may have left it in state error (a wake that failed), so ask.
func (s *Service) Touched(ctx context.Context, sb store.Sandbox, c *agentclient.Client, callErr error) {
	var ae *agentclient.Error
	switch {
	case callErr == nil && sb.State == store.StateHibernated:
		if _, err := s.store.SetSandboxState(context.WithoutCancel(ctx), sb.ID, store.StateRunning, "", store.StateHibernated); err != nil {
			s.log.Warn("could not record a woken sandbox running", "sandbox", sb.ID, "err", err)
		}
	case callErr != nil && (sb.State == store.StateHibernated || errors.As(callErr, &ae) && ae.Status == errdefs.Conflict.Status()):
		s.Refresh(ctx, sb, c, RefreshTimeout)
	}
}
