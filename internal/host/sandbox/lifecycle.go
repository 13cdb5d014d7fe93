package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// MaxForkCount bounds one fork call: each child is a VMM process on this host.
const MaxForkCount = hostapi.MaxForkCount

// snapshotDiskMiB is admitted for a snapshot's disk on top of its memory: the disk is a reflink
// (free when made) that pins the sandbox's blocks, so the sandbox's next writes allocate anew.
const snapshotDiskMiB = 256

// BaseDirs is the set of directories sandboxes restore from, and prepared VMMs map
// (snapshot.Store.InUse).
func (m *Manager) BaseDirs() map[string]bool {
	used := map[string]bool{}
	m.mu.Lock()
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		used[sb.rec.BaseDir] = true
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	m.prep.mu.Lock()
	for _, pv := range m.prep.ready { // it maps the bake's RAM file
		used[pv.dir] = true
	}
	m.prep.mu.Unlock()
	return used
}

// LazyMounts is the set of mounts adopted sandboxes' memory is served from (snapshot.Lazy).
func (m *Manager) LazyMounts() map[string]bool {
	out := map[string]bool{}
	m.mu.Lock()
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.rec.LazyMount != "" {
			out[sb.rec.LazyMount] = true
		}
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	return out
}

// SnapshotSandbox saves a running sandbox's memory and disk as a snapshot object. The sandbox is
// paused only for the copy of what its guest wrote and keeps running after.
func (m *Manager) SnapshotSandbox(ctx context.Context, id string) (hostapi.Snapshot, error) {
	s, _, err := m.snapshot(ctx, id, snapKept, m.cfg.FullSnapshots, nil)
	return s.Snapshot, err
}

// SnapshotForFork is SnapshotSandbox for a fork onto another host: its children restore it at
// once and it is deleted after, so, like a same-host fork's, it skips the guest's sync (the
// memory and the disk are captured together while the VM is paused). Still published and listed.
func (m *Manager) SnapshotForFork(ctx context.Context, id string) (hostapi.Snapshot, error) {
	s, _, err := m.snapshot(ctx, id, snapForFork, m.cfg.FullSnapshots, nil)
	return s.Snapshot, err
}

// snapKind says what a snapshot is for.
type snapKind int

const (
	snapKept     snapKind = iota // a snapshot object the caller keeps: the guest syncs first
	snapForFork                  // a snapshot object a cross-host fork restores, then deletes: no guest sync
	snapInternal                 // a same-host fork's: not listed, not published, gone with its children
)

// SnapshotSandboxFull is SnapshotSandbox on the full-RAM path (for comparisons).
func (m *Manager) SnapshotSandboxFull(ctx context.Context, id string) (hostapi.Snapshot, error) {
	s, _, err := m.snapshot(ctx, id, snapKept, true, nil)
	return s.Snapshot, err
}

// snapshot saves sandbox id as kind says. warm, when not nil, brings the pages the guest had read
// into the snapshot's RAM file's page cache (runtime.SnapshotStats.Read): a caller that restores from it soon runs it.
// pre, a VMM prepared for this fork (snapInternal only), names the snapshot and the directory
// it is written in, in place: its RAM file, which pre's VMM maps, receives the memory.
func (m *Manager) snapshot(ctx context.Context, id string, kind snapKind, full bool, pre *preparedVMM) (_ snapshot.Record, warm func() (int64, error), err error) {
	internal := kind == snapInternal
	sb, err := m.awake(ctx, id)
	if err != nil {
		return snapshot.Record{}, nil, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	timing.Mark(ctx, StepSaveLock)
	rec, c := sb.current()
	if rec.State != StateRunning {
		return snapshot.Record{}, nil, errdefs.Conflictf("sandbox %s is %s", id, rec.State)
	}
	if err := volume.CheckCopyable(id, rec.Volumes); err != nil {
		return snapshot.Record{}, nil, err
	}
	// The memory file (at most the guest's RAM) and room for the disk blocks the snapshot pins
	// (and each volume copy's).
	// A fork's snapshot skips the guest's sync: its children restore the memory and the disk
	// together, captured while the VM is paused (QEMU drains and flushes its drives when it stops
	// the VM), so what the guest has not written yet is in the memory they restore. A snapshot
	// the caller keeps (and may publish, or keep past this VMM's version) is synced as before; a
	// cross-host fork's is restored at once and deleted, as a same-host fork's.
	gc := c
	if kind != snapKept {
		gc = nil
	}
	release, err := m.prepareSave(ctx, sb, gc, "a snapshot of "+id, int64(rec.MemoryMiB+snapshotDiskMiB*(1+len(rec.Volumes)))<<20)
	if err != nil {
		return snapshot.Record{}, nil, err
	}
	defer release()
	timing.Mark(ctx, StepSaveSync)
	if !internal {
		faultpoint.Reach("agent.snapshot.admitted") // its room is admitted, nothing written yet
	}
	snap := snapshot.Record{Snapshot: hostapi.Snapshot{ID: snapshot.NewID(), SandboxID: id, Template: rec.Template, TemplateDir: rec.TemplateDir,
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, NIC: rec.NIC, VolumeSlots: rec.VolumeSlots,
		Identity: rec.Identity, // the VMM that runs the sandbox, which writes the state
		Env:      rec.Env, Egress: rec.Egress, EgressOpen: rec.EgressOpen},
		Internal: internal}
	var tmp string
	if pre != nil && internal {
		snap.ID, tmp = pre.snapID, pre.snapDir
		// In place: the directory is the snapshot's own, visible once its record is written.
		defer func() {
			if err != nil {
				os.RemoveAll(tmp)
			}
		}()
	} else {
		tmp, err = m.snapshots.Begin(snap.ID)
		defer os.RemoveAll(tmp) // nothing half-made is ever visible
		if err != nil {
			return snapshot.Record{}, nil, snapshotErr(id, err)
		}
	}
	// A snapshot published at once (its volume copies with it; the volumes themselves stay on
	// this host) is not flushed: the store's copy is the durable one (see publish).
	bs := m.Templates.Blob()
	publishing := !internal && bs != nil
	vm := rec.VM
	st, err := m.rt.Snapshot(ctx, &vm, snapIn(rec.BaseDir), snapIn(tmp), runtime.SnapshotOptions{
		Full: full, NoSync: internal || publishing, // a fork's is gone with its children
		WhilePaused: func() error {
			// The disk and the volumes at the instant of the memory: the guest's page cache and
			// its mounted filesystems match the copied bytes.
			if err := storage.Clone(filepath.Join(sb.dir, "disk.img"), filepath.Join(tmp, "disk.img")); err != nil {
				return err
			}
			vols, err := m.copyVolumes(rec.Volumes, tmp)
			snap.Volumes = vols
			return err
		},
	})
	if err != nil {
		return snapshot.Record{}, nil, snapshotErr(id, err)
	}
	timing.Mark(ctx, StepSave)
	if !internal {
		faultpoint.Reach("agent.snapshot.written") // its files are written, not committed
	}
	snap.CreatedAt = time.Now().UTC()
	// Read after the save: a process the guest started before the pause was marked before its
	// start reached the guest (StartProcess).
	snap.NoProcs = !sb.hasProcs()
	snap.PauseMS = float64(st.Pause.Microseconds()) / 1000
	snap.DirtyBytes = st.DirtyBytes
	if publishing {
		// For the host that pulls it: what to read ahead while its VMM starts.
		if err := snapshot.WriteWorkingSet(tmp, st.Read); err != nil {
			return snapshot.Record{}, nil, snapshotErr(id, err)
		}
	}
	commit := m.snapshots.Commit
	if pre != nil && internal {
		commit = m.snapshots.CommitInPlace
	}
	if err := commit(tmp, &snap); err != nil {
		return snapshot.Record{}, nil, snapshotErr(id, err)
	}
	timing.Mark(ctx, StepSaveCommit)
	m.log.Info("snapshot", "sandbox", id, "snapshot", snap.ID, "pause_ms", snap.PauseMS, "copied_mib", st.DirtyBytes>>20, "full", st.Full)
	if publishing {
		var ram artifact.Derived
		if !st.Full {
			// The memory image is its base's (a reflink) but for the pages the diff wrote.
			ram = artifact.Derived{Base: snapIn(rec.BaseDir).RAMFile, Written: st.Written}
		}
		m.publish(ctx, bs, &snap, ram)
	}
	if len(st.Read) > 0 {
		ram := snapIn(snap.Dir).RAMFile
		warm = func() (int64, error) { return storage.ReadRuns(ram, st.Read) }
	}
	return snap, warm, nil
}

// publish puts a snapshot just taken, whose state file was not flushed, in the host's blob store
// so another host can restore it. Its record then says this boot wrote its files unflushed: the
// store's copy is the durable one, and after a reboot this host drops its own and pulls it again
// (snapshot.Store.DropTornPulls); flushing the state file took a fork to another host 0.3-0.7 s
// on a loaded machine (it flushes what the pool's filesystem has written since its last flush).
// A failure leaves the snapshot on this host only (not published), flushed as any other, and is
// logged.
func (m *Manager) publish(ctx context.Context, bs blob.Store, snap *snapshot.Record, ram artifact.Derived) {
	start := time.Now()
	snap.UnflushedBoot = snapshot.BootID()
	st, err := m.snapshots.Publish(ctx, bs, snap, ram)
	timing.Mark(ctx, StepPublish)
	if err != nil {
		snap.UnflushedBoot = ""
		if err := storage.SyncFile(snap.File("state")); err != nil {
			m.log.Warn("flushing a snapshot's state failed", "snapshot", snap.ID, "err", err)
		}
		m.log.Warn("publishing a snapshot failed: it restores on this host only", "snapshot", snap.ID, "store", bs.String(), "err", err)
		return
	}
	m.log.Info("published snapshot", "snapshot", snap.ID, "ms", time.Since(start).Milliseconds(), "sent_mib", st.Bytes>>20,
		"chunks", st.Chunks, "named_unread", st.Known)
}

// snapshotErr names a full disk as such: the caller can free space and retry.
func snapshotErr(id string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errdefs.New(errdefs.NoSpace, "snapshot of %s: the host's disk is full; the sandbox keeps running", id)
	}
	return fmt.Errorf("snapshot of %s: %w", id, err)
}

// Fork makes count children of a running sandbox: each starts from the parent's exact memory and
// files at one instant, then diverges. Children share unchanged memory pages (MAP_PRIVATE over
// one RAM file) and disk blocks (reflinks). Either all children are made or none.
func (m *Manager) Fork(ctx context.Context, id string, count int) (_ []hostapi.Sandbox, err error) {
	if count < 1 || count > MaxForkCount {
		return nil, errdefs.Invalidf("count must be 1-%d", MaxForkCount)
	}
	sctx := timing.With(ctx, timing.NewTrace())
	// The VMM prepared for this parent's fork, if any: the snapshot is written where it maps its
	// memory, and it becomes the first child's (preparedfork.go).
	var pre *preparedVMM
	if sb, err := m.get(id); err == nil {
		if rec, _ := sb.current(); rec.State == StateRunning {
			pre = m.takeForkPrepared(id, &rec, filepath.Join(sb.dir, "disk.img"))
		}
	}
	defer func() { m.forkDone(id, pre, err == nil) }()
	snap, warm, err := m.snapshot(sctx, id, snapInternal, m.cfg.FullSnapshots, pre)
	if err != nil {
		if pre != nil {
			m.endPrepared(pre)
		}
		return nil, err
	}
	if warm != nil {
		// Side by side with the children's VMMs starting (they touch their RAM only once their
		// state is loaded, 30 ms and more later): the pages the parent had read, into the page
		// cache of the snapshot's RAM file, so the children fault fewer in from disk. (Done
		// before the children started it cost more than it saved: tens of MiB read where a
		// child faults in a few.)
		// Not waited for: the snapshot's files stay while a child uses them.
		go func() {
			if _, err := warm(); err != nil {
				m.log.Warn("warming a fork's memory failed: its children read it from disk", "sandbox", id, "err", err)
			}
		}()
	}
	m.steps.Observe("fork_snapshot", timing.From(sctx))
	// The fork's snapshot is internal: marked deleted now, freed with its last child.
	defer m.snapshots.Delete(snap.ID)
	parent, err := m.get(id)
	if err != nil {
		return nil, err
	}
	parent.mu.Lock()
	env, egress, open := parent.rec.Env, parent.rec.Egress, parent.rec.EgressOpen
	parent.mu.Unlock()
	children := make([]hostapi.Sandbox, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4) // restores are CPU-heavy: a few at a time
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			src := source{rec: record{Template: snap.Template, TemplateDir: snap.TemplateDir, VCPUs: snap.VCPUs,
				MemoryMiB: snap.MemoryMiB, BaseDir: snap.Dir, ForkOf: id, Env: env,
				Egress: egress, EgressOpen: open, NIC: snap.NIC, VolumeSlots: snap.VolumeSlots, Identity: snap.Identity},
				diskSrc: snap.File("disk.img"), volCopies: snap.Volumes}
			if i == 0 {
				src.prepared = pre
			}
			// Each child its own trace: they restore side by side.
			children[i], errs[i] = m.launch(timing.With(ctx, timing.NewTrace()), "fork", layout.NewID("sb_"), src)
		}()
	}
	wg.Wait()
	// The children have their own copies of the volumes: the fork's pin no blocks past it.
	for _, c := range snap.Volumes {
		os.Remove(snap.File(volume.CopyFile(c.Slot)))
	}
	if err := errors.Join(errs...); err != nil {
		for i, c := range children {
			if errs[i] == nil {
				m.Kill(c.ID)
			}
		}
		return nil, fmt.Errorf("fork of %s failed, no child kept: %w", id, err)
	}
	return children, nil
}

// current is sb's record and guest channel now.
func (sb *sandbox) current() (record, *guest.Client) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rec, sb.client
}

// prepareSave readies saving sb's memory: it admits need bytes of the pool first (what names the
// save), then has the guest write its buffers, so the disk holds what the memory saw. Call
// release once the files are written.
func (m *Manager) prepareSave(ctx context.Context, sb *sandbox, c *guest.Client, what string, need int64) (release func(), err error) {
	release, err = m.disk.Admit(what, need)
	if err != nil {
		return nil, err
	}
	if c != nil {
		if err := c.Sync(ctx); err != nil {
			release()
			return nil, m.callErr(sb, err)
		}
	}
	return release, nil
}

// Hibernate saves a running sandbox's memory next to its disk and ends its VMM: it then costs
// disk, not RAM or CPU. The next call wakes it, with a VMM prepared for it meanwhile
// (preparedwake.go).
func (m *Manager) Hibernate(ctx context.Context, id string) (hostapi.Sandbox, error) {
	return m.hibernate(ctx, id, true)
}

// hibernate is Hibernate; prepareWake false (a hibernation that frees memory) prepares no VMM
// for the wake.
func (m *Manager) hibernate(ctx context.Context, id string, prepareWake bool) (hostapi.Sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	m.DropForkPrepared(id) // its memory and slot are freed with the VM's
	sb.op.Lock()
	defer sb.op.Unlock()
	rec, c := sb.current()
	switch rec.State {
	case StateHibernated:
		return sb.info(), nil
	case StateRunning:
	default:
		return hostapi.Sandbox{}, errdefs.Conflictf("sandbox %s is %s", id, rec.State)
	}
	release, err := m.prepareSave(ctx, sb, c, "hibernating "+id, int64(rec.MemoryMiB)<<20)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	defer release()
	if c != nil && sb.hasProcs() { // the exits so far; later ones are in the saved table
		m.lookExits(ctx, sb, c)
	}
	gen := rec.MemGen + 1
	memDir := filepath.Join(sb.dir, "mem-"+strconv.Itoa(gen))
	os.RemoveAll(memDir)
	if err := os.MkdirAll(memDir, 0o700); err != nil {
		return hostapi.Sandbox{}, err
	}
	vm := rec.VM
	sb.mu.Lock()
	sb.killed = true // the VMM's end is ours, not a crash
	sb.mu.Unlock()
	st, err := m.rt.Snapshot(ctx, &vm, snapIn(rec.BaseDir), snapIn(memDir), runtime.SnapshotOptions{KeepPaused: true, Full: m.cfg.FullSnapshots})
	if err != nil {
		os.RemoveAll(memDir)
		m.rt.Resume(context.Background(), &vm)
		sb.mu.Lock()
		sb.killed = false
		sb.mu.Unlock()
		return hostapi.Sandbox{}, snapshotErr(id, err)
	}
	faultpoint.Reach("agent.hibernate.saved") // memory saved, the VMM paused, the record says running
	sb.closeGuest()
	if err := m.rt.Kill(&vm); err != nil {
		return hostapi.Sandbox{}, err
	}
	os.RemoveAll(vm.RunDir)
	if len(st.Read) > 0 {
		// The pages the guest had read, into the page cache of its memory file: a wake soon
		// after does not read them from disk. Listed beside it too where it is published, for a
		// host that adopts it (publishHibernated).
		if m.Templates.Blob() != nil {
			if err := snapshot.WriteWorkingSet(memDir, st.Read); err != nil {
				m.log.Warn("listing a hibernated sandbox's working set failed: a wake elsewhere reads it from disk", "sandbox", id, "err", err)
			}
		}
		if _, err := storage.ReadRuns(snapIn(memDir).RAMFile, st.Read); err != nil {
			m.log.Warn("warming a hibernated sandbox's memory failed: its wake reads it from disk", "sandbox", id, "err", err)
		}
	}
	m.releaseNetwork(sb)
	oldBase := rec.BaseDir
	sb.mu.Lock()
	sb.rec.State = StateHibernated
	sb.rec.BaseDir = memDir
	sb.rec.MemGen = gen
	sb.rec.VM = runtime.VM{}
	err = sb.persist()
	sb.mu.Unlock()
	m.freeLazyMem(sb) // the new hibernation holds all of the memory (a FUSE base is never diffed)
	m.dropOwnMem(sb, oldBase)
	m.snapshots.GC()
	if err == nil {
		m.publishHibernated(ctx, sb)
		if prepareWake && len(rec.Volumes) == 0 {
			m.hibernated(id)
		}
	}
	return sb.info(), err
}

// dropOwnMem deletes a sandbox's own earlier memory snapshot once nothing restores from it.
func (m *Manager) dropOwnMem(sb *sandbox, dir string) {
	if filepath.Dir(dir) == sb.dir {
		os.RemoveAll(dir)
	}
}

// Wake restores a hibernated sandbox from its memory snapshot and disk. Concurrent callers share
// one wake.
func (m *Manager) Wake(ctx context.Context, id string) (hostapi.Sandbox, error) {
	sb, err := m.awake(ctx, id)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	return sb.info(), nil
}

// awake returns the sandbox, waking it first if it is hibernated.
func (m *Manager) awake(ctx context.Context, id string) (*sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	sb.lastUsed = time.Now()
	hibernated := sb.rec.State == StateHibernated
	sb.mu.Unlock()
	if !hibernated {
		return sb, nil
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	rec := sb.rec
	sb.mu.Unlock()
	if rec.State != StateHibernated { // another caller woke it meanwhile
		return sb, nil
	}
	// Checked before the wake: a mismatch leaves the sandbox hibernated, not failed.
	if err := m.checkIdentity("hibernated sandbox "+id, rec.Identity); err != nil {
		return nil, err
	}
	release, err := m.admitWake(ctx, id, rec.MemoryMiB)
	if err != nil {
		return nil, err
	}
	defer release() // once running, the sandbox counts itself
	start := time.Now()
	ctx = timing.With(ctx, timing.NewTrace())
	pre, err := m.takeWakePrepared(ctx, &rec)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s was not woken (it stays hibernated): %w", id, err)
	}
	vm, client, slot, err := m.restoreVM(ctx, &rec, m.layout.RunDir(id), filepath.Join(sb.dir, "disk.img"), pre)
	m.wakeDone(id, pre)
	if err != nil {
		sb.mu.Lock()
		sb.rec.State = StateError
		sb.rec.Error = "wake failed: " + err.Error()
		sb.persist()
		sb.mu.Unlock()
		return nil, errdefs.Conflictf("sandbox %s could not be woken: %v", id, err)
	}
	sb.mu.Lock()
	sb.setRunning(vm, client, slot)
	sb.procWatch = true // what ended after the last look before the hibernation
	sb.killed = false
	sb.rec.Error, sb.rec.Published = "", ""
	err = sb.persist()
	sb.mu.Unlock()
	m.watch(sb, vm)
	if err == nil {
		timing.Mark(ctx, StepBookkeeping)
		m.steps.Observe("wake", timing.From(ctx))
	}
	m.log.Info("woke sandbox", "sandbox", id, "ms", time.Since(start).Milliseconds())
	return sb, err
}

// idleLoop hibernates sandboxes no call has touched for idle (checked every few seconds).
func (m *Manager) idleLoop(ctx context.Context, idle time.Duration) {
	periodic.Every(ctx, min(idle/4, 5*time.Second), func() { m.hibernateIdle(ctx, idle) })
}

// hibernateIdle hibernates the running sandboxes no call has touched for idle.
func (m *Manager) hibernateIdle(ctx context.Context, idle time.Duration) {
	m.mu.Lock()
	var due []string
	for id, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.rec.State == StateRunning && sb.busy == 0 && time.Since(sb.lastUsed) > idle {
			due = append(due, id)
		}
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	for _, id := range due {
		if _, err := m.Hibernate(ctx, id); err != nil {
			m.log.Warn("idle hibernation failed", "sandbox", id, "err", err)
		} else {
			m.log.Info("hibernated idle sandbox", "sandbox", id, "idle", idle)
		}
	}
}

// InUse marks a sandbox busy for the length of one API call: a sandbox in use is not idle, and is
// the last one memory pressure hibernates.
func (m *Manager) InUse(id string) (done func()) {
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	if sb == nil {
		return func() {}
	}
	sb.mu.Lock()
	sb.busy++
	sb.lastUsed = time.Now()
	sb.mu.Unlock()
	return func() {
		sb.mu.Lock()
		sb.busy--
		sb.lastUsed = time.Now()
		sb.mu.Unlock()
	}
}
