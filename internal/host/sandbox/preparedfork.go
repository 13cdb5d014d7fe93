package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/storage"
)

// Prepared fork VMMs: the first child's VMM of a sandbox's next fork, started before that fork is
// asked for. A sandbox forked once gets one (at most PreparedTemplates parents, those forked
// from last; ended with the parent's kill or hibernation, or when idle as a create's), prepared
// as a create's is (uid, a network slot with the empty policy, jail, cgroup, seccomp,
// -incoming defer, QMP connected) but on files of its own that the fork fills in later:
//
//   - the fork's snapshot directory, made now in place (snapshots/<id>, invisible without its
//     record) with an empty RAM file of the guest's size, which the VMM maps. QEMU maps mem-path
//     when it starts; a private mapping reads a file page as it is when first touched, and
//     nothing touches guest memory before the incoming state is loaded. The parent's save writes
//     its memory INTO that file (a reflink of its base, then the written pages: runtime's
//     diff), so the child maps the snapshot's RAM file itself, as a spawned child would.
//   - a disk file of the parent's disk's size, which the VMM opens (O_DIRECT: nothing of it is
//     cached); the fork reflinks the snapshot's disk into it.
//
// The fork is then left with the parent's save, two reflinks and the child's state load: QEMU's
// start is off its path. Its other children spawn their VMMs as before. A parent with volumes
// (their copies are drives fixed when QEMU starts) is not prepared for.

// forkKey is the pool key of parent's prepared fork VMM.
func forkKey(parent string) string { return "fork:" + parent }

// takeForkPrepared hands a fork of parent (rec: its record; disk: its disk file) the VMM prepared
// for it, if there is one of its bake, shape and disk size; nil otherwise. The fork's snapshot
// then owns the snapshot directory.
func (m *Manager) takeForkPrepared(parent string, rec *record, disk string) *preparedVMM {
	pv, _ := m.takeReady(forkKey(parent), rec, func(pv *preparedVMM) bool {
		return pv.dir == rec.TemplateDir && sameSize(disk, filepath.Join(pv.files, "disk.img"))
	})
	if pv != nil {
		pv.snapHeld = false // the fork's snapshot's now (pv is the fork's alone: taken)
	}
	return pv
}

// forkDone ends a fork of parent (taken: the prepared VMM its first child took, or nil) and, if
// it succeeded (ok), prepares the VMM of the parent's next fork in the background.
func (m *Manager) forkDone(parent string, taken *preparedVMM, ok bool) {
	if !ok {
		m.prep.mu.Lock()
		if taken != nil {
			delete(m.prep.taken, taken.name)
		}
		m.prep.mu.Unlock()
		return
	}
	m.refill(forkKey(parent), &m.prep.forked, taken, func() (*preparedVMM, error) { return m.prepareFork(parent) })
}

// prepareFork starts the VMM of the first child of parent's next fork.
func (m *Manager) prepareFork(parent string) (_ *preparedVMM, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := m.get(parent)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	src := sb.rec
	sb.mu.Unlock()
	if src.State != StateRunning || len(src.Volumes) > 0 {
		return nil, fmt.Errorf("sandbox %s is %s with %d volumes: no fork VMM prepared", parent, src.State, len(src.Volumes))
	}
	parentDisk, err := os.Stat(filepath.Join(sb.dir, "disk.img"))
	if err != nil {
		return nil, err
	}
	rec := record{Template: src.Template, TemplateDir: src.TemplateDir, VCPUs: src.VCPUs, MemoryMiB: src.MemoryMiB, NIC: src.NIC,
		VolumeSlots: src.VolumeSlots}
	pv := &preparedVMM{name: layout.NewID(PreparedPrefix), key: forkKey(parent), template: src.Template, dir: src.TemplateDir,
		shape: shapeOf(&rec), snapID: snapshot.NewID()}
	pv.files = filepath.Join(m.layout.Sandboxes(), pv.name)
	defer func() {
		if err != nil {
			m.endPrepared(pv)
		}
	}()
	if pv.snapDir, err = m.snapshots.BeginInPlace(pv.snapID); err != nil {
		return nil, err
	}
	pv.snapHeld = true
	ram := snapIn(pv.snapDir).RAMFile
	if err := sparseFile(ram, int64(rec.MemoryMiB)<<20); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(pv.files, 0o700); err != nil {
		return nil, err
	}
	disk := filepath.Join(pv.files, "disk.img")
	if err := sparseFile(disk, parentDisk.Size()); err != nil {
		return nil, err
	}
	return pv, m.startPrepared(ctx, pv, &rec, pv.files, disk, ram)
}

// DropForkPrepared ends the VMM prepared for parent's next fork, if any, waiting for one being
// prepared (the parent is killed or hibernated).
func (m *Manager) DropForkPrepared(parent string) { m.drop(forkKey(parent), &m.prep.forked) }

// sparseFile makes an empty file of size bytes (no blocks).
func sparseFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sameSize says whether files a and b exist with one size.
func sameSize(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && fa.Size() == fb.Size()
}

// useForkPrepared gives a fork's first child (rec, its files dir sbDir) the VMM prepared for the
// fork: its files, uid and slot become the child's (usePrepared) and the snapshot's disk is
// reflinked into the disk file the VMM opened.
func (m *Manager) useForkPrepared(ctx context.Context, pv *preparedVMM, rec *record, sbDir, diskSrc string) error {
	if err := m.usePrepared(ctx, pv, rec, sbDir); err != nil {
		return err
	}
	if err := storage.CloneInto(diskSrc, filepath.Join(sbDir, "disk.img")); err != nil {
		m.endPrepared(pv)
		return err
	}
	return nil
}

// WaitForkPrepared waits until parent's next fork has a prepared VMM or none is being prepared
// (tests, and the bench keeping a preparation out of the next measurement).
func (m *Manager) WaitForkPrepared(ctx context.Context, parent string) error {
	return m.WaitPrepared(ctx, forkKey(parent))
}

// ForkPrepared is the VMM prepared for parent's next fork, if one waits: its name and pid (for
// tests and diagnostics).
func (m *Manager) ForkPrepared(parent string) (name string, pid int, ok bool) {
	return m.readyVMM(forkKey(parent))
}

// readyVMM is the name and pid of the prepared VMM waiting under key, if any.
func (m *Manager) readyVMM(key string) (name string, pid int, ok bool) {
	m.prep.mu.Lock()
	defer m.prep.mu.Unlock()
	if pv := m.prep.ready[key]; pv != nil {
		return pv.name, pv.vm.Pid, true
	}
	return "", 0, false
}
