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

	"golang.org/x/sys/unix"
)

// Pool is a directory whose files can be reflinked.
type Pool struct {
	Dir string
	// Loop is true when the pool is the loop-mounted XFS image (poolImage under the data dir).
	Loop bool
	dev  string // the loop device this Open attached, if any
}

const poolImage = "pool.xfs"

// Open returns a reflink-capable pool under dataDir, creating the loop-mounted XFS image of
// sizeGiB (sparse) when dataDir itself cannot reflink.
func Open(dataDir string, sizeGiB int) (*Pool, error) {
	dir := filepath.Join(dataDir, "pool")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if dev := mountSource(dir); dev != "" {
		// Mounted by an earlier agent process (which left its VMs running): adopt the mount.
		p := &Pool{Dir: dir, Loop: strings.HasPrefix(dev, "/dev/loop")}
		if p.Loop {
			p.dev = dev
		}
		return p, nil
	}
	if CanReflink(dir) {
		return &Pool{Dir: dir}, nil
	}
	img := filepath.Join(dataDir, poolImage)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if sizeGiB <= 0 {
			sizeGiB = 64
		}
		if err := runCmd("truncate", "-s", fmt.Sprintf("%dG", sizeGiB), img); err != nil {
			return nil, err
		}
		if err := runCmd("mkfs.xfs", "-q", "-f", "-m", "reflink=1", img); err != nil {
			os.Remove(img)
			return nil, fmt.Errorf("%w (xfsprogs is needed; `make setup` installs it)", err)
		}
	}
	// Buffered (not direct-I/O) loop: reflinked clones share blocks of pool.xfs, so the host's
	// page cache of that file serves every clone's first reads of a template's disk. Direct I/O
	// would avoid caching pages twice but send each clone's first reads to the physical disk.
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		return nil, fmt.Errorf("losetup %s: %v", img, cmdErr(err))
	}
	dev := strings.TrimSpace(string(out))
	if err := runCmd("mount", "-t", "xfs", "-o", "noatime", dev, dir); err != nil {
		runCmd("losetup", "-d", dev)
		return nil, err
	}
	if !CanReflink(dir) {
		return nil, fmt.Errorf("pool %s was mounted but cannot reflink", dir)
	}
	return &Pool{Dir: dir, Loop: true, dev: dev}, nil
}

// Close unmounts a loop pool and detaches its loop device. Running VMs keep their files open
// (the unmount then fails with EBUSY), so the agent calls it only when it shuts down with no VMM
// running; tests and tear-down call it too.
func (p *Pool) Close() error {
	if p.dev == "" {
		return nil
	}
	if err := unix.Unmount(p.Dir, 0); err != nil {
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
