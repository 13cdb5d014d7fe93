package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
)

// Prepared VMMs: the first half of a create's restore done before the create arrives. For each
// template created from recently (at most Config.PreparedTemplates of them), one VMM waits, started
// as a create would start it: its disk clone and volume-slot placeholders made, its uid taken, its
// network slot acquired (with the empty policy: nothing leaves), jailed in its cgroup with the
// template's limits, QEMU's seccomp on, started with -incoming defer and its QMP connected. It maps
// the template's RAM file but has read none of it and runs no guest: it is not a warm VM. The next
// create of that template (without volumes) takes it: the files become the sandbox's, the uid and
// the slot too (with the sandbox's egress policy), and the restore is left with migrate-incoming
// and the guest's hello. Another is prepared once that create is done. One no create took for
// Config.PreparedIdle is ended (its ~43 MiB of RSS, its uid and slot freed); the template's next
// create spawns its VMM and prepares another. A prepared VMM is named prep-<hex>: its files dir
// (under Sandboxes()), run dir and cgroup.

// PreparedPrefix starts the name of a prepared VMM's files dir, run dir and cgroup.
const PreparedPrefix = "prep-"

// StepPrepared is a create that took a prepared VMM: its files, uid and slot became the
// sandbox's (replacing disk_clone, drives, vmm_confine, vmm_spawn and vmm_qmp).
const StepPrepared = "prepared"

// preparedVMM is one VMM waiting for a create of its template.
type preparedVMM struct {
	name     string // prep-<hex>
	key      string // its place in the pool: the template's name, forkKey(parent) or wakeKey(id)
	template string
	dir      string // the template's bake it was prepared from
	shape    shape
	vm       *runtime.VM
	slot     *network.Slot // nil without a NIC
	files    string        // disk.img and the placeholders ("": a wake's, which uses the sandbox's)
	expiry   *time.Timer   // ends it when no create took it for the pool's idle (nil: never)
	// A fork's (preparedfork.go): the snapshot directory made for the fork, whose RAM file the
	// VMM maps; the VMM's until a fork takes it, then the fork's snapshot's.
	snapID, snapDir string
	snapHeld        bool // the directory is still the VMM's: it goes with it
}

// shape is what a prepared VMM must match in a create's record to be taken.
type shape struct {
	VCPUs, MemoryMiB, VolumeSlots int
	NIC                           bool
}

func shapeOf(r *record) shape {
	return shape{VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, VolumeSlots: r.VolumeSlots, NIC: r.NIC}
}

// preparedPool is the prepared VMMs of a manager.
type preparedPool struct {
	max  int           // templates kept prepared (0: none)
	idle time.Duration // a VMM no create took for this long is ended (0: never)

	mu      sync.Mutex
	ready   map[string]*preparedVMM  // by key (a template's name, forkKey(parent) or wakeKey(id))
	filling map[string]chan struct{} // by key: a preparation in flight, closed when done
	ending  map[string]chan struct{} // by key: a VMM being ended, closed when it has (retire)
	taken   map[string]*preparedVMM  // by name: taken by a create, fork or wake still in flight
	recent  []string                 // templates by their last create, the latest last
	forked  []string                 // forkKey(parent) by their last fork, the latest last
	slept   []string                 // wakeKey(id) by their last hibernation, the latest last
	closed  bool
	counts  struct{ made, used, expired int64 } // for tests and diagnostics
}

func newPreparedPool(max int, idle time.Duration) *preparedPool {
	return &preparedPool{max: max, idle: idle, ready: map[string]*preparedVMM{}, filling: map[string]chan struct{}{},
		ending: map[string]chan struct{}{}, taken: map[string]*preparedVMM{}}
}

// takePrepared hands a create from a template (rec: its record so far) the template's prepared
// VMM, if there is one of the same bake and shape; nil otherwise. A stale one (the template was
// baked again) is ended.
func (m *Manager) takePrepared(rec *record) *preparedVMM {
	pv, _ := m.takeReady(rec.Template, rec, func(pv *preparedVMM) bool { return pv.dir == rec.TemplateDir })
	return pv
}

// takeReady takes the VMM waiting under key for a sandbox like rec (none for one with volumes:
// their drives are fixed when QEMU starts), if it has rec's shape and fits says it fits (called
// with the pool's lock held). One that does not fit is retired and nil returned: ended is closed
// once it has ended.
func (m *Manager) takeReady(key string, rec *record, fits func(*preparedVMM) bool) (_ *preparedVMM, ended <-chan struct{}) {
	p := m.prep
	if p.max <= 0 || len(rec.Volumes) > 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pv := p.ready[key]
	if pv == nil {
		return nil, nil
	}
	delete(p.ready, key)
	if pv.expiry != nil {
		pv.expiry.Stop() // expire finds it no longer ready if it fires anyway
	}
	if pv.shape != shapeOf(rec) || !fits(pv) {
		return nil, m.retire(pv)
	}
	p.taken[pv.name] = pv
	p.counts.used++
	return pv, nil
}

// createDone ends a create from template (taken: the prepared VMM it took, or nil) and prepares
// the template's next VMM, in the background: at most PreparedTemplates templates are kept
// prepared, those created from last.
func (m *Manager) createDone(template string, taken *preparedVMM) {
	m.refill(template, &m.prep.recent, taken, func() (*preparedVMM, error) { return m.prepare(template) })
}

// refill ends the use of taken (or nil) and prepares the next VMM under key, in the background,
// moving key to the end of recent (the create's or the fork's list): at most PreparedTemplates
// keys of each list are kept prepared, those used last.
func (m *Manager) refill(key string, recent *[]string, taken *preparedVMM, prepare func() (*preparedVMM, error)) {
	p := m.prep
	if p.max <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if taken != nil {
		delete(p.taken, taken.name)
	}
	if p.closed {
		return
	}
	*recent = append(slices.DeleteFunc(*recent, func(k string) bool { return k == key }), key)
	for len(*recent) > p.max {
		old := (*recent)[0]
		*recent = (*recent)[1:]
		if pv := p.ready[old]; pv != nil {
			delete(p.ready, old)
			m.retire(pv)
		}
	}
	if p.ready[key] != nil || p.filling[key] != nil {
		return
	}
	done := make(chan struct{})
	p.filling[key] = done
	go func() {
		defer close(done)
		pv, err := prepare()
		p.mu.Lock()
		delete(p.filling, key)
		wanted := err == nil && !p.closed && slices.Contains(*recent, key) && p.ready[key] == nil
		if wanted {
			p.ready[key] = pv
			p.counts.made++
			if p.idle > 0 {
				pv.expiry = time.AfterFunc(p.idle, func() { m.expirePrepared(pv) })
			}
		}
		p.mu.Unlock()
		if err != nil {
			m.log.Warn("could not prepare a VMM", "for", key, "err", err)
		} else if !wanted {
			m.endPrepared(pv)
		}
	}()
}

// prepare starts a VMM for the next create of template.
func (m *Manager) prepare(template string) (_ *preparedVMM, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tmpl, err := m.Templates.Ensure(ctx, template, nil)
	if err != nil {
		return nil, err
	}
	if err := m.checkIdentity("template "+template, tmpl.Identity); err != nil {
		return nil, err
	}
	rec := record{Template: tmpl.Name, TemplateDir: tmpl.Dir, VCPUs: tmpl.VCPUs, MemoryMiB: tmpl.MemoryMiB, NIC: tmpl.NIC,
		VolumeSlots: tmpl.VolumeSlots}
	pv := &preparedVMM{name: layout.NewID(PreparedPrefix), key: tmpl.Name, template: tmpl.Name, dir: tmpl.Dir, shape: shapeOf(&rec)}
	pv.files = filepath.Join(m.layout.Sandboxes(), pv.name)
	defer func() {
		if err != nil {
			m.endPrepared(pv)
		}
	}()
	if err := os.MkdirAll(pv.files, 0o700); err != nil {
		return nil, err
	}
	disk := filepath.Join(pv.files, "disk.img")
	if err := storage.Clone(filepath.Join(tmpl.Dir, "disk.img"), disk); err != nil {
		return nil, err
	}
	return pv, m.startPrepared(ctx, pv, &rec, pv.files, disk, snapIn(tmpl.Dir).RAMFile)
}

// startPrepared starts pv's VMM for a sandbox like rec on disk and the RAM file ram: its uid,
// volume-slot placeholders (in dir) and a network slot that lets nothing out, then QEMU confined
// with -incoming defer. The caller ends pv on an error.
func (m *Manager) startPrepared(ctx context.Context, pv *preparedVMM, rec *record, dir, disk, ram string) (err error) {
	spec := rec.spec(disk)
	if spec.UID, err = m.uidFor(pv.name); err != nil {
		return err
	}
	if spec.Drives, err = m.drives(rec, dir); err != nil {
		return err
	}
	if rec.NIC {
		if m.net == nil {
			return fmt.Errorf("template %s has a network device, but networking is off on this host", rec.Template)
		}
		if pv.slot, err = m.net.Acquire(ctx, network.Policy{}); err != nil {
			return fmt.Errorf("network slot: %w", err)
		}
		if spec.Tap, err = pv.slot.OpenTap(); err != nil {
			return err
		}
		defer spec.Tap.Close() // the VMM holds its own copy
	}
	pv.vm, err = m.rt.Prepare(ctx, m.layout.RunDir(pv.name), spec, ram)
	return err
}

// expirePrepared ends pv if it is still waiting for a create (its idle time ran out). The
// template stays among those created from last: its next create prepares another.
func (m *Manager) expirePrepared(pv *preparedVMM) {
	p := m.prep
	p.mu.Lock()
	mine := p.ready[pv.key] == pv
	if mine {
		delete(p.ready, pv.key)
		p.counts.expired++
		m.log.Debug("prepared VMM idle too long, ended", "name", pv.name, "for", pv.key, "idle", p.idle)
		m.retire(pv)
	}
	p.mu.Unlock()
}

// retire ends pv (no longer ready) in the background; WaitPrepared on its key waits until it
// has ended: a wake's VMM holds its sandbox's disk image, which the wake's own VMM locks. Call
// with the pool's lock held.
func (m *Manager) retire(pv *preparedVMM) (ended <-chan struct{}) {
	p := m.prep
	done := make(chan struct{})
	p.ending[pv.key] = done
	go func() {
		m.endPrepared(pv)
		p.mu.Lock()
		if p.ending[pv.key] == done {
			delete(p.ending, pv.key)
		}
		p.mu.Unlock()
		close(done)
	}()
	return done
}

// endPrepared ends a prepared VMM that no create took, and frees what it held.
func (m *Manager) endPrepared(pv *preparedVMM) {
	if pv.expiry != nil {
		pv.expiry.Stop()
	}
	if pv.vm != nil {
		if err := m.rt.Kill(pv.vm); err != nil {
			m.log.Warn("could not end a prepared VMM", "name", pv.name, "err", err)
		}
		os.RemoveAll(pv.vm.RunDir)
	}
	os.RemoveAll(m.layout.RunDir(pv.name))
	if pv.slot != nil {
		if err := pv.slot.Release(); err != nil {
			m.log.Warn("network slot release", "name", pv.name, "err", err)
		}
	}
	os.RemoveAll(pv.files)
	if pv.snapHeld { // a fork's that no fork took
		os.RemoveAll(pv.snapDir)
	}
	m.releaseUID(pv.name)
}

// usePrepared makes pv's files, uid and slot sandbox rec's: the files dir becomes sbDir (not
// there yet), and the slot gets rec's egress policy. On an error pv is ended.
func (m *Manager) usePrepared(ctx context.Context, pv *preparedVMM, rec *record, sbDir string) error {
	if err := os.Rename(pv.files, sbDir); err != nil {
		m.endPrepared(pv)
		return err
	}
	pv.files = sbDir
	return m.ownPrepared(ctx, pv, rec)
}

// ownPrepared makes pv's uid and slot sandbox rec's; the slot gets rec's egress policy. On an
// error pv is ended.
func (m *Manager) ownPrepared(ctx context.Context, pv *preparedVMM, rec *record) error {
	if pv.slot != nil {
		pol, err := m.egressPolicy(rec.Egress, rec.EgressOpen, true)
		if err == nil {
			err = pv.slot.SetPolicy(pol)
		}
		if err != nil {
			m.endPrepared(pv)
			return fmt.Errorf("network slot: %w", err)
		}
	}
	m.mu.Lock()
	if uid, ok := m.uids[pv.name]; ok {
		delete(m.uids, pv.name)
		m.uids[rec.ID] = uid
	}
	m.mu.Unlock()
	timing.Mark(ctx, StepPrepared)
	return nil
}

// closePrepared ends every prepared VMM and waits for the preparations in flight (Close).
func (m *Manager) closePrepared() {
	p := m.prep
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = map[string]*preparedVMM{}
	var fills []chan struct{}
	for _, chs := range []map[string]chan struct{}{p.filling, p.ending} {
		for _, ch := range chs {
			fills = append(fills, ch)
		}
	}
	p.mu.Unlock()
	for _, pv := range ready {
		m.endPrepared(pv)
	}
	for _, ch := range fills {
		<-ch
	}
}

// DropPrepared ends template's prepared VMM, waiting for one being prepared, and prepares no
// other until the template is created from again (bake.VMs: the template is being deleted).
func (m *Manager) DropPrepared(template string) { m.drop(template, &m.prep.recent) }

// drop ends the VMM prepared under key, waiting for one being prepared, and takes key out of
// recent (the create's or the fork's list), so none is prepared until it is used again.
func (m *Manager) drop(key string, recent *[]string) {
	p := m.prep
	p.mu.Lock()
	*recent = slices.DeleteFunc(*recent, func(k string) bool { return k == key })
	pv, fill := p.ready[key], p.filling[key]
	var ended <-chan struct{}
	if pv != nil {
		delete(p.ready, key)
		ended = m.retire(pv)
	}
	p.mu.Unlock()
	if fill != nil {
		<-fill // it finds the key no longer wanted and ends its VMM
	}
	if ended != nil {
		<-ended
	}
}

// PreparedVMMs are the prepared VMMs by name (prep-<hex>) and pid: those waiting and those taken
// by a create still in flight.
func (m *Manager) PreparedVMMs() map[string]int {
	p := m.prep
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, pvs := range []map[string]*preparedVMM{p.ready, p.taken} {
		for _, pv := range pvs {
			out[pv.name] = pv.vm.Pid
		}
	}
	return out
}

// PreparedCounts are how many VMMs were prepared and how many creates took one.
func (m *Manager) PreparedCounts() (made, used int64) {
	m.prep.mu.Lock()
	defer m.prep.mu.Unlock()
	return m.prep.counts.made, m.prep.counts.used
}

// PreparedExpired is how many prepared VMMs were ended for waiting longer than PreparedIdle.
func (m *Manager) PreparedExpired() int64 {
	m.prep.mu.Lock()
	defer m.prep.mu.Unlock()
	return m.prep.counts.expired
}

// WaitPrepared waits until the VMM under key (a template's name, forkKey or wakeKey) is prepared
// or none is being prepared, and none is being ended (the bench keeps a preparation out of the
// next measurement; a wake spawns no VMM beside one that holds its disk).
func (m *Manager) WaitPrepared(ctx context.Context, key string) error {
	for {
		m.prep.mu.Lock()
		ch := m.prep.filling[key]
		if ch == nil {
			ch = m.prep.ending[key]
		}
		m.prep.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
