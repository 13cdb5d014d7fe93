package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// source is what a new sandbox is restored from.
type source struct {
	rec     record // template fields, base dir, lineage
	diskSrc string // disk image the sandbox's disk is reflinked from
	noProcs bool   // a snapshot whose sandbox had no background processes (snapshot.Record.NoProcs)
	// volCopies are the snapshot's volume copies, or the template's data volume (in the directory
	// rec.BaseDir): the sandbox mounts a new volume made from each, in the same slot, already
	// mounted in its guest.
	volCopies []hostapi.SnapshotVolume
	// prepared: the VMM prepared for a fork, taken by its first child (preparedfork.go).
	prepared *preparedVMM
}

var idRE = regexp.MustCompile(`^sb_[a-z0-9]{1,60}$`)

// Create restores a new sandbox from a template's snapshot (baking the template first if this
// host has not) or from a snapshot. It returns once the sandbox's guest agent answers.
func (m *Manager) Create(ctx context.Context, req hostapi.CreateRequest) (hostapi.Sandbox, error) {
	ctx, _ = timing.Ensure(ctx) // a caller's trace (the bench's) sees the steps too
	if req.ID == "" {
		req.ID = layout.NewID("sb_")
	} else if !idRE.MatchString(req.ID) {
		return hostapi.Sandbox{}, errdefs.Invalidf("sandbox id %q: use sb_ followed by 1-60 lowercase letters or digits", req.ID)
	}
	if req.Hibernated != "" {
		if req.Template != "" || req.SnapshotID != "" || req.ForkOf != "" || len(req.Env) > 0 || req.Egress != nil || len(req.Volumes) > 0 {
			return hostapi.Sandbox{}, errdefs.Invalidf("hibernated adopts a sandbox as it was: nothing but id may be given with it")
		}
		return m.adoptHibernated(ctx, req.ID, req.Hibernated)
	}
	if req.ForkOf != "" && req.SnapshotID == "" {
		return hostapi.Sandbox{}, errdefs.Invalidf("fork_of needs snapshot_id: the snapshot of the parent the child starts from")
	}
	var src source
	switch {
	case req.SnapshotID != "":
		snap, err := m.loadSnapshot(ctx, req.SnapshotID)
		if err != nil {
			return hostapi.Sandbox{}, err
		}
		if req.Template != "" && req.Template != snap.Template {
			return hostapi.Sandbox{}, errdefs.Invalidf("snapshot %s is of template %s, not %s", snap.ID, snap.Template, req.Template)
		}
		src = source{rec: record{Template: snap.Template, TemplateDir: snap.TemplateDir, VCPUs: snap.VCPUs,
			MemoryMiB: snap.MemoryMiB, BaseDir: snap.Dir, SnapshotID: snap.ID, NIC: snap.NIC, VolumeSlots: snap.VolumeSlots,
			Identity: snap.Identity}, diskSrc: snap.File("disk.img"), noProcs: snap.NoProcs, volCopies: snap.Volumes}
		if len(snap.Volumes) > 0 && len(req.Volumes) > 0 {
			return hostapi.Sandbox{}, errdefs.Conflictf("snapshot %s restores with copies of its %d volumes in their slots; no other volumes can be attached to a sandbox made from it", snap.ID, len(snap.Volumes))
		}
		if req.ForkOf != "" { // a fork child made on another host than its parent's
			if len(req.Env) > 0 || req.Egress != nil || len(req.Volumes) > 0 {
				return hostapi.Sandbox{}, errdefs.Invalidf("a fork child (fork_of) takes its parent's env and egress, and has no volumes")
			}
			src.rec.SnapshotID, src.rec.ForkOf = "", req.ForkOf
			req.Env, req.Egress, req.EgressOpen = snap.Env, snap.Egress, snap.EgressOpen
		}
	case req.Template != "":
		tmpl, err := m.Templates.Ensure(ctx, req.Template, nil)
		if err != nil {
			return hostapi.Sandbox{}, err
		}
		src = source{rec: record{Template: tmpl.Name, TemplateDir: tmpl.Dir, VCPUs: tmpl.VCPUs, MemoryMiB: tmpl.MemoryMiB,
			BaseDir: tmpl.Dir, NIC: tmpl.NIC, VolumeSlots: tmpl.VolumeSlots, Identity: tmpl.Identity}, diskSrc: filepath.Join(tmpl.Dir, "disk.img"),
			volCopies: tmpl.Volumes}
		if err := beside(tmpl.Name, tmpl.Volumes, req.Volumes); err != nil {
			return hostapi.Sandbox{}, err
		}
		if len(tmpl.Env) > 0 { // the template's env, under the sandbox's own
			env := maps.Clone(tmpl.Env)
			maps.Copy(env, req.Env)
			req.Env = env
		}
	default:
		return hostapi.Sandbox{}, errdefs.Invalidf("template (or snapshot_id) is required")
	}
	if _, err := m.egressPolicy(req.Egress, req.EgressOpen, false); err != nil {
		return hostapi.Sandbox{}, errdefs.Invalidf("%v", err)
	}
	if err := m.CheckSize("template "+src.rec.Template, src.rec.VCPUs, src.rec.MemoryMiB); err != nil {
		return hostapi.Sandbox{}, err
	}
	if err := m.RelieveForCreate(ctx, "sandbox "+req.ID); err != nil {
		return hostapi.Sandbox{}, err
	}
	vols, err := m.volumes.ValidateMounts(req.Volumes, src.rec.VolumeSlots-len(src.volCopies))
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	src.rec.Env, src.rec.Egress, src.rec.EgressOpen, src.rec.Volumes = req.Env, req.Egress, req.EgressOpen, vols
	timing.Mark(ctx, StepResolve)
	return m.launch(ctx, "create", req.ID, src)
}

// beside checks the volumes a create from template name attaches after the copy of its data
// volume (copies, in the first slots): none may be mounted where a copy is, above or below it.
// (A database whose VM died gets its volume back this way: internal/database, heal.go.)
func beside(name string, copies []hostapi.SnapshotVolume, attach []hostapi.VolumeMount) error {
	for _, c := range copies {
		for i, a := range attach {
			p, q := path.Clean(a.MountPath), path.Clean(c.MountPath)
			if p == q || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
				return errdefs.Invalidf("volumes[%d].mount_path %q overlaps %q, where template %s mounts its data volume", i, a.MountPath, c.MountPath, name)
			}
		}
	}
	return nil
}

// loadSnapshot finds snapshot id on this host or, if the host has a blob store, pulls it from
// there (a snapshot published by another host).
func (m *Manager) loadSnapshot(ctx context.Context, id string) (*snapshot.Record, error) {
	snap, err := m.snapshots.Load(id)
	bs := m.Templates.Blob()
	if err == nil || !errdefs.Is(err, errdefs.NotFound) || bs == nil {
		return snap, err
	}
	start := time.Now()
	snap, st, err := m.snapshots.Pull(ctx, bs, id)
	timing.Mark(ctx, StepPull)
	if err != nil {
		if errdefs.Is(err, errdefs.NotFound) {
			return nil, errdefs.NotFoundf("snapshot %s not found on this host nor in its blob store", id)
		}
		return nil, fmt.Errorf("pulling snapshot %s: %w", id, err)
	}
	m.log.Info("pulled snapshot", "snapshot", id, "ms", time.Since(start).Milliseconds(), "fetched_mib", st.Bytes>>20,
		"local_mib", st.LocalBytes>>20)
	if snap.LazyMount == "" {
		m.warmPulled("snapshot "+id, snap.Dir)
	}
	return snap, nil
}

// warmPulled reads the working set listed in dir (a memory image just pulled) into the page cache
// of its RAM file, side by side with the VMM that restores from it starting: the pull placed much
// of the file by reflinking this host's own copies of its chunks, whose cached pages belong to
// other files. Not waited for: the files stay while a VM restores from them.
func (m *Manager) warmPulled(what, dir string) {
	go func() {
		start := time.Now()
		n, err := snapshot.WarmWorkingSet(dir)
		if err != nil {
			m.log.Warn("reading a pulled memory image's working set failed: its guest faults it in from disk", "image", what, "err", err)
			return
		}
		m.log.Debug("read a pulled memory image's working set", "image", what, "mib", n>>20, "ms", time.Since(start).Milliseconds())
	}()
}

// launch reflinks the disk, restores the VM and waits for its guest agent. Its steps are timed
// in ctx's trace and, once it succeeded, kept in the step histograms under op.
func (m *Manager) launch(ctx context.Context, op, id string, src source) (hostapi.Sandbox, error) {
	start := time.Now()
	rec := src.rec
	rec.ID, rec.State, rec.CreatedAt = id, StateCreating, start.UTC()
	dropVols := func() {}
	if len(src.volCopies) > 0 { // the copies take the first slots, attached volumes the next
		vols, undo, err := m.volumesFrom(src.volCopies, rec.BaseDir)
		if err != nil {
			return hostapi.Sandbox{}, err
		}
		rec.Volumes, dropVols = append(vols, src.rec.Volumes...), undo
	}
	sb := &sandbox{dir: filepath.Join(m.layout.Sandboxes(), id), rec: rec, lastUsed: start}
	refuse := func(err error) (hostapi.Sandbox, error) {
		m.mu.Unlock()
		if src.prepared != nil {
			m.endPrepared(src.prepared)
		}
		dropVols()
		return hostapi.Sandbox{}, err
	}
	m.mu.Lock()
	if m.closed {
		return refuse(errdefs.Capacityf("host agent is shutting down"))
	}
	if _, dup := m.sandboxes[id]; dup {
		return refuse(errdefs.Conflictf("sandbox %s already exists", id))
	}
	if err := m.checkAttachLocked(id, rec.Volumes); err != nil {
		return refuse(err)
	}
	if err := m.admitSandboxLocked(id, rec.MemoryMiB); err != nil {
		return refuse(err)
	}
	m.sandboxes[id] = sb
	m.mu.Unlock()
	timing.Mark(ctx, StepAdmit)

	runDir := m.layout.RunDir(id)
	pre := src.prepared // a fork's first child takes the VMM prepared for the fork
	// A create from a template (without volumes) takes its prepared VMM.
	if op == "create" && rec.SnapshotID == "" && rec.ForkOf == "" && len(src.volCopies) == 0 {
		pre = m.takePrepared(&rec)
		defer func() { m.createDone(rec.Template, pre) }()
	}
	fail := func(err error) (hostapi.Sandbox, error) {
		m.mu.Lock()
		delete(m.sandboxes, id)
		m.mu.Unlock()
		os.RemoveAll(sb.dir)
		os.RemoveAll(runDir)
		m.releaseUID(id)
		dropVols() // after the sandbox let go of them
		return hostapi.Sandbox{}, err
	}
	disk := filepath.Join(sb.dir, "disk.img")
	if pre != nil && src.prepared != nil {
		if err := m.useForkPrepared(ctx, pre, &rec, sb.dir, src.diskSrc); err != nil {
			return fail(err)
		}
	} else if pre != nil {
		if err := m.usePrepared(ctx, pre, &rec, sb.dir); err != nil {
			return fail(err)
		}
	} else {
		if err := os.MkdirAll(sb.dir, 0o700); err != nil {
			return fail(err)
		}
		if err := storage.Clone(src.diskSrc, disk); err != nil {
			return fail(err)
		}
		timing.Mark(ctx, StepDiskClone)
	}
	vm, client, slot, err := m.restoreVM(ctx, &rec, runDir, disk, pre)
	if err != nil {
		return fail(err)
	}
	// Copies of a snapshot's or template's volumes are mounted in the restored guest already.
	if err := m.volumes.Mount(ctx, m.rt, vm, client, rec.Volumes, len(src.volCopies)); err != nil {
		client.Close()
		m.rt.Kill(vm)
		if slot != nil {
			slot.Release()
		}
		return fail(err)
	}
	timing.Mark(ctx, StepVolumes)
	faultpoint.Reach("agent.launch." + op) // the VMM runs, its record is not on disk yet
	inherits := m.restoredProcs(src)
	sb.mu.Lock()
	sb.setRunning(vm, client, slot)
	sb.rec.ReadyMs = time.Since(start).Milliseconds()
	if inherits { // the exits in the copied table are the source's: the first look tells (exits.go)
		sb.procWatch, sb.inheritBefore, sb.inheritSeq = true, start, client.Ready().ExitSeq
	}
	err = sb.persist()
	sb.mu.Unlock()
	if err != nil {
		client.Close()
		m.rt.Kill(vm)
		m.releaseNetwork(sb)
		return fail(err)
	}
	m.watch(sb, vm)
	timing.Mark(ctx, StepBookkeeping)
	m.steps.Observe(op, timing.From(ctx))
	if m.log.Enabled(ctx, slog.LevelDebug) {
		m.log.Debug("sandbox restored", append([]any{"op", op, "sandbox", id, "snapshot", rec.SnapshotID, "template", rec.Template},
			timing.From(ctx).LogArgs()...)...)
	}
	return sb.info(), nil
}

// watch marks the sandbox `error` with the reason when its VMM ends without being killed.
func (m *Manager) watch(sb *sandbox, vm *runtime.VM) {
	exited := m.rt.Watch(vm)
	go func() {
		ex := <-exited
		sb.mu.Lock()
		if sb.killed || sb.rec.VM.Pid != vm.Pid || sb.rec.State != StateRunning {
			sb.mu.Unlock() // ended on purpose, or an older VMM of a woken sandbox
			return
		}
		sb.rec.State = StateError
		sb.rec.Error = ex.Reason
		sb.persist()
		c := sb.client
		sb.client = nil
		sb.mu.Unlock()
		if c != nil {
			c.Close()
		}
		m.releaseNetwork(sb)
		m.log.Warn("sandbox VMM ended", "sandbox", sb.rec.ID, "reason", ex.Reason)
	}()
}
