// Package volume keeps a host's volumes: persistent ext4 images in the disk pool, attached to
// sandboxes through spare virtio-blk slots that every template is baked with (docs/volumes.md).
//
// A volume is a file <id>.ext4 and its record <id>.json under layout.Volumes(). Which sandboxes
// use it is not recorded here: the sandbox manager knows (Store.Attached), and a volume is
// attached until the sandbox using it is killed. The host never parses what a guest wrote: mkfs
// runs on a file it just made, and a grown filesystem is resized inside the guest.
package volume

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
	"sync"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/disk"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

const (
	// Slots is how many volumes one sandbox can mount (spare drives baked into templates).
	Slots = hostapi.MaxVolumesPerSandbox
	// MaxMiB bounds one volume (1 TiB; the file is sparse).
	MaxMiB = 1 << 20
	// PlaceholderName is the empty disk in a template's directory that unused slots clone.
	PlaceholderName = "placeholder.img"
	// placeholderMiB is the size of the empty disk behind an unused slot.
	placeholderMiB = 1
)

var idRE = regexp.MustCompile(`^vol_[a-z0-9]{1,60}$`)

// systemDirs may not be mount points (nor hold one): mounting over them breaks the guest.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var"}

// Store is one host's volumes.
type Store struct {
	dir        string
	disk       *disk.Admission
	overcommit float64
	mu         sync.Mutex // serialises create, resize and delete, and record rewrites
	// Attached lists the sandboxes that use a volume, by sandbox id (set before use).
	Attached func(id string) []hostapi.VolumeAttachment
}

// New opens the volumes of layout l. A volume is promised 1/overcommit of its size in real
// pool space (overcommit >= 1).
func New(l layout.Layout, adm *disk.Admission, overcommit float64) *Store {
	return &Store{dir: l.Volumes(), disk: adm, overcommit: overcommit,
		Attached: func(string) []hostapi.VolumeAttachment { return []hostapi.VolumeAttachment{} }}
}

// Dir holds the volume files.
func (s *Store) Dir() string { return s.dir }

// File is the volume's ext4 image.
func (s *Store) File(id string) string { return filepath.Join(s.dir, id+".ext4") }
func (s *Store) meta(id string) string { return filepath.Join(s.dir, id+".json") }

func validSize(sizeMiB int64) error {
	if sizeMiB < 1 || sizeMiB > MaxMiB {
		return errdefs.Invalidf("size_mib must be 1-%d, got %d", MaxMiB, sizeMiB)
	}
	return nil
}

// Create makes an empty ext4 volume, its root owned by the guest's default user.
func (s *Store) Create(ctx context.Context, id string, sizeMiB int64) (hostapi.Volume, error) {
	// What mkfs writes now, or the volume's promise if larger (it is then part of the promise).
	return s.make(id, sizeMiB, "", max(s.promise(sizeMiB<<20), MakeFSCost(sizeMiB<<20)), func(tmp string) error {
		return MakeFS(ctx, tmp, sizeMiB)
	})
}

// CopyFile names, in a snapshot's or template's directory, the image of the volume in slot
// (a snapshot's copy of an attached volume; a template's data volume is slot 0's): a sandbox made
// from either gets a new volume made from it, in that slot.
func CopyFile(slot int) string { return "vol" + strconv.Itoa(slot) + ".ext4" }

// CopyFiles names the files of the copies vols lists (CopyFile of each one's slot).
func CopyFiles(vols []hostapi.SnapshotVolume) []string {
	out := make([]string, len(vols))
	for i, v := range vols {
		out[i] = CopyFile(v.Slot)
	}
	return out
}

// MakeFS writes file: an empty ext4 image of sizeMiB, its root owned by the guest's default user
// (a volume, or a template's data volume before its bake writes to it).
func MakeFS(ctx context.Context, file string, sizeMiB int64) error {
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(file, sizeMiB<<20); err != nil {
		return diskErr(err)
	}
	// mkfs of a file we just made: no guest data is parsed on the host.
	out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "volume", "-E",
		"root_owner=1000:1000,lazy_itable_init=0,lazy_journal_init=0", "-m", "0", file).CombinedOutput()
	if err != nil {
		return diskErr(fmt.Errorf("mkfs.ext4: %v: %s", err, out))
	}
	return nil
}

// CreateFrom makes volume id from src, a copy of a volume's ext4 image of sizeMiB (a snapshot's
// volume copy): a reflink, so it costs no space until one of them writes, and its writes are its
// own. It is promised its size like a created volume.
func (s *Store) CreateFrom(id, src string, sizeMiB int64) (hostapi.Volume, error) {
	return s.make(id, sizeMiB, ", a copy", s.promise(sizeMiB<<20), func(tmp string) error {
		return diskErr(storage.Clone(src, tmp))
	})
}

// make makes volume id of sizeMiB: admits need bytes of the pool, has fill write its file at tmp,
// then moves it in place and writes its record; nothing half-made is left.
func (s *Store) make(id string, sizeMiB int64, what string, need int64, fill func(tmp string) error) (hostapi.Volume, error) {
	if !idRE.MatchString(id) {
		return hostapi.Volume{}, errdefs.Invalidf("volume id %q: use vol_ followed by 1-60 lowercase letters or digits", id)
	}
	if err := validSize(sizeMiB); err != nil {
		return hostapi.Volume{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Stat(s.meta(id)); err == nil {
		return hostapi.Volume{}, errdefs.Conflictf("volume %s already exists", id)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return hostapi.Volume{}, err
	}
	release, err := s.disk.Admit(fmt.Sprintf("volume %s (%d MiB%s)", id, sizeMiB, what), need)
	if err != nil {
		return hostapi.Volume{}, err
	}
	defer release()
	tmp := s.File(id) + ".tmp"
	defer os.Remove(tmp)
	if err := fill(tmp); err != nil {
		return hostapi.Volume{}, err
	}
	if err := os.Rename(tmp, s.File(id)); err != nil {
		return hostapi.Volume{}, err
	}
	v := hostapi.Volume{ID: id, SizeMiB: sizeMiB, CreatedAt: time.Now().UTC()}
	if err := layout.WriteJSON(s.meta(id), v); err != nil {
		os.Remove(s.File(id))
		return hostapi.Volume{}, err
	}
	v.Attachments = []hostapi.VolumeAttachment{}
	return v, nil
}

// diskErr names a full host disk as such (a failed truncate, or mkfs saying so in its output).
func diskErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "No space left") {
		return errdefs.New(errdefs.NoSpace, "the host's disk is full")
	}
	return err
}

// Get returns one volume with its attachments.
func (s *Store) Get(id string) (hostapi.Volume, error) {
	var v hostapi.Volume
	if !idRE.MatchString(id) || layout.ReadJSON(s.meta(id), &v) != nil {
		return hostapi.Volume{}, errdefs.NotFoundf("volume %s not found", id)
	}
	v.Attachments = s.Attached(id)
	return v, nil
}

// List returns this host's volumes, oldest first.
func (s *Store) List() []hostapi.Volume {
	files, _ := filepath.Glob(filepath.Join(s.dir, "vol_*.json"))
	out := []hostapi.Volume{}
	for _, f := range files {
		if v, err := s.Get(strings.TrimSuffix(filepath.Base(f), ".json")); err == nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Resize grows a detached volume's file; the filesystem grows inside the guest at its next
// read-write mount (resize2fs there, so the host never parses guest-written metadata).
func (s *Store) Resize(id string, sizeMiB int64) (hostapi.Volume, error) {
	if err := validSize(sizeMiB); err != nil {
		return hostapi.Volume{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.Get(id)
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
	if err := syscall.Stat(s.File(id), &st); err != nil {
		return hostapi.Volume{}, err
	}
	// The volume holds max(written, promise) already; growing it raises its promise.
	written := st.Blocks * 512
	grow := max(written, s.promise(sizeMiB<<20)) - max(written, s.promise(v.SizeMiB<<20))
	release, err := s.disk.Admit(fmt.Sprintf("growing volume %s from %d to %d MiB", id, v.SizeMiB, sizeMiB), grow)
	if err != nil {
		return hostapi.Volume{}, err
	}
	defer release()
	if err := os.Truncate(s.File(id), sizeMiB<<20); err != nil {
		return hostapi.Volume{}, diskErr(err)
	}
	v.SizeMiB = sizeMiB
	v.GrowPending = true
	meta := v
	meta.Attachments = nil
	if err := layout.WriteJSON(s.meta(id), meta); err != nil {
		return hostapi.Volume{}, err
	}
	return v, nil
}

// Delete removes a detached volume and its data.
func (s *Store) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.Get(id)
	if err != nil {
		return err
	}
	if len(v.Attachments) > 0 {
		return errdefs.Conflictf("volume %s is attached to sandbox %s; kill it first", id, v.Attachments[0].SandboxID)
	}
	if err := os.Remove(s.File(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(s.meta(id))
}

// promise is the part of a volume of size bytes that real pool space must back.
func (s *Store) promise(size int64) int64 {
	return int64(float64(size)/s.overcommit + 0.5)
}

// Promised sums what the volumes are promised but have not written yet (disk.Admission's).
func (s *Store) Promised() int64 {
	files, _ := filepath.Glob(filepath.Join(s.dir, "vol_*.json"))
	var sum int64
	for _, f := range files {
		var v hostapi.Volume
		var st syscall.Stat_t
		if layout.ReadJSON(f, &v) != nil || syscall.Stat(strings.TrimSuffix(f, ".json")+".ext4", &st) != nil {
			continue
		}
		sum += max(0, s.promise(v.SizeMiB<<20)-st.Blocks*512)
	}
	return sum
}

// MakeFSCost bounds what mkfs.ext4 (with its inode tables and journal initialised now) allocates
// in a volume of size bytes: the journal (size/32, at most 1 GiB) plus a little metadata. Measured
// (e2fsprogs 1.47 on the XFS pool): 64 MiB: 5 MiB, 1 GiB: 33, 16 GiB: 133, 256 GiB: 1031,
// 1 TiB: 1040.
func MakeFSCost(size int64) int64 {
	return min(size, min(size/32, 1<<30)+size/16384+8<<20)
}

// ValidateMounts checks a create's volumes: shape, paths, existence, against a machine with
// slots spare drives. Conflicts with other sandboxes are checked when the sandbox is registered
// (CheckAttach).
func (s *Store) ValidateMounts(ms []hostapi.VolumeMount, slots int) ([]hostapi.VolumeMount, error) {
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
	out := make([]hostapi.VolumeMount, len(ms))
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
		if _, err := s.Get(m.VolumeID); err != nil {
			return nil, err
		}
		seenPath[p], seenVol[m.VolumeID] = true, true
		out[i] = hostapi.VolumeMount{VolumeID: m.VolumeID, MountPath: p, ReadOnly: m.ReadOnly}
	}
	return out, nil
}

// CheckAttach enforces one read-write user per volume, or any number of read-only ones: ms are
// the mounts of a sandbox being registered, attached what the other sandboxes hold. The caller
// holds the lock that registers sandboxes, so two creates cannot both take a volume.
func CheckAttach(ms []hostapi.VolumeMount, attached func(volumeID string) []hostapi.VolumeAttachment) error {
	for _, m := range ms {
		for _, at := range attached(m.VolumeID) {
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

// Serial names a machine's volume slot i (the guest finds the drive by it).
func Serial(i int) string { return "pvol" + strconv.Itoa(i) }

// Drives returns the extra disks of a machine with slots spare drives: a volume file per mount, a
// private empty placeholder (reflinked from templateDir's, into dir) in every other slot. Slots
// are part of the snapshot; only the files behind them change.
func (s *Store) Drives(templateDir string, slots int, mounts []hostapi.VolumeMount, dir string) ([]runtime.Drive, error) {
	if slots == 0 {
		return nil, nil
	}
	ds := make([]runtime.Drive, slots)
	for i := range ds {
		ds[i].Serial = Serial(i)
		if i < len(mounts) {
			ds[i].File, ds[i].ReadOnly = s.File(mounts[i].VolumeID), mounts[i].ReadOnly
			continue
		}
		ds[i].File = filepath.Join(dir, "slot"+strconv.Itoa(i)+".img")
		if _, err := os.Stat(ds[i].File); err != nil {
			if err := storage.Clone(filepath.Join(templateDir, PlaceholderName), ds[i].File); err != nil {
				return nil, err
			}
		}
	}
	return ds, nil
}

// Mount attaches mounts (mounts[i] in slot i) from slot from on in a freshly restored guest: the
// drives already point at the volume files; the guest learns their size, then mounts them (and
// grows a resized one). The slots before from hold copies the restored guest has mounted already.
func (s *Store) Mount(ctx context.Context, rt runtime.Runtime, vm *runtime.VM, c *guest.Client, mounts []hostapi.VolumeMount, from int) error {
	for i, m := range mounts {
		if i < from {
			continue
		}
		if err := rt.RefreshDrive(ctx, vm, Serial(i)); err != nil {
			return fmt.Errorf("volume %s: %w", m.VolumeID, err)
		}
		st, err := os.Stat(s.File(m.VolumeID))
		if err != nil {
			return fmt.Errorf("volume %s: %w", m.VolumeID, err)
		}
		var meta hostapi.Volume
		layout.ReadJSON(s.meta(m.VolumeID), &meta)
		grow := meta.GrowPending && !m.ReadOnly
		if err := c.Mount(ctx, Serial(i), m.MountPath, st.Size(), m.ReadOnly, grow); err != nil {
			return fmt.Errorf("volume %s: mount at %s: %w", m.VolumeID, m.MountPath, err)
		}
		if grow {
			s.mu.Lock()
			meta.GrowPending = false
			layout.WriteJSON(s.meta(m.VolumeID), meta)
			s.mu.Unlock()
		}
	}
	return nil
}

// MakePlaceholder writes into dir the empty disk unused volume slots are backed by.
func MakePlaceholder(dir string) error {
	p := filepath.Join(dir, PlaceholderName)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	return os.Truncate(p, placeholderMiB<<20)
}

// CheckCopyable refuses a snapshot or fork of sandbox id with a read-only volume among mounts: the
// guest's view of one is a throw-away overlay (an ext4 journal replay at mount goes there), so a
// copy of the volume's file would not match the guest's memory.
func CheckCopyable(id string, mounts []hostapi.VolumeMount) error {
	for _, m := range mounts {
		if m.ReadOnly {
			return errdefs.Conflictf("sandbox %s has volume %s attached read-only at %s: snapshots and forks of it are refused (the guest reads a read-only volume through a throw-away overlay the host cannot copy)", id, m.VolumeID, m.MountPath)
		}
	}
	return nil
}
