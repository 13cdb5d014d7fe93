package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pandastack/pandastack/internal/testenv"
)

// TestBenchSmoke runs every default suite with two samples of everything (`go run ./bench
// -smoke`), so a benchmark that no longer runs fails `make test` rather than the next `make
// bench`. Its figures are not judged. The templates suite, which builds the whole catalog, is
// left to `make bench-templates`.
func TestBenchSmoke(t *testing.T) {
	testenv.NeedVMs(t)
	samplesCap = 2
	defer func() { samplesCap = 0 }()
	// The controlplane suite runs `pandastack` found beside the guest agent, as bin/ has them.
	guest := testenv.GuestAgent(t)
	build := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(guest), "pandastack"), "./cmd/pandastack")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pandastack: %v\n%s", err, out)
	}
	// Its own data dir, removed afterwards: its pool holds several GiB of bakes (made again each
	// run, a few seconds each), too much to leave on a CI machine.
	dir, err := os.MkdirTemp("/var/tmp", "pandastack-bench-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	diskReserveMiB = testenv.DiskReserveMiB
	if err := run("", dir, guest, testenv.ImageCache(), defaultSuites, 2, 2); err != nil {
		t.Fatal(err)
	}
}
