package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
)

// A database whose VM died while its host lives — its QEMU ended (the sandbox is `error`), or
// its sandbox was killed — still has its volume, the cluster and the WAL spool, on that host.
// Heal gives it a new VM on that volume: a restore of the postgres template (postgres running on
// the template's own copy of its data volume, in the first slot) with the database's volume
// attached in the next slot; in the guest postgres is stopped, the copy unmounted, the database's
// volume moved to where the cluster lives and postgres started on it. Its crash recovery replays
// the WAL, so every committed row is there. The template's copy stays attached and unused: it is
// the new sandbox's own, deleted with it. No cold boot: a restore, then a postgres start.
//
// Invariant: a database's volume is mounted by at most one VM. The dead VM's sandbox is killed
// before the new one is made, and the store and the host both refuse a volume a live sandbox
// holds, so two replicas healing at once cannot both attach it (the second fails and retries).

// Why a database.restarted event's database got a new VM: its VM failed (its VMM ended, a wake
// failed) or its sandbox was killed.
const (
	TriggerVMFailed = "vm_failed"
	TriggerVMKilled = "vm_killed"
)

// HealInterval is how often databases whose VM died are looked for.
const HealInterval = 5 * time.Second

// healMount is where the database's volume is mounted in the new VM before it is moved to
// dataMount, where the template mounts its data volume (templates/postgres-17.yaml).
const (
	healMount = "/mnt/pandastack-database"
	dataMount = "/var/lib/postgresql"
)

// vmDead: the database's VM is gone for good but its host may keep its volume.
func vmDead(sb store.Sandbox) bool {
	return sb.State == store.StateError || sb.State == store.StateKilled
}

// HealDead gives every database whose VM died a new one; it returns how many it healed.
func (s *Service) HealDead(ctx context.Context) (int, error) {
	list, err := s.cfg.Store.ListDatabasesWithDeadVM(ctx)
	if err != nil {
		return 0, err
	}
	listed := map[string]bool{}
	for _, d := range list {
		listed[d.ID] = true
	}
	s.healRetries.Range(func(id, _ any) bool { // healed by another replica, or deleted
		if !listed[id.(string)] {
			s.healRetries.Delete(id)
		}
		return true
	})
	n := 0
	for _, d := range list {
		if !s.healDue(d.ID) {
			continue
		}
		_, healed, err := s.heal(ctx, d)
		if wait := s.healTried(d.ID, err); err != nil {
			s.log.Warn("database: could not give a database whose VM died a new one", "database", d.ID, "err", err, "retry_in", wait)
		} else if healed {
			n++
		}
	}
	return n, nil
}

// Failed heals are retried later and later (a host that is down, a pool that is full): the
// passes' wait doubles from HealInterval up to healBackoffMax. A connection tries at once.
const healBackoffMax = 5 * time.Minute

type healRetry struct {
	wait time.Duration
	next time.Time
}

// healDue says whether the periodic pass may try database id now.
func (s *Service) healDue(id string) bool {
	r, ok := s.healRetries.Load(id)
	return !ok || !time.Now().Before(r.(healRetry).next)
}

// healTried records the outcome of a heal of database id and returns the wait before the next
// try (0 after a success).
func (s *Service) healTried(id string, err error) time.Duration {
	if err == nil {
		s.healRetries.Delete(id)
		return 0
	}
	r := healRetry{wait: HealInterval}
	if old, ok := s.healRetries.Load(id); ok {
		r.wait = min(2*old.(healRetry).wait, healBackoffMax)
	}
	r.next = time.Now().Add(r.wait)
	s.healRetries.Store(id, r)
	return r.wait
}

// RunHealer heals databases whose VM died every interval (0: HealInterval) until ctx ends.
func (s *Service) RunHealer(ctx context.Context, interval time.Duration) {
	periodic.Every(ctx, cmp.Or(interval, HealInterval), func() {
		if _, err := s.HealDead(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("database: looking for databases whose VM died failed", "err", err)
		}
	})
}

// vm returns d's VM, healed first when it died (a connection waits for it rather than failing).
func (s *Service) vm(ctx context.Context, d store.Database) (store.Sandbox, error) {
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil || !vmDead(sb) {
		return sb, err
	}
	sb, _, err = s.heal(ctx, d)
	return sb, err
}

// heal gives d a new VM on its volume when its VM died, and returns its VM (the new one, or the
// one it has when it is alive, e.g. another heal made it meanwhile); healed says whether this
// call made it.
func (s *Service) heal(ctx context.Context, d store.Database) (vm store.Sandbox, healed bool, err error) {
	defer lockOf(&s.heals, d.ID)()
	ctx = context.WithoutCancel(ctx) // what a host made is recorded or undone
	if d, err = s.cfg.Store.GetDatabase(ctx, d.ID); err != nil {
		return vm, false, err
	}
	old, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil || !vmDead(old) {
		return old, false, err
	}
	vol, oldAtts, err := s.dataVolume(ctx, d, old)
	if err != nil {
		return vm, false, err
	}
	s.log.Warn("database: its VM died; giving it a new one on its volume", "database", d.ID, "sandbox", old.ID, "state", old.State,
		"reason", old.Error, "volume", vol.ID, "host", vol.HostID)
	start := time.Now()
	if old.State != store.StateKilled { // the host lets go of the volume
		if err := s.cfg.Sandboxes.Kill(ctx, old, "its VM died: the database gets a new one"); err != nil {
			return vm, false, fmt.Errorf("killing the dead VM %s: %w", old.ID, err)
		}
	}
	recorded, agentName, host, err := s.cfg.Templates.Resolve(ctx, d.TeamID, s.cfg.Template)
	if err != nil {
		return vm, false, err
	}
	vm, err = s.cfg.Sandboxes.Create(ctx, d.TeamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName, TemplateHost: host,
		Metadata: map[string]string{"pandastack.database": d.ID}, AttachOwner: store.OwnerDatabase,
		Volumes: []store.VolumeAttachment{{VolumeID: vol.ID, MountPath: healMount}}})
	if err != nil {
		return vm, false, fmt.Errorf("a new VM on volume %s: %w", vol.ID, err)
	}
	undo := func(err error) (store.Sandbox, bool, error) {
		// Not dropVM: the database's volume stays, for the next try.
		if kerr := s.cfg.Sandboxes.Kill(ctx, vm, "giving the database a new VM failed"); kerr != nil {
			s.log.Warn("database: could not kill a new VM that failed", "database", d.ID, "sandbox", vm.ID, "err", kerr)
		}
		return store.Sandbox{}, false, err
	}
	if _, err := s.cfg.Store.SetSandboxExpiry(ctx, vm.ID, farFuture, 0); err != nil {
		return undo(err)
	}
	restored := time.Now()
	if _, err := s.guest(ctx, vm, healScript, nil, promoteTimeout); err != nil {
		return undo(fmt.Errorf("starting postgres on the database's volume: %w", err))
	}
	if err := s.cfg.Store.SetDatabaseSandbox(ctx, d.ID, old.ID, vm.ID); err != nil {
		switch {
		case errors.Is(err, store.ErrConflict):
			err = errdefs.Conflictf("database %s got a new VM elsewhere meanwhile", d.ID)
		case errors.Is(err, store.ErrNotFound): // deleted meanwhile: its volume goes too
			undo(err)
			if derr := s.cfg.Sandboxes.DeleteVolume(ctx, vol.TeamID, vol.ID); derr != nil {
				s.log.Warn("database: could not delete the volume of a database deleted while it got a new VM", "database", d.ID, "volume", vol.ID, "err", derr)
			}
			return store.Sandbox{}, false, errdefs.NotFoundf("database %s was deleted", d.ID)
		}
		return undo(err)
	}
	// The template's unused copy a fork or restore of a healed VM got as the database's.
	s.deleteOwnedVolumes(ctx, old, oldAtts, vol.ID, "an unused copy of its dead VM")
	s.log.Warn("database: running again on its volume in a new VM", "database", d.ID, "sandbox", vm.ID, "ms", time.Since(start).Milliseconds(),
		"restore_ms", restored.Sub(start).Milliseconds(), "postgres_start_ms", time.Since(restored).Milliseconds())
	trigger := TriggerVMFailed
	if old.State == store.StateKilled {
		trigger = TriggerVMKilled
	}
	s.event(ctx, d, store.DatabaseEvent{Type: webhooks.DatabaseRestarted, Trigger: trigger})
	return vm, true, nil
}

// dataVolume is the database's own volume that its VM old had attached (its cluster): the one
// a heal moved into place (attached at healMount), else the one the template's copy became
// (at dataMount); and old's attachments. A healed VM's forks and restores own both of their
// copies: the one at healMount is the cluster, the other the template's unused copy.
func (s *Service) dataVolume(ctx context.Context, d store.Database, old store.Sandbox) (store.Volume, []store.VolumeAttachment, error) {
	atts, err := s.cfg.Store.SandboxVolumes(ctx, old.ID)
	if err != nil {
		return store.Volume{}, nil, err
	}
	for _, at := range []string{healMount, dataMount} {
		for _, a := range atts {
			if a.MountPath != at {
				continue
			}
			if v, err := s.cfg.Store.GetVolume(ctx, a.VolumeID); err == nil && v.Owner == store.OwnerDatabase && !v.Deleted {
				return v, atts, nil
			}
		}
	}
	return store.Volume{}, nil, errdefs.Conflictf("database %s: its VM %s is %s and it has no volume left to start again from; restore it from a backup into a new database",
		d.ID, old.ID, old.State)
}

// healScript moves the database's volume (mounted at healMount) to where the cluster lives, in
// place of the template's copy, and starts postgres on it. The template's postgres is thrown
// away with its copy: an immediate shutdown (SIGQUIT: no checkpoint; its postmaster exits once
// its children did). pg_ctl is called directly as pg_ctlcluster would (its Perl start costs
// seconds on an emulated CPU) and not waited for: pg_isready is. The dead VM's postmaster.pid
// is removed: that postmaster is gone with its VM (its pid may be taken in this one).
const healScript = `set -e
m=` + healMount + `
d=` + dataMount + `
if [ ! -f $m/17/main/PG_VERSION ]; then echo "the database's volume holds no cluster" >&2; exit 1; fi
if read pid < $d/17/main/postmaster.pid; then
  kill -QUIT "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
fi
umount $d 2>/dev/null || umount -l $d
mount --move $m $d
rmdir $m
rm -f $d/17/main/postmaster.pid
runuser -u postgres -- /usr/lib/postgresql/17/bin/pg_ctl start -W -s -D $d/17/main -l /var/log/postgresql/postgresql-17-main.log \
  -o "-c config_file=/etc/postgresql/17/main/postgresql.conf"
for i in $(seq 1500); do
  if pg_isready -q -h 127.0.0.1; then exit 0; fi
  sleep 0.2
done
tail -n 30 /var/log/postgresql/postgresql-17-main.log >&2
exit 1`
