package agenttest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// volume is a fake volume: its files are copied into a sandbox's files under the mount path at
// create, and back out of a read-write mount when the sandbox is killed (the real agent flushes
// the guest's writes before its VMM goes).
type volume struct {
	agentclient.Volume
	files map[string][]byte // relative to the mount point ("/x" is MOUNT/x)
}

// MaxVolumeMiB is the largest volume the fake agent makes (the real agent's default maximum).
const MaxVolumeMiB = 1 << 20

// systemDirs may not be mount points, nor hold one (the real agent's list).
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var"}

// poolFree is what the pool still admits, in MiB.
func (a *Agent) poolFree() int64 {
	free := a.poolTotal
	for _, v := range a.volumes {
		free -= v.SizeMiB
	}
	return free
}

func (a *Agent) noSpace(what string, need int64) *agentclient.Error {
	if free := a.poolFree(); need > free {
		return apiErr(507, "no_space", "%s needs %d MiB of the host's disk pool but only %d MiB are available", what, need, max(free, 0))
	}
	return nil
}

func validSize(sizeMiB int64) *agentclient.Error {
	if sizeMiB < 1 || sizeMiB > MaxVolumeMiB {
		return invalid("size_mib must be 1-%d, got %d", MaxVolumeMiB, sizeMiB)
	}
	return nil
}

// volume returns the volume id with its attachments.
func (a *Agent) volume(id string) (*volume, agentclient.Volume, *agentclient.Error) {
	v, ok := a.volumes[id]
	if !ok {
		return nil, agentclient.Volume{}, notFound("volume %s not found", id)
	}
	view := v.Volume
	view.Attachments = a.attachments(id)
	return v, view, nil
}

// attachments lists the sandboxes (in any state) that have the volume mounted, by sandbox id.
func (a *Agent) attachments(volumeID string) []agentclient.VolumeAttachment {
	out := []agentclient.VolumeAttachment{}
	for _, sb := range a.sandboxes {
		for _, m := range sb.mounts {
			if m.VolumeID == volumeID {
				out = append(out, agentclient.VolumeAttachment{SandboxID: sb.ID, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
			}
		}
	}
	slices.SortFunc(out, func(x, y agentclient.VolumeAttachment) int { return strings.Compare(x.SandboxID, y.SandboxID) })
	return out
}

// detached refuses a change to an attached volume.
func detached(v agentclient.Volume, change string) *agentclient.Error {
	if len(v.Attachments) > 0 {
		return conflict("volume %s is attached to sandbox %s; %s", v.ID, v.Attachments[0].SandboxID, change)
	}
	return nil
}

func (a *Agent) createVolume(r *http.Request) (any, *agentclient.Error) {
	var req agentclient.CreateVolumeRequest
	err := decode(r, &req)
	switch {
	case err != nil:
	case !volumeIDRE.MatchString(req.ID):
		err = invalid("volume id %q: use vol_ followed by 1-60 lowercase letters or digits", req.ID)
	case validSize(req.SizeMiB) != nil:
		err = validSize(req.SizeMiB)
	case a.volumes[req.ID] != nil:
		err = conflict("volume %s already exists", req.ID)
	default:
		err = a.noSpace(fmt.Sprintf("volume %s (%d MiB)", req.ID, req.SizeMiB), req.SizeMiB)
	}
	if err != nil {
		return nil, err
	}
	a.volumes[req.ID] = &volume{Volume: agentclient.Volume{ID: req.ID, SizeMiB: req.SizeMiB, CreatedAt: time.Now().UTC()}, files: map[string][]byte{}}
	_, view, _ := a.volume(req.ID)
	return created{view}, nil
}

func (a *Agent) listVolumes(*http.Request) (any, *agentclient.Error) {
	out := []agentclient.Volume{}
	for id := range a.volumes {
		_, view, _ := a.volume(id)
		out = append(out, view)
	}
	slices.SortFunc(out, func(x, y agentclient.Volume) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return map[string]any{"volumes": out}, nil
}

func (a *Agent) getVolume(r *http.Request) (any, *agentclient.Error) {
	_, view, err := a.volume(r.PathValue("id"))
	return view, err
}

// resizeVolume grows a detached volume, checked in the real agent's order.
func (a *Agent) resizeVolume(r *http.Request) (any, *agentclient.Error) {
	var req agentclient.ResizeVolumeRequest
	err := decode(r, &req)
	if err == nil {
		err = validSize(req.SizeMiB)
	}
	if err != nil {
		return nil, err
	}
	v, view, err := a.volume(r.PathValue("id"))
	switch {
	case err != nil:
	case detached(view, "resize it while detached") != nil:
		err = detached(view, "resize it while detached")
	case req.SizeMiB < v.SizeMiB:
		err = invalid("volumes only grow: %s is %d MiB, asked for %d", v.ID, v.SizeMiB, req.SizeMiB)
	default:
		err = a.noSpace("growing volume "+v.ID, req.SizeMiB-v.SizeMiB)
	}
	if err != nil {
		return nil, err
	}
	v.SizeMiB, view.SizeMiB = req.SizeMiB, req.SizeMiB
	return view, nil
}

func (a *Agent) deleteVolume(r *http.Request) (any, *agentclient.Error) {
	_, view, err := a.volume(r.PathValue("id"))
	if err == nil {
		err = detached(view, "kill it first")
	}
	if err != nil {
		return nil, err
	}
	delete(a.volumes, view.ID)
	return nil, nil
}

// checkMounts checks a create's volumes like the real agent: shape, paths, existence. It
// returns them with clean mount paths.
func (a *Agent) checkMounts(ms []agentclient.VolumeMount) ([]agentclient.VolumeMount, *agentclient.Error) {
	if len(ms) > agentclient.MaxVolumesPerSandbox {
		return nil, invalid("at most %d volumes per sandbox, got %d", agentclient.MaxVolumesPerSandbox, len(ms))
	}
	var out []agentclient.VolumeMount
	for i, m := range ms {
		p, ok := absPath(m.MountPath)
		switch {
		case !ok || len(p) > 256 || strings.ContainsAny(p, "\x00\n"):
			return nil, invalid("volumes[%d].mount_path %q must be an absolute path of at most 256 bytes", i, m.MountPath)
		case p == "/":
			return nil, invalid("volumes[%d].mount_path may not be /", i)
		case slices.ContainsFunc(systemDirs, func(d string) bool { return within(p, d) }):
			return nil, invalid("volumes[%d].mount_path %q is a system directory; use e.g. /data or /work/data", i, p)
		case slices.ContainsFunc(out, func(o agentclient.VolumeMount) bool { return within(p, o.MountPath) || within(o.MountPath, p) }):
			return nil, invalid("volumes[%d].mount_path %q overlaps another", i, p)
		case slices.ContainsFunc(out, func(o agentclient.VolumeMount) bool { return o.VolumeID == m.VolumeID }):
			return nil, invalid("volume %s is listed twice", m.VolumeID)
		case a.volumes[m.VolumeID] == nil:
			return nil, notFound("volume %s not found", m.VolumeID)
		}
		out = append(out, agentclient.VolumeMount{VolumeID: m.VolumeID, MountPath: p, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// checkAttach enforces one read-write user per volume, or any number of read-only ones.
func (a *Agent) checkAttach(ms []agentclient.VolumeMount) *agentclient.Error {
	for _, m := range ms {
		for _, at := range a.attachments(m.VolumeID) {
			if !m.ReadOnly || !at.ReadOnly {
				return conflict("volume %s is attached to sandbox %s; a volume has one read-write user, or only read-only ones", m.VolumeID, at.SandboxID)
			}
		}
	}
	return nil
}

// mount copies the files of the volumes of mounts (some of sb's) into sb's guest.
func (a *Agent) mount(sb *sandbox, mounts []agentclient.VolumeMount) {
	for _, m := range mounts {
		sb.fs.mkdirs(m.MountPath)
		for rel, b := range a.volumes[m.VolumeID].files {
			sb.fs.write(m.MountPath+rel, b)
		}
	}
}

// flushVolumes copies what a going sandbox has under its read-write mounts back into the volumes.
func (a *Agent) flushVolumes(sb *sandbox) {
	for _, m := range sb.mounts {
		v, ok := a.volumes[m.VolumeID]
		if !ok || m.ReadOnly {
			continue
		}
		v.files = filesUnder(sb.fs, m.MountPath)
	}
}

// filesUnder are the files fs has under mount, by their path relative to it.
func filesUnder(fs memFS, mount string) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range fs.under(mount) {
		if fs.isFile(p) {
			out[strings.TrimPrefix(p, mount)] = fs[p].data
		}
	}
	return out
}

// snapshotVolumes describes sb's volumes as a snapshot's copies of them: their bytes are what its
// guest sees under each mount path (copied with the guest's files), as on the real agent.
func (a *Agent) snapshotVolumes(sb *sandbox) []agentclient.SnapshotVolume {
	var out []agentclient.SnapshotVolume
	for i, m := range sb.mounts {
		out = append(out, agentclient.SnapshotVolume{Slot: i, VolumeID: m.VolumeID, MountPath: m.MountPath, ReadOnly: m.ReadOnly,
			SizeMiB: a.volumes[m.VolumeID].SizeMiB, FS: "ext4"})
	}
	return out
}

// volumesFrom makes n new volumes from each copy, with the files g has under the copy's mount
// path, and returns their mounts (n groups in copy order); a pool without room for all makes none.
func (a *Agent) volumesFrom(copies []agentclient.SnapshotVolume, g guest, n int) ([]agentclient.VolumeMount, *agentclient.Error) {
	var need int64
	for _, c := range copies {
		need += c.SizeMiB * int64(n)
	}
	if err := a.noSpace(fmt.Sprintf("%d volume copies", len(copies)*n), need); err != nil {
		return nil, err
	}
	var out []agentclient.VolumeMount
	for range n {
		for _, c := range copies {
			v := &volume{Volume: agentclient.Volume{ID: a.newID("vol_fake"), SizeMiB: c.SizeMiB, CreatedAt: time.Now().UTC()},
				files: filesUnder(g.fs, c.MountPath)}
			a.volumes[v.ID] = v
			out = append(out, agentclient.VolumeMount{VolumeID: v.ID, MountPath: c.MountPath, ReadOnly: c.ReadOnly})
		}
	}
	return out, nil
}
