package hostagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Volumes: persistent ext4 images in the pool, attached to sandboxes through spare virtio-blk
// slots that every template is baked with (docs/volumes.md).
const (
	// VolumeSlots is how many volumes one sandbox can mount (spare drives baked into templates).
	VolumeSlots = 4
	// MaxVolumeMiB bounds one volume (1 TiB; the file is sparse).
	MaxVolumeMiB = 1 << 20
	// placeholderMiB is the size of the empty disk behind an unused slot.
	placeholderMiB = 1
)

var volIDRE = regexp.MustCompile(`^vol_[a-z0-9]{1,60}$`)

// systemDirs may not be mount points (nor hold one): mounting over them breaks the guest.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var"}

func (a *Agent) volumesDir() string          { return filepath.Join(a.pool.Dir, "volumes") }
func (a *Agent) volumeFile(id string) string { return filepath.Join(a.volumesDir(), id+".ext4") }
func (a *Agent) volumeMeta(id string) string { return filepath.Join(a.volumesDir(), id+".json") }

func validSize(sizeMiB int64) error {
	if sizeMiB < 1 || sizeMiB > MaxVolumeMiB {
		return errdefs.Invalidf("size_mib must be 1-%d, got %d", MaxVolumeMiB, sizeMiB)
	}
	return nil
}

// CreateVolume makes an empty ext4 volume, its root owned by the guest's default user.
func (a *Agent) CreateVolume(ctx context.Context, id string, sizeMiB int64) (hostapi.Volume, error) {
	if !volIDRE.MatchString(id) {
		return hostapi.Volume{}, errdefs.Invalidf("volume id %q: use vol_ followed by 1-60 lowercase letters or digits", id)
	}
	if err := validSize(sizeMiB); err != nil {
		return hostapi.Volume{}, err
	}
	a.volMu.Lock()
	defer a.volMu.Unlock()
	if _, err := os.Stat(a.volumeMeta(id)); err == nil {
		return hostapi.Volume{}, errdefs.Conflictf("volume %s already exists", id)
	}
	if err := os.MkdirAll(a.volumesDir(), 0o700); err != nil {
		return hostapi.Volume{}, err
	}
	// What mkfs writes now, or the volume's promise if larger (it is then part of the promise).
	release, err := a.admit(fmt.Sprintf("volume %s (%d MiB)", id, sizeMiB), max(a.volumePromise(sizeMiB<<20), mkfsCost(sizeMiB<<20)))
	if err != nil {
		return hostapi.Volume{}, err
	}
	defer release()
	tmp := a.volumeFile(id) + ".tmp"
	defer os.Remove(tmp)
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return hostapi.Volume{}, err
	}
	if err := os.Truncate(tmp, sizeMiB<<20); err != nil {
		return hostapi.Volume{}, volumeErr(err)
	}
	// mkfs of a file we just made: no guest data is parsed on the host.
	out, err := runCmd(ctx, "mkfs.ext4", "-q", "-F", "-L", "volume", "-E", "root_owner=1000:1000,lazy_itable_init=0,lazy_journal_init=0", "-m", "0", tmp)
	if err != nil {
		return hostapi.Volume{}, volumeErr(fmt.Errorf("mkfs.ext4: %v: %s", err, out))
	}
	if err := os.Rename(tmp, a.volumeFile(id)); err != nil {
		return hostapi.Volume{}, err
	}
	v := hostapi.Volume{ID: id, SizeMiB: sizeMiB, CreatedAt: time.Now().UTC()}
	if err := writeJSONFile(a.volumeMeta(id), v); err != nil {
		os.Remove(a.volumeFile(id))
		return hostapi.Volume{}, err
	}
	v.Attachments = []hostapi.VolumeAttachment{}
	return v, nil
}

// runCmd runs a host tool and returns its combined output.
func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// volumeErr names a full host disk as such (a failed truncate, or mkfs saying so in its output).
func volumeErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "No space left") {
		return errdefs.New(errdefs.NoSpace, "the host's disk is full")
	}
	return err
}

// GetVolume returns one volume with its attachments.
func (a *Agent) GetVolume(id string) (hostapi.Volume, error) {
	var v hostapi.Volume
	if !volIDRE.MatchString(id) || readJSONFile(a.volumeMeta(id), &v) != nil {
		return hostapi.Volume{}, errdefs.NotFoundf("volume %s not found", id)
	}
	v.Attachments = a.attachments(id)
	return v, nil
}

// Volumes lists this host's volumes, oldest first.
func (a *Agent) Volumes() []hostapi.Volume {
	files, _ := filepath.Glob(filepath.Join(a.volumesDir(), "vol_*.json"))
	out := []hostapi.Volume{}
	for _, f := range files {
		if v, err := a.GetVolume(strings.TrimSuffix(filepath.Base(f), ".json")); err == nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// ResizeVolume grows a detached volume's file; the filesystem grows inside the guest at its next
// read-write mount (resize2fs there, so the host never parses guest-written metadata).
func (a *Agent) ResizeVolume(id string, sizeMiB int64) (hostapi.Volume, error) {
	if err := validSize(sizeMiB); err != nil {
		return hostapi.Volume{}, err
	}
	a.volMu.Lock()
	defer a.volMu.Unlock()
	v, err := a.GetVolume(id)
	if err != nil {
		return hostapi.Volume{}, err
	}
	if len(v.Attachments) > 0 {
		return hostapi.Volume{}, errdefs.Conflictf("volume %s is attached to sandbox %s; resize it while detached", id, v.Attachments[0].SandboxID)
	}
	if sizeMiB < v.SizeMiB {
		return hostapi.Volume{}, errdefs.Invalidf("volumes only grow: %s is %d MiB, asked for %d", id, v.SizeMiB, sizeMiB)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(a.volumeFile(id), &st); err != nil {
		return hostapi.Volume{}, err
	}
	// The volume holds max(written, promise) already; growing it raises its promise.
	written := st.Blocks * 512
	grow := max(written, a.volumePromise(sizeMiB<<20)) - max(written, a.volumePromise(v.SizeMiB<<20))
	release, err := a.admit(fmt.Sprintf("growing volume %s from %d to %d MiB", id, v.SizeMiB, sizeMiB), grow)
	if err != nil {
		return hostapi.Volume{}, err
	}
	defer release()
	if err := os.Truncate(a.volumeFile(id), sizeMiB<<20); err != nil {
		return hostapi.Volume{}, volumeErr(err)
	}
	v.SizeMiB = sizeMiB
	v.GrowPending = true
	meta := v
	meta.Attachments = nil
	if err := writeJSONFile(a.volumeMeta(id), meta); err != nil {
		return hostapi.Volume{}, err
	}
	return v, nil
}

// DeleteVolume removes a detached volume and its data.
func (a *Agent) DeleteVolume(id string) error {
	a.volMu.Lock()
	defer a.volMu.Unlock()
	v, err := a.GetVolume(id)
	if err != nil {
		return err
	}
	if len(v.Attachments) > 0 {
		return errdefs.Conflictf("volume %s is attached to sandbox %s; kill it first", id, v.Attachments[0].SandboxID)
	}
	if err := os.Remove(a.volumeFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(a.volumeMeta(id))
}

// attachments lists the sandboxes that use volume id.
func (a *Agent) attachments(id string) []hostapi.VolumeAttachment {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attachmentsLocked(id, "")
}

func (a *Agent) attachmentsLocked(id, except string) []hostapi.VolumeAttachment {
	out := []hostapi.VolumeAttachment{}
	for _, sb := range a.sandboxes {
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

// validateMounts checks a create's volumes: shape, paths, existence. Conflicts with other
// sandboxes are checked when the sandbox is registered (checkAttachLocked).
func (a *Agent) validateMounts(ms []VolumeMount, slots int) ([]VolumeMount, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if slots == 0 {
		return nil, errdefs.Conflictf("this template was baked without volume slots; re-bake it to mount volumes")
	}
	if len(ms) > slots {
		return nil, errdefs.Invalidf("at most %d volumes per sandbox, got %d", slots, len(ms))
	}
	seenPath, seenVol := map[string]bool{}, map[string]bool{}
	out := make([]VolumeMount, len(ms))
	for i, m := range ms {
		p := m.MountPath
		switch {
		case p == "" || !strings.HasPrefix(p, "/"):
			return nil, errdefs.Invalidf("volumes[%d].mount_path %q must be an absolute path", i, p)
		case len(p) > 256:
			return nil, errdefs.Invalidf("volumes[%d].mount_path is longer than 256 bytes", i)
		case strings.ContainsAny(p, "\x00\n"):
			return nil, errdefs.Invalidf("volumes[%d].mount_path contains a NUL or newline", i)
		}
		p = path.Clean(p)
		if p == "/" {
			return nil, errdefs.Invalidf("volumes[%d].mount_path may not be /", i)
		}
		for _, d := range systemDirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				return nil, errdefs.Invalidf("volumes[%d].mount_path %q is a system directory (%s); use e.g. /data or /work/data", i, p, d)
			}
		}
		for q := range seenPath {
			if q == p || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
				return nil, errdefs.Invalidf("volumes[%d].mount_path %q overlaps %q", i, p, q)
			}
		}
		if seenVol[m.VolumeID] {
			return nil, errdefs.Invalidf("volume %s is listed twice", m.VolumeID)
		}
		if _, err := a.GetVolume(m.VolumeID); err != nil {
			return nil, err
		}
		seenPath[p], seenVol[m.VolumeID] = true, true
		out[i] = VolumeMount{VolumeID: m.VolumeID, MountPath: p, ReadOnly: m.ReadOnly}
	}
	return out, nil
}

// checkAttachLocked enforces one read-write user per volume, or any number of read-only ones
// (a.mu held, so two creates cannot both take a volume).
func (a *Agent) checkAttachLocked(id string, ms []VolumeMount) error {
	for _, m := range ms {
		for _, at := range a.attachmentsLocked(m.VolumeID, id) {
			if !m.ReadOnly || !at.ReadOnly {
				mode := "read-write"
				if at.ReadOnly {
					mode = "read-only"
				}
				return errdefs.Conflictf("volume %s is attached %s to sandbox %s; a volume has one read-write user, or only read-only ones",
					m.VolumeID, mode, at.SandboxID)
			}
		}
	}
	return nil
}

// drives returns the extra disks of rec's machine: a volume file per mount, a private empty
// placeholder (reflinked) in every other slot. Slots are part of the snapshot; only the files
// behind them change.
func (a *Agent) drives(rec *record, sandboxDir string) ([]runtime.Drive, error) {
	if rec.VolumeSlots == 0 {
		return nil, nil
	}
	ds := make([]runtime.Drive, rec.VolumeSlots)
	for i := range ds {
		ds[i].Serial = "pvol" + strconv.Itoa(i)
		if i < len(rec.Volumes) {
			ds[i].File, ds[i].ReadOnly = a.volumeFile(rec.Volumes[i].VolumeID), rec.Volumes[i].ReadOnly
			continue
		}
		ds[i].File = filepath.Join(sandboxDir, "slot"+strconv.Itoa(i)+".img")
		if _, err := os.Stat(ds[i].File); err != nil {
			if err := storage.Clone(filepath.Join(rec.TemplateDir, "placeholder.img"), ds[i].File); err != nil {
				return nil, err
			}
		}
	}
	return ds, nil
}

// mountVolumes attaches rec's volumes in a freshly restored guest: the drives already point at
// the volume files; the guest learns their size, then mounts them (and grows a resized one).
func (a *Agent) mountVolumes(ctx context.Context, rec *record, vm *runtime.VM, c *guest.Client) error {
	for i, m := range rec.Volumes {
		serial := "pvol" + strconv.Itoa(i)
		if err := a.rt.RefreshDrive(ctx, vm, serial); err != nil {
			return fmt.Errorf("volume %s: %w", m.VolumeID, err)
		}
		st, err := os.Stat(a.volumeFile(m.VolumeID))
		if err != nil {
			return fmt.Errorf("volume %s: %w", m.VolumeID, err)
		}
		var meta hostapi.Volume
		readJSONFile(a.volumeMeta(m.VolumeID), &meta)
		grow := meta.GrowPending && !m.ReadOnly
		if err := c.Mount(ctx, serial, m.MountPath, st.Size(), m.ReadOnly, grow); err != nil {
			return fmt.Errorf("volume %s: mount at %s: %w", m.VolumeID, m.MountPath, err)
		}
		if grow {
			a.volMu.Lock()
			meta.GrowPending = false
			writeJSONFile(a.volumeMeta(m.VolumeID), meta)
			a.volMu.Unlock()
		}
	}
	return nil
}

// makePlaceholder writes the empty disk unused volume slots are backed by.
func makePlaceholder(dir string) error {
	p := filepath.Join(dir, "placeholder.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	return os.Truncate(p, placeholderMiB<<20)
}
