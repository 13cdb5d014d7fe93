package sandbox

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/pandastack/pandastack/internal/host/layout"
)

// Prepared wake VMMs: the VMM of a hibernated sandbox's next wake, started once its hibernation
// is done. Unlike a fork's, its files exist by then: it maps the hibernation's own RAM file
// (whose page cache the hibernation filled with the guest's working set) and opens the sandbox's
// disk, as a wake's spawned VMM would, and is otherwise prepared as a create's (uid, a network
// slot with the empty policy, jail, cgroup, seccomp, -incoming defer, QMP connected). The wake
// that takes it is left with the state's load and the guest's hello.
//
// Invariants: it starts only after the hibernated VMM has exited, and a wake spawns no VMM
// while one is being prepared (it waits for it): QEMU locks its disk image, so two VMMs cannot
// open one disk. At most PreparedTemplates sandboxes keep one, those hibernated last; it ends
// with the wake that takes it, the sandbox's kill, or PreparedIdle. A hibernation that relieves
// memory pressure prepares none (a waiting QEMU costs ~43 MiB of RSS), nor does a sandbox with
// volumes (their drives are fixed when QEMU starts).

// wakeKey is the pool key of sandbox id's prepared wake VMM.
func wakeKey(id string) string { return "wake:" + id }

// hibernated prepares, in the background, the VMM of hibernated sandbox id's next wake.
func (m *Manager) hibernated(id string) {
	m.refill(wakeKey(id), &m.prep.slept, nil, func() (*preparedVMM, error) { return m.prepareWake(id) })
}

// prepareWake starts the VMM of hibernated sandbox id's next wake.
func (m *Manager) prepareWake(id string) (_ *preparedVMM, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	rec, _ := sb.current()
	if rec.State != StateHibernated || len(rec.Volumes) > 0 {
		return nil, fmt.Errorf("sandbox %s is %s with %d volumes: no wake VMM prepared", id, rec.State, len(rec.Volumes))
	}
	if err := m.checkIdentity("the memory of sandbox "+id, rec.Identity); err != nil {
		return nil, err
	}
	pv := &preparedVMM{name: layout.NewID(PreparedPrefix), key: wakeKey(id), template: rec.Template, dir: rec.BaseDir,
		shape: shapeOf(&rec)}
	defer func() {
		if err != nil {
			m.endPrepared(pv)
		}
	}()
	if m.confined { // the sandbox's own uid, whose its files are; pv's name holds it too until it is taken
		uid, err := m.uidFor(id)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.uids[pv.name] = uid
		m.mu.Unlock()
	}
	return pv, m.startPrepared(ctx, pv, &rec, sb.dir, filepath.Join(sb.dir, "disk.img"), snapIn(rec.BaseDir).RAMFile)
}

// takeWakePrepared hands the wake of hibernated sandbox rec the VMM prepared for it, if there is
// one of its hibernation and shape, made rec's (its uid and slot); nil otherwise. It waits for
// one being prepared first. An error leaves the sandbox hibernated and nothing running for it.
func (m *Manager) takeWakePrepared(ctx context.Context, rec *record) (*preparedVMM, error) {
	if err := m.WaitPrepared(ctx, wakeKey(rec.ID)); err != nil {
		return nil, err
	}
	pv, ended := m.takeReady(wakeKey(rec.ID), rec, func(pv *preparedVMM) bool { return pv.dir == rec.BaseDir })
	if ended != nil {
		<-ended // it holds the disk the wake opens
	}
	if pv == nil {
		return nil, nil
	}
	if err := m.ownPrepared(ctx, pv, rec); err != nil {
		m.wakeDone(rec.ID, pv)
		return nil, err
	}
	return pv, nil
}

// wakeDone ends the wake of sandbox id (taken: the prepared VMM it took, or nil): it is no longer
// among the sandboxes hibernated last.
func (m *Manager) wakeDone(id string, taken *preparedVMM) {
	p := m.prep
	p.mu.Lock()
	defer p.mu.Unlock()
	if taken != nil {
		delete(p.taken, taken.name)
	}
	p.slept = slices.DeleteFunc(p.slept, func(k string) bool { return k == wakeKey(id) })
}

// DropWakePrepared ends the VMM prepared for sandbox id's next wake, if any, waiting for one
// being prepared (the sandbox is killed).
func (m *Manager) DropWakePrepared(id string) { m.drop(wakeKey(id), &m.prep.slept) }

// WaitWakePrepared waits until sandbox id's next wake has a prepared VMM or none is being
// prepared (tests, and the bench keeping a preparation out of the next measurement).
func (m *Manager) WaitWakePrepared(ctx context.Context, id string) error {
	return m.WaitPrepared(ctx, wakeKey(id))
}

// WakePrepared is the VMM prepared for sandbox id's next wake, if one waits: its name and pid.
func (m *Manager) WakePrepared(id string) (name string, pid int, ok bool) {
	return m.readyVMM(wakeKey(id))
}
