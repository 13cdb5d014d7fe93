// Package storage owns the host agent's disk pool: a directory where files can be cloned
// copy-on-write (FICLONE reflinks on XFS or btrfs). Sandbox disks and snapshot RAM files are
// reflinks of their template's, so a create copies no data. When the data dir's own filesystem
// cannot reflink (ext4, say), the pool is an XFS filesystem (reflink=1) in a sparse file under the
// data dir, attached through a loop device.
package storage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pool is a directory whose files can be reflinked.
type Pool struct {
	Dir string
	// Loop is true when the pool is the loop-mounted XFS image (poolImage under the data dir).
	Loop bool
	// Image is the loop pool's sparse file (empty when the pool is the data dir's own filesystem).
	Image string
	// Warnings say how the pool differs from what was asked (made smaller to fit its disk, or
	// larger than its disk can hold); the agent logs them.
	Warnings []string
	dev      string // the loop device this Open attached, if any
}

const poolImage = "pool.xfs"

// MinPoolBytes is the smallest loop pool Open makes (XFS itself needs 300 MB).
const MinPoolBytes = 1 << 30

// DefaultPoolGiB is a new loop pool's size when none is asked for (sparse).
const DefaultPoolGiB = 64

// Open returns a reflink-capable pool under dataDir, creating the loop-mounted XFS image of
// sizeGiB (sparse) when dataDir itself cannot reflink. The image is never made larger than its
// disk can hold beyond reserve bytes: a sparse pool bigger than its disk would, once written,
// fill the host's disk under XFS (a write the loop device cannot place is an I/O error inside
// the pool's filesystem, not a clean ENOSPC), so the pool's own ENOSPC must come first.
func Open(dataDir string, sizeGiB int, reserve int64) (*Pool, error) {
	dir := filepath.Join(dataDir, "pool")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	img := filepath.Join(dataDir, poolImage)
	if dev := mountSource(dir); dev != "" {
		// Mounted by an earlier agent process (which left its VMs running): adopt the mount.
		p := &Pool{Dir: dir, Loop: strings.HasPrefix(dev, "/dev/loop")}
		if p.Loop {
			p.dev, p.Image = dev, img
			p.checkFits(reserve)
		}
		return p, nil
	}
	if CanReflink(dir) {
		return &Pool{Dir: dir}, nil
	}
	p := &Pool{Dir: dir, Loop: true, Image: img}
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if sizeGiB <= 0 {
			sizeGiB = DefaultPoolGiB
		}
		size, err := p.fitSize(int64(sizeGiB)<<30, reserve)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			return nil, err
		}
		if err := os.Truncate(img, size); err != nil {
			os.Remove(img)
			return nil, err
		}
		if err := runCmd("mkfs.xfs", "-q", "-f", "-m", "reflink=1", img); err != nil {
			os.Remove(img)
			return nil, fmt.Errorf("%w (xfsprogs is needed; `make setup` installs it)", err)
		}
	} else {
		p.checkFits(reserve)
	}
	// Buffered (not direct-I/O) loop: reflinked clones share blocks of pool.xfs, so the host's
	// page cache of that file serves every clone's first reads of a template's disk. Direct I/O
	// would avoid caching pages twice but send each clone's first reads to the physical disk.
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %v", img, cmdErr(err))
	}
	dev := strings.TrimSpace(string(out))
	// discard: a file deleted in the pool punches its blocks out of pool.xfs, so the host's disk
	// gets the space back (and its free space stays a true measure of what the pool can take).
	if err := runCmd("mount", "-t", "xfs", "-o", "noatime,discard", dev, dir); err != nil {
		runCmd("losetup", "-d", dev)
		return nil, err
	}
	if !CanReflink(dir) {
		return nil, fmt.Errorf("pool %s was mounted but cannot reflink", dir)
	}
	p.dev = dev
	return p, nil
}

// fitSize is the size of a new loop pool: want, or less when the disk under it has less than
// want free beyond reserve. Too little room for any pool is an error.
func (p *Pool) fitSize(want, reserve int64) (int64, error) {
	free, _, err := statfs(filepath.Dir(p.Image))
	if err != nil {
		return 0, err
	}
	fit := (free - reserve) &^ (1<<20 - 1)
	if fit < MinPoolBytes {
		return 0, fmt.Errorf("the disk under %s has %d MiB free: a pool needs %d MiB beyond the %d MiB kept free (--disk-reserve-mib); free space there or move --data-dir",
			filepath.Dir(p.Image), free>>20, MinPoolBytes>>20, reserve>>20)
	}
	if want <= fit {
		return want, nil
	}
	p.Warnings = append(p.Warnings, fmt.Sprintf("pool %s: asked for %d GiB but the disk under it has %d MiB free; made it %d MiB (the free space less the %d MiB reserve) so that it cannot fill the disk",
		p.Image, want>>30, free>>20, fit>>20, reserve>>20))
	return fit, nil
}

// checkFits warns when an existing pool image could outgrow its disk. The pool is kept (XFS
// cannot shrink); admission (Space) counts the disk's free space as well as the pool's.
func (p *Pool) checkFits(reserve int64) {
	var st unix.Stat_t
	if unix.Stat(p.Image, &st) != nil {
		return
	}
	free, _, err := statfs(filepath.Dir(p.Image))
	if err != nil {
		return
	}
	if grow := st.Size - st.Blocks*512; grow > free-reserve {
		p.Warnings = append(p.Warnings, fmt.Sprintf("pool %s is %d MiB, %d MiB of it not yet on disk, but its disk has %d MiB free (%d MiB kept in reserve): admission counts the disk's free space too, so the pool stops taking data before the disk fills",
			p.Image, st.Size>>20, grow>>20, free>>20, reserve>>20))
	}
}

// Settle makes XFS finish freeing the blocks of deleted files, which it does in the background
// (so a file just removed may not count as free yet): XFS_IOC_FREE_EOFBLOCKS waits for that
// work. Elsewhere (btrfs) it fails, harmlessly.
func (p *Pool) Settle() error {
	fd, err := unix.Open(p.Dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// struct xfs_fs_eofblocks: version 1, no filters (128 bytes).
	var eofb [128]byte
	eofb[0] = 1
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), xfsIocFreeEOFBlocks, uintptr(unsafe.Pointer(&eofb[0]))); errno != 0 {
		return fmt.Errorf("XFS_IOC_FREE_EOFBLOCKS %s: %w", p.Dir, errno)
	}
	return nil
}

// xfsIocFreeEOFBlocks is _IOR('X', 58, struct xfs_fs_eofblocks).
const xfsIocFreeEOFBlocks = 2<<30 | 128<<16 | 'X'<<8 | 58

// Space is the room of a pool, in bytes.
type Space struct {
	// Total is the pool filesystem's size.
	Total int64
	// PoolFree is what the pool filesystem can still take.
	PoolFree int64
	// DiskFree is what the disk under a loop pool can still take (PoolFree for other pools).
	DiskFree int64
}

// Free is what can still be written to the pool: the smaller of its own free space and, for a
// loop pool, its disk's.
func (s Space) Free() int64 { return min(s.PoolFree, s.DiskFree) }

// Space measures the pool's room now (statfs of the pool and, for a loop pool, its disk).
func (p *Pool) Space() (Space, error) {
	free, total, err := statfs(p.Dir)
	if err != nil {
		return Space{}, err
	}
	s := Space{Total: total, PoolFree: free, DiskFree: free}
	if p.Image != "" {
		if s.DiskFree, _, err = statfs(filepath.Dir(p.Image)); err != nil {
			return Space{}, err
		}
	}
	return s, nil
}

// statfs returns the bytes an unprivileged writer can still use on dir's filesystem, and its size.
func statfs(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// Close unmounts a loop pool and detaches its loop device. Running VMs keep their files open
// (the unmount then fails with EBUSY), so the agent calls it only when it shuts down with no VMM
// running; tests and tear-down call it too.
func (p *Pool) Close() error {
	if p.dev == "" {
		return nil
	}
	// A VMM that just exited may still pin the mount for a moment (the kernel tears its jail's
	// mount namespace down after the process is gone), and a mount namespace made meanwhile by
	// another jail on this host holds a copy of it. Busy is retried briefly, then the mount is
	// detached lazily: the kernel frees it, and the loop device, when the last holder goes.
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err = unix.Unmount(p.Dir, 0)
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		if time.Now().After(deadline) {
			err = unix.Unmount(p.Dir, unix.MNT_DETACH)
			break
		}
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", p.Dir, err)
	}
	if err := runCmd("losetup", "-d", p.dev); err != nil {
		return err
	}
	p.dev = "" // a second Close is a no-op
	return nil
}

// Clone makes dst a copy-on-write copy of src: no data is copied, and writes to either never show
// in the other. It fails rather than falling back to a full copy, which would be silently slow.
func Clone(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		os.Remove(dst)
		return fmt.Errorf("reflink %s: %w", src, err)
	}
	return out.Close()
}

// CloneInto reflinks src over the whole of dst, made if missing: an existing dst keeps its inode,
// so a process that has it open or mapped sees src's content (a VMM prepared before its memory
// or disk was known). On an error dst is left as it is.
func CloneInto(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		return fmt.Errorf("reflink %s: %w", src, err)
	}
	return out.Close()
}

// SyncFile flushes the file at p to the disk (fsync).
func SyncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// CanReflink reports whether files in dir can be cloned.
func CanReflink(dir string) bool {
	a, err := os.CreateTemp(dir, ".reflink-probe-*")
	if err != nil {
		return false
	}
	defer os.Remove(a.Name())
	a.Write([]byte("probe"))
	a.Close()
	b := a.Name() + ".clone"
	defer os.Remove(b)
	return Clone(a.Name(), b) == nil
}

// mountSource returns the device mounted at dir, or "" if dir is not a mount point.
func mountSource(dir string) string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return ""
	}
	defer f.Close()
	abs, _ := filepath.Abs(dir)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && fields[1] == abs {
			return fields[0]
		}
	}
	return ""
}

func runCmd(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func cmdErr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err.Error()
}
