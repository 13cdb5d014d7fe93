// Package testenv is the shared set-up of tests that boot real microVMs: the switch that enables
// them, the guest agent binary they bake into images, and the image cache they share.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/pandastack/pandastack/internal/image"
)

// VMTestsEnv is the one switch for slow, VM-backed tests (`make test` and CI set it).
const VMTestsEnv = "PANDASTACK_VM_TESTS"

// NeedVMs skips t unless VM-backed tests are switched on; they need root, QEMU and debootstrap.
func NeedVMs(t testing.TB) {
	t.Helper()
	if os.Getenv(VMTestsEnv) != "1" {
		t.Skipf("VM-backed test: set %s=1 (make test does) to run it", VMTestsEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("VM-backed tests need root (loop devices, mounts)")
	}
}

// ImageCache is where built guest images are kept between test runs, so debootstrap runs once:
// the machine's one cache (image.CacheDir), which `up` uses too.
func ImageCache() string { return image.CacheDir() }

// DataDir is a fresh agent data dir for one test.
func DataDir(t testing.TB) string {
	return t.TempDir()
}

var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)

// GuestAgent builds cmd/pandastack-guest once per test process, static and reproducible (no VCS
// stamp either: an unchanged guest agent keeps hitting the image cache across commits), and
// returns its path.
func GuestAgent(t testing.TB) string {
	t.Helper()
	guestOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "pandastack-guest-")
		if err != nil {
			guestErr = err
			return
		}
		guestPath = filepath.Join(dir, "pandastack-guest")
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", guestPath, "./cmd/pandastack-guest")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = err
			guestPath = string(out)
		}
	})
	if guestErr != nil {
		t.Fatalf("building pandastack-guest: %v\n%s", guestErr, guestPath)
	}
	return guestPath
}

// bakeStoreDir is BakeStore's directory, set by RunMain before any test runs.
var bakeStoreDir string

// BakeStore is a blob URL (file://) where the VM tests of one test process publish and pull their
// bakes (hostagent.Config.TemplateStore): a template is baked once per process, later test
// agents pull it (a few seconds) instead of cold-booting it again. "" when RunMain does not run
// the process's tests: their agents bake as before. Tests of bakes themselves, or of the blob
// store, do not use it.
func BakeStore() string {
	if bakeStoreDir == "" {
		return ""
	}
	return "file://" + bakeStoreDir
}

// RunMain runs a package's tests (its TestMain calls it) with a BakeStore, removed after them.
func RunMain(m *testing.M) int {
	if dir, err := os.MkdirTemp("", "pandastack-test-bakes-"); err == nil {
		bakeStoreDir = dir
	}
	code := m.Run()
	if bakeStoreDir != "" {
		os.RemoveAll(bakeStoreDir)
	}
	return code
}

// DiskReserveMiB is what a test's host agent keeps free on its disk. A test writes little and
// removes it; the agent's default (up to 4 GiB) would refuse to start on a crowded CI disk.
const DiskReserveMiB = 512
