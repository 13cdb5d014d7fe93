package sandbox

import (
	"sort"

	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/runtime"
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
