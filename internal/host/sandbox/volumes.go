package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Attachments lists the sandboxes that use volume id (volume.Store.Attached).
func (m *Manager) Attachments(id string) []hostapi.VolumeAttachment {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attachmentsLocked(id, "")
}

func (m *Manager) attachmentsLocked(id, except string) []hostapi.VolumeAttachment {
	out := []hostapi.VolumeAttachment{}
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		// A sandbox holds its volumes until it is gone from the map: a kill still flushing, a
		// hibernated or failed sandbox all count.
		if sb.rec.ID != except {
			for _, m := range sb.rec.Volumes {
				if m.VolumeID == id {
					out = append(out, hostapi.VolumeAttachment{SandboxID: sb.rec.ID, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
				}
			}
		}
		sb.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SandboxID < out[j].SandboxID })
	return out
}

// checkAttachLocked checks sandbox id's mounts against the other sandboxes' (m.mu held).
func (m *Manager) checkAttachLocked(id string, ms []hostapi.VolumeMount) error {
	return volume.CheckAttach(ms, func(vol string) []hostapi.VolumeAttachment { return m.attachmentsLocked(vol, id) })
}

// drives returns the extra disks of rec's machine (volume.Store.Drives).
func (m *Manager) drives(rec *record, sandboxDir string) ([]runtime.Drive, error) {
	return m.volumes.Drives(rec.TemplateDir, rec.VolumeSlots, rec.Volumes, sandboxDir)
}

// copyVolumes reflinks the files of mounts (a paused VM's, in slot order) into a snapshot's
// directory dir and describes the copies.
func (m *Manager) copyVolumes(mounts []hostapi.VolumeMount, dir string) ([]hostapi.SnapshotVolume, error) {
	var out []hostapi.SnapshotVolume
	for i, vm := range mounts {
		dst := filepath.Join(dir, volume.CopyFile(i))
		if err := storage.Clone(m.volumes.File(vm.VolumeID), dst); err != nil {
			return nil, fmt.Errorf("volume %s: %w", vm.VolumeID, err)
		}
		st, err := os.Stat(dst)
		if err != nil {
			return nil, err
		}
		out = append(out, hostapi.SnapshotVolume{Slot: i, VolumeID: vm.VolumeID, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly,
			SizeMiB: st.Size() >> 20, FS: "ext4"})
	}
	return out, nil
}

// volumesFrom makes a new volume from each of a snapshot's volume copies (in dir) and returns
// their mounts, in the copies' slots; undo deletes them again (once no sandbox holds them).
func (m *Manager) volumesFrom(copies []hostapi.SnapshotVolume, dir string) (mounts []hostapi.VolumeMount, undo func(), err error) {
	undo = func() {
		for _, vm := range mounts {
			if err := m.volumes.Delete(vm.VolumeID); err != nil {
				m.log.Warn("could not delete a volume made for a sandbox that failed", "volume", vm.VolumeID, "err", err)
			}
		}
	}
	for i, c := range copies {
		if c.Slot != i {
			undo()
			return nil, func() {}, fmt.Errorf("snapshot volume copies out of slot order: %d at %d", c.Slot, i)
		}
		id := layout.NewID("vol_")
		if _, err := m.volumes.CreateFrom(id, filepath.Join(dir, volume.CopyFile(c.Slot)), c.SizeMiB); err != nil {
			undo()
			return nil, func() {}, fmt.Errorf("volume copy of %s: %w", c.VolumeID, err)
		}
		mounts = append(mounts, hostapi.VolumeMount{VolumeID: id, MountPath: c.MountPath, ReadOnly: c.ReadOnly})
	}
	return mounts, undo, nil
}
