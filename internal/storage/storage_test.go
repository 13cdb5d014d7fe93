package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of sizeMiB on a fresh directory: a small host disk that cannot
// reflink, so Open makes a loop pool on it. Root only (tmpfs and loop mounts).
func smallDisk(t *testing.T, sizeMiB int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (tmpfs and loop mounts)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", sizeMiB)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func openPool(t *testing.T, dataDir string, gib int, reserve int64) *Pool {
	t.Helper()
	p, err := Open(dataDir, gib, reserve)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pool: %v", err)
		}
	})
	return p
}

// TestPoolFitsItsDisk: a pool asked for 64 GiB on a disk with 1.3 GiB free is made to fit (free
// less the reserve) with a warning saying so, and filling it ends in the pool's own ENOSPC with
// the disk's reserve still free; a disk with no room for a pool is a clear error.
func TestPoolFitsItsDisk(t *testing.T) {
	const diskMiB, reserve = 1300, 200 << 20
	disk := smallDisk(t, diskMiB)
	p := openPool(t, disk, 64, reserve)
	if !p.Loop || p.Image == "" {
		t.Fatalf("a tmpfs data dir should get a loop pool: %+v", p)
	}
	st, err := os.Stat(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > diskMiB<<20-reserve {
		t.Fatalf("pool image is %d MiB on a %d MiB disk with a %d MiB reserve", st.Size()>>20, diskMiB, reserve>>20)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "asked for 64 GiB") {
		t.Errorf("warnings %q, want one saying the pool was made smaller", p.Warnings)
	}
	sp, err := p.Space()
	if err != nil {
		t.Fatal(err)
	}
	if sp.Total > st.Size() || sp.PoolFree <= 0 || sp.DiskFree > diskMiB<<20 || sp.Free() > sp.PoolFree {
		t.Fatalf("space %+v for a %d MiB image", sp, st.Size()>>20)
	}

	// Fill the pool: the write that does not fit is the pool's ENOSPC, and the disk keeps its
	// reserve (on a pool larger than its disk, the loop device's writes would fail instead).
	f, err := os.Create(filepath.Join(p.Dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = 1
	}
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling the pool: %v, want ENOSPC", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of the full pool: %v", err)
	}
	f.Close()
	var fs unix.Statfs_t
	if err := unix.Statfs(disk, &fs); err != nil {
		t.Fatal(err)
	}
	t.Logf("pool image %d MiB on a %d MiB disk; pool full, disk free %d MiB", st.Size()>>20, diskMiB, int64(fs.Bavail)*fs.Bsize>>20)
	if free := int64(fs.Bavail) * fs.Bsize; free < reserve/2 {
		t.Fatalf("the disk has %d MiB free with the pool full; want about its %d MiB reserve", free>>20, reserve>>20)
	}
	if sp, _ := p.Space(); sp.Free() > 16<<20 {
		t.Errorf("full pool reports %d MiB free", sp.Free()>>20)
	}
	// A deleted file's room is back once Settle returns (XFS frees it in the background).
	if err := os.Remove(filepath.Join(p.Dir, "fill")); err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(); err != nil {
		t.Fatal(err)
	}
	if sp, _ := p.Space(); sp.PoolFree < st.Size()*9/10 {
		t.Errorf("pool has %d MiB free after the fill was deleted, of %d", sp.PoolFree>>20, st.Size()>>20)
	}

	// No room for even the smallest pool: refused, nothing left behind.
	tiny := smallDisk(t, 900)
	if _, err := Open(tiny, 64, reserve); err == nil || !strings.Contains(err.Error(), "MiB free") {
		t.Fatalf("pool on a 900 MiB disk: %v, want an error naming the free space", err)
	}
	if _, err := os.Stat(filepath.Join(tiny, poolImage)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused pool left %s behind (%v)", poolImage, err)
	}
}

// TestPoolLargerThanDisk: an existing pool image larger than its disk can hold is kept (XFS does
// not shrink) with a warning, and Space counts the disk's free space, not only the pool's.
func TestPoolLargerThanDisk(t *testing.T) {
	disk := smallDisk(t, 1300)
	img := filepath.Join(disk, poolImage)
	// An image made by an older agent (or for a bigger disk): 8 GiB, sparse.
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<30); err != nil {
		t.Fatal(err)
	}
	if err := runCmd("mkfs.xfs", "-q", "-f", "-m", "reflink=1", img); err != nil {
		t.Fatal(err)
	}
	p := openPool(t, disk, 64, 200<<20)
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "admission counts the disk's free space") {
		t.Errorf("warnings %q, want one about the oversized pool", p.Warnings)
	}
	sp, err := p.Space()
	if err != nil {
		t.Fatal(err)
	}
	if sp.PoolFree < 7<<30 || sp.DiskFree > 1300<<20 || sp.Free() != sp.DiskFree {
		t.Fatalf("space %+v: want the disk's free space to bound it", sp)
	}
}

// TestPoolCloseWhileBusy: a pool something still holds (here an open file; in production a jail's
// mount namespace that has not gone yet) is detached anyway after a short wait, so an agent's stop
// and a test's cleanup never fail on it; the mount is gone from this namespace at once.
func TestPoolCloseWhileBusy(t *testing.T) {
	disk := smallDisk(t, 1300)
	p, err := Open(disk, 1, 200<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Loop {
		t.Fatalf("a tmpfs data dir should get a loop pool: %+v", p)
	}
	f, err := os.Create(filepath.Join(p.Dir, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := p.Close(); err != nil {
		t.Fatalf("close of a busy pool: %v", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if strings.Contains(string(mounts), " "+p.Dir+" ") {
		t.Fatalf("%s still mounted after Close", p.Dir)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}
