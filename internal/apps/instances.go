package apps

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/fanout"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
)

// An app's release serves from max(1, min_instances) instances, all restores of the same
// snapshot, made and health-checked before the switch. The deployment records the first
// (SandboxID: its logs, its TTL); all of them carry the metadata pandastack.deployment and
// pandastack.app_role=instance, which is how any replica finds the set (once per deployment:
// it is fixed from the switch on). The router balances requests round-robin over the set,
// skipping instances that are gone.

// instanceSet is the instances of one deployment and the router's round-robin position.
type instanceSet struct {
	ids  []string
	at   time.Time // when it was read
	next atomic.Uint64
}

// InstanceCount is how many instances a release of a serves from.
func InstanceCount(a store.App) int { return max(1, int(a.MinInstances)) }

// deploymentSandboxes is every reachable sandbox of deployment d with role ("" any role),
// d.SandboxID first when it is one of them.
func (s *Service) deploymentSandboxes(ctx context.Context, d store.Deployment, role string) ([]string, error) {
	md := map[string]string{"pandastack.deployment": d.ID}
	if role != "" {
		md["pandastack.app_role"] = role
	}
	sbs, _, err := s.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: d.TeamID, Metadata: md,
		States: []string{store.StateRunning, store.StateHibernated}, Limit: 3 * MaxInstances})
	ids := []string{}
	if d.SandboxID != "" {
		ids = append(ids, d.SandboxID)
	}
	for _, sb := range sbs {
		if !slices.Contains(ids, sb.ID) {
			ids = append(ids, sb.ID)
		}
	}
	return ids, err
}

// instances is deployment d's serving instances (cached; fresh reads them again).
func (s *Service) instances(ctx context.Context, d store.Deployment, fresh bool) *instanceSet {
	s.mu.Lock()
	set := s.sets[d.ID]
	s.mu.Unlock()
	if set != nil && !fresh {
		return set
	}
	ids, err := s.deploymentSandboxes(ctx, d, "instance")
	if err != nil {
		s.log.Warn("apps: listing a deployment's instances failed", "deployment", d.ID, "err", err)
	}
	return s.setInstances(d.ID, ids)
}

func (s *Service) setInstances(depID string, ids []string) *instanceSet {
	set := &instanceSet{ids: ids, at: time.Now()}
	s.mu.Lock()
	s.sets[depID] = set
	s.mu.Unlock()
	return set
}

// pick is the instance of live deployment d the next request goes to: round-robin over its
// instances that are running or hibernated (a hibernated one is woken by its host).
func (s *Service) pick(ctx context.Context, a store.App, d store.Deployment) (store.Sandbox, error) {
	set := s.instances(ctx, d, false)
	for try := range 2 {
		if try == 1 {
			set = s.instances(ctx, d, true) // one may have gone: read the set again
		}
		n := uint64(len(set.ids))
		first := set.next.Add(1)
		for i := range n {
			sb, err := s.cfg.Store.GetSandbox(ctx, set.ids[(first+i)%n])
			if err == nil && sandboxes.Usable(sb) == nil {
				return sb, nil
			}
		}
	}
	return store.Sandbox{}, errdefs.New(errdefs.Unavailable, "app %s has no running instance", a.Name)
}

// restoreInstances makes n instances of d's release at once, each healthy; on an error the
// others are stopped too.
func (s *Service) restoreInstances(ctx context.Context, a store.App, d store.Deployment, n int, lb *logBuf) ([]store.Sandbox, error) {
	sbs, err := fanout.Each(n, func(int) (store.Sandbox, error) { return s.restore(ctx, a, d, "instance", lb) })
	if err != nil {
		for _, sb := range sbs {
			s.stopInstance(sb.ID, "app instance not needed", 0)
		}
		return nil, err
	}
	return sbs, nil
}

// stopInstances drains (at most drain) and kills every instance of deployment d: its serving
// instances, its own URL's.
func (s *Service) stopInstances(ctx context.Context, d store.Deployment, reason string, drain time.Duration) {
	ids, err := s.deploymentSandboxes(context.WithoutCancel(ctx), d, "")
	if err != nil {
		s.log.Warn("apps: listing a deployment's instances failed", "deployment", d.ID, "err", err)
	}
	s.mu.Lock()
	delete(s.sets, d.ID)
	s.mu.Unlock()
	for _, id := range ids {
		s.stopInstance(id, reason, drain)
	}
}

// replenish restores instances of app a's live deployment d until it has InstanceCount(a)
// usable ones again (one that died or was killed is replaced), in the background; not while a
// deploy or rollback of the app runs (they hold its lock).
func (s *Service) replenish(ctx context.Context, a store.App, d store.Deployment) {
	if a.MinInstances <= 1 || d.State != Live || d.SnapshotID == "" {
		return
	}
	usable := 0
	for _, id := range s.instances(ctx, d, true).ids {
		if sb, err := s.cfg.Store.GetSandbox(ctx, id); err == nil && sandboxes.Usable(sb) == nil {
			usable++
		}
	}
	missing := InstanceCount(a) - usable
	lock := s.appLock(a.ID)
	if missing <= 0 || !lock.TryLock() {
		return
	}
	s.bg.Go(func() {
		defer lock.Unlock()
		sbs, err := s.restoreInstances(s.bg.Ctx(), a, d, missing, newLogBuf())
		if err != nil {
			s.log.Warn("apps: replacing instances failed", "app", a.ID, "deployment", d.ID, "err", err)
			return
		}
		if cur, err := s.cfg.Store.GetDeployment(s.bg.Ctx(), a.ID, d.ID); err != nil || cur.State != Live {
			for _, sb := range sbs {
				s.stopInstance(sb.ID, "app deployment no longer live", 0)
			}
			return
		}
		s.instances(s.bg.Ctx(), d, true) // they carry the deployment's metadata
		s.log.Info("apps: instances replaced", "app", a.ID, "deployment", d.ID, "count", len(sbs))
	})
}
