package sandboxes

import (
	"context"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// Wake anywhere: a hibernated sandbox whose host published the hibernation (HibernatedImage) is
// not lost with its host. The first call that needs it while its host is down moves it: another
// host adopts it from the publication and wakes it, same id, files and processes; the store then
// says it runs there. Only one move wins (the store's conditional MoveHibernated); a loser kills
// its copy. When the old host comes back, its reconcile kills the stale copy there.

// moveHibernated wakes sb, hibernated on host down (or draining), on another host and returns
// that host's client. Concurrent callers in this process share one move.
func (s *Service) moveHibernated(ctx context.Context, sb store.Sandbox, down string) (*agentclient.Client, error) {
	v, err, _ := s.moves.Do(sb.ID, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LifecycleTimeout)
		defer cancel()
		hosts, err := s.sched.Place(ctx, sb.Template)
		if err != nil {
			return nil, err
		}
		mem := s.sched.TemplateMemMiB(ctx, sb.Template)
		var moved store.Host
		err = s.tryHosts("sandbox "+sb.ID+"'s wake", hosts, []string{"capacity"}, func(h store.Host) error {
			if h.ID == down {
				return errdefs.Capacityf("host %s is down or draining", h.ID)
			}
			if _, err := s.createOn(ctx, h, mem, agentclient.CreateRequest{ID: sb.ID, Hibernated: sb.HibernatedImage}); err != nil {
				return err
			}
			moved = h
			return nil
		})
		if err != nil {
			return nil, err
		}
		ok, err := s.store.MoveHibernated(ctx, sb.ID, down, moved.ID)
		if err != nil || !ok {
			if kerr := s.sched.Client(moved).KillSandbox(ctx, sb.ID); kerr != nil {
				s.log.Error("could not kill the copy of a sandbox another move won", "sandbox", sb.ID, "host", moved.ID, "err", kerr)
			}
			if err == nil {
				err = errdefs.Conflictf("sandbox %s changed while it was being woken on another host; try again", sb.ID)
			}
			return nil, err
		}
		s.log.Warn("woke a hibernated sandbox on another host: its own is down", "sandbox", sb.ID, "from", down, "to", moved.ID, "image", sb.HibernatedImage)
		return s.sched.Client(moved), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*agentclient.Client), nil
}
