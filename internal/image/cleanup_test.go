package image

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// An interrupted debootstrap leaves proc mounted in its target: removeTree must detach it and
// delete the tree without touching the host's /proc.
func TestRemoveTreeDetachesMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "debootstrap-x.tmp")
	procDir := filepath.Join(dir, "root", "proc")
	spaced := filepath.Join(dir, "root", "with space")
	for _, d := range []string{procDir, spaced} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("proc", procDir, "proc", 0, ""); err != nil {
		t.Fatalf("mount proc: %v", err)
	}
	if err := unix.Mount("tmpfs", spaced, "tmpfs", 0, "size=1m"); err != nil {
		unix.Unmount(procDir, unix.MNT_DETACH)
		t.Fatalf("mount tmpfs: %v", err)
	}
	if got := mountsUnder(dir); len(got) != 2 {
		t.Fatalf("mountsUnder = %q, want the two mounts", got)
	}
	if err := removeTree(dir); err != nil {
		t.Fatalf("removeTree: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
	if got := mountsUnder(dir); len(got) != 0 {
		t.Fatalf("mounts left: %q", got)
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Fatalf("host /proc harmed: %v", err)
	}
}
