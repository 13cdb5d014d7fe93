package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// A hibernated sandbox leaves its host through the blob store: a host with a store publishes each
// hibernation (memory, device state, disk, a copy of each volume it mounts and the template's boot
// files, as hibernated/<id>-<generation>), and a host asked to adopt it (CreateRequest.Hibernated)
// pulls that into the sandbox's own directory, makes its volumes there from the copies (same ids,
// same slots) and wakes it there, same id, files and processes intact. The
// control plane asks for that when the sandbox's host is lost; the publication is stale once the
// sandbox runs again, which is why the record forgets it on every wake.

// hibernatedKind is the artifact kind of published hibernations.
const hibernatedKind = "hibernated"

// publishHibernated publishes sb's hibernation (its caller holds sb.op: the VM is gone, its volumes
// are still), if this host has a blob store and sb has no read-only volume (its guest's overlay of
// it is this host's). A failure is logged: the sandbox stays hibernated here.
func (m *Manager) publishHibernated(ctx context.Context, sb *sandbox) {
	bs := m.Templates.Blob()
	sb.mu.Lock()
	rec := sb.rec
	sb.mu.Unlock()
	if bs == nil || volume.CheckCopyable(rec.ID, rec.Volumes) != nil || rec.State != StateHibernated {
		return
	}
	start := time.Now()
	name := rec.ID + "-" + strconv.Itoa(rec.MemGen)
	mem := filepath.Base(rec.BaseDir)
	err := snapshot.CloneBootFiles(rec.TemplateDir, rec.BaseDir)
	var st artifact.Stats
	if err == nil {
		files := []string{"disk.img"}
		for _, f := range snapshot.Present(rec.BaseDir, append([]string{"ram", "state", snapshot.WorkingSetFile}, snapshot.BootFiles...)) {
			files = append(files, path.Join(mem, f))
		}
		// Each volume as the sandbox left it, reflinked beside the memory for the push and
		// removed after it (a copy would pin the blocks the woken sandbox rewrites).
		for i, vm := range rec.Volumes {
			cp := filepath.Join(rec.BaseDir, volume.CopyFile(i))
			defer os.Remove(cp)
			if err = storage.Clone(m.volumes.File(vm.VolumeID), cp); err != nil {
				break
			}
			files = append(files, path.Join(mem, volume.CopyFile(i)))
		}
		if err == nil {
			_, st, err = m.Templates.Local().Push(ctx, bs, hibernatedKind, name, sb.dir, files, rec)
		}
	}
	if err != nil {
		m.log.Warn("publishing a hibernated sandbox failed: it wakes on this host only", "sandbox", rec.ID, "store", bs.String(), "err", err)
		return
	}
	sb.mu.Lock()
	if sb.rec.State == StateHibernated && sb.rec.MemGen == rec.MemGen {
		sb.rec.Published = name
		err = sb.persist()
	}
	sb.mu.Unlock()
	m.log.Info("published hibernated sandbox", "sandbox", rec.ID, "publication", name, "ms", time.Since(start).Milliseconds(), "sent_mib", st.Bytes>>20,
		"chunks", st.Chunks, "named_unread", st.Known)
}

// adoptHibernated makes sandbox id, hibernated on another host and published as pub, this host's
// and wakes it. Nothing is kept unless the pull is whole.
func (m *Manager) adoptHibernated(ctx context.Context, id, pub string) (hostapi.Sandbox, error) {
	bs := m.Templates.Blob()
	switch {
	case bs == nil:
		return hostapi.Sandbox{}, errdefs.Conflictf("this host has no blob store to adopt sandbox %s from", id)
	case !idRE.MatchString(id) || !strings.HasPrefix(pub, id+"-"):
		return hostapi.Sandbox{}, errdefs.Invalidf("hibernated %q does not name a publication of sandbox %q", pub, id)
	}
	if _, err := m.get(id); err == nil {
		return hostapi.Sandbox{}, errdefs.Conflictf("sandbox %s already exists on this host", id)
	}
	man, err := artifact.Get(ctx, bs, hibernatedKind, pub)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	var rec record
	if err := json.Unmarshal(man.Record, &rec); err != nil || rec.ID != id || !strings.HasPrefix(filepath.Base(rec.BaseDir), "mem-") {
		return hostapi.Sandbox{}, errdefs.Invalidf("published hibernation %s: its record is not valid", pub)
	}
	copies := make([]string, len(rec.Volumes)) // as publishHibernated names them
	for i := range copies {
		copies[i] = path.Join(filepath.Base(rec.BaseDir), volume.CopyFile(i))
	}
	if err := man.Carries(copies); err != nil {
		return hostapi.Sandbox{}, err
	}
	if err := m.checkIdentity("hibernated sandbox "+id, rec.Identity); err != nil {
		return hostapi.Sandbox{}, err
	}
	start := time.Now()
	dir := filepath.Join(m.layout.Sandboxes(), id)
	tmp := dir + ".pulling"
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	// With lazy restore the memory is served from the store while the sandbox already runs.
	var mount string
	var st artifact.Stats
	if lz := m.snapshots.Lazy; lz != nil {
		mount, st, err = lz.Pull(ctx, m.Templates.Local(), bs, man, tmp)
	} else {
		st, err = m.Templates.Local().PullManifest(ctx, bs, man, tmp)
	}
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	// Its volumes, made on this host from the copies under the ids it mounts them by.
	made, err := m.adoptVolumes(rec.Volumes, tmp, copies)
	if err != nil {
		if mount != "" {
			snapshot.FreeMount(mount)
		}
		return hostapi.Sandbox{}, err
	}
	mem := filepath.Join(dir, filepath.Base(rec.BaseDir))
	rec.BaseDir, rec.TemplateDir, rec.VM, rec.LazyMount = mem, mem, runtime.VM{}, mount
	rec.State, rec.Error, rec.Published, rec.Netns, rec.GuestAddr = StateHibernated, "", pub, "", ""
	sb := &sandbox{dir: dir, rec: rec, lastUsed: start}
	m.mu.Lock()
	if _, dup := m.sandboxes[id]; dup || m.closed {
		m.mu.Unlock()
		m.dropVolumes(made)
		return hostapi.Sandbox{}, errdefs.Conflictf("sandbox %s already exists on this host", id)
	}
	// The record is written after the move: a directory without one is never adopted at start.
	err = os.Rename(tmp, dir)
	if err == nil {
		m.Templates.Local().AddDir(dir) // the index named the files under tmp
		err = sb.persist()
	}
	if err != nil {
		m.mu.Unlock()
		m.freeLazyMem(sb)
		os.RemoveAll(dir)
		m.dropVolumes(made)
		return hostapi.Sandbox{}, err
	}
	m.sandboxes[id] = sb
	m.mu.Unlock()
	m.log.Info("adopted hibernated sandbox", "sandbox", id, "publication", pub, "ms", time.Since(start).Milliseconds(), "fetched_mib", st.Bytes>>20,
		"local_mib", st.LocalBytes>>20, "lazy", mount != "")
	if mount == "" {
		m.warmPulled("hibernated sandbox "+id, mem)
	}
	woke, err := m.awake(ctx, id)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	return woke.info(), nil
}

// freeLazyMem ends the lazy serving of the memory sb was adopted with; its VMM must be gone. A
// mount that cannot be freed now is left to the agent's next start (reclaim).
func (m *Manager) freeLazyMem(sb *sandbox) {
	sb.mu.Lock()
	mount := sb.rec.LazyMount
	sb.mu.Unlock()
	if mount == "" {
		return
	}
	if err := snapshot.FreeMount(mount); err != nil {
		m.log.Warn("could not end the lazy serving of a sandbox's memory", "sandbox", sb.rec.ID, "mount", mount, "err", err)
		return
	}
	sb.mu.Lock()
	sb.rec.LazyMount = ""
	sb.persist()
	sb.mu.Unlock()
}

// adoptVolumes makes this host's volumes of an adopted sandbox from the copies its hibernation
// carried (files, under dir, in mount order), each under the id the sandbox mounts it by, and
// removes the copies; it returns the ids made. None is left made on an error.
func (m *Manager) adoptVolumes(mounts []hostapi.VolumeMount, dir string, files []string) ([]string, error) {
	var made []string
	for i, vm := range mounts {
		src := filepath.Join(dir, filepath.FromSlash(files[i]))
		fi, err := os.Stat(src)
		if err == nil {
			_, err = m.volumes.CreateFrom(vm.VolumeID, src, fi.Size()>>20)
		}
		if err != nil {
			m.dropVolumes(made)
			return nil, fmt.Errorf("volume %s of the hibernation: %w", vm.VolumeID, err)
		}
		made = append(made, vm.VolumeID)
		os.Remove(src)
	}
	return made, nil
}

// dropVolumes deletes volumes adoptVolumes made for a sandbox that was not adopted after all.
func (m *Manager) dropVolumes(ids []string) {
	for _, id := range ids {
		if err := m.volumes.Delete(id); err != nil {
			m.log.Warn("could not delete a volume made for a sandbox that was not adopted", "volume", id, "err", err)
		}
	}
}
