package hostagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TestDoctor leaves on the host what crashes leave — a VMM process of no sandbox, sandbox and
// run directories of no sandbox, a half-written snapshot, a network namespace no slot holds, an
// empty VMM cgroup — and checks that the doctor names each, leaves them until asked, and repairs
// them all; fresh directories (an operation in flight) are not touched.
func TestDoctor(t *testing.T) {
	nettest.NeedRoot(t)
	prefix := nettest.NewPrefix()
	h := newHarness(t, func(c *Config) {
		c.Network = &network.Config{CIDR: nettest.FreeCIDR(t, 24), Prefix: prefix, Ready: -1}
	})
	a := h.agent
	long := time.Now().Add(-time.Hour)
	mkdir := func(p string, old bool) string {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if old {
			os.Chtimes(p, long, long)
		}
		return p
	}
	strayDir := mkdir(filepath.Join(a.sandboxesDir(), "sb_straydir"), true)
	strayRun := mkdir(a.runDir("sb_straydir"), true)
	freshDir := mkdir(filepath.Join(a.sandboxesDir(), "sb_inflight"), false)
	halfSnap := mkdir(filepath.Join(a.snapshotsDir(), "snap_half.tmp"), true)
	strayMount := mkdir(filepath.Join(a.layout.DataDir, "lazy", "snap_gone"), true)
	nettest.Run(t, "ip", "netns", "add", prefix+"-7")
	t.Cleanup(func() { exec.Command("ip", "netns", "del", prefix+"-7").Run() })
	var cg string
	if a.cg != nil {
		cg = mkdir(filepath.Join(a.cg.Dirs()[0], "sb_straycg"), false)
	}
	// A "VMM": a process named like QEMU working in a run directory of no sandbox.
	fake := filepath.Join(t.TempDir(), "qemu-system-doctor")
	if data, err := os.ReadFile("/bin/sleep"); err != nil || os.WriteFile(fake, data, 0o755) != nil {
		t.Fatal("copy sleep", err)
	}
	vmm := exec.Command(fake, "600")
	vmm.Dir = mkdir(a.runDir("sb_strayvmm"), false)
	if err := vmm.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- vmm.Wait() }()
	t.Cleanup(func() { vmm.Process.Kill() })

	kinds := func(r hostapi.DoctorReport, repaired bool) []string {
		var out []string
		for _, f := range r.Findings {
			if f.Repaired != repaired || f.Error != "" {
				t.Errorf("finding %+v: repaired %v, want %v", f, f.Repaired, repaired)
			}
			out = append(out, f.Kind+" "+filepath.Base(f.Resource))
		}
		sort.Strings(out)
		return out
	}
	want := []string{"orphan_dir sb_straydir", "orphan_dir sb_straydir", "orphan_netns " + prefix + "-7",
		"orphan_lazy_mount snap_gone", "orphan_vmm pid " + itoa(vmm.Process.Pid), "stale_tmp snap_half.tmp"}
	if cg != "" {
		want = append(want, "orphan_cgroup sb_straycg")
		sort.Strings(want)
	}
	var report hostapi.DoctorReport
	if code := h.call("GET", "/v1/doctor", nil, &report); code != 200 || !slices.Equal(kinds(report, false), want) {
		t.Fatalf("doctor: status %d, findings %v, want %v", code, kinds(report, false), want)
	}
	if _, err := os.Stat(strayDir); err != nil {
		t.Fatal("a report removed what it found")
	}
	if code := h.call("POST", "/v1/doctor/repair", nil, &report); code != 200 || !slices.Equal(kinds(report, true), want) {
		t.Fatalf("repair: status %d, findings %+v", code, report.Findings)
	}
	for _, p := range []string{strayDir, strayRun, halfSnap, strayMount, cg, "/var/run/netns/" + prefix + "-7"} {
		if _, err := os.Stat(p); p != "" && err == nil {
			t.Errorf("%s is still there after the repair", p)
		}
	}
	if _, err := os.Stat(freshDir); err != nil {
		t.Errorf("a fresh directory (an operation in flight) was removed: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the orphan VMM still runs after the repair")
	}
	if code := h.call("GET", "/v1/doctor", nil, &report); code != 200 || len(report.Findings) != 0 {
		t.Errorf("doctor after the repair: %+v", report.Findings)
	}
}

// TestStartReclaims: an agent's start takes what an agent killed mid-operation left, of any age
// (nothing of its own is in flight yet): a VMM of no sandbox, a bake's VMM, its half-made
// template and run directory, a fresh sandbox directory of no record, a VMM prepared for a
// create that never came with its files.
func TestStartReclaims(t *testing.T) {
	nettest.NeedRoot(t)
	h := newHarness(t)
	a := h.agent
	fake := filepath.Join(t.TempDir(), "qemu-system-reclaim")
	if data, err := os.ReadFile("/bin/sleep"); err != nil || os.WriteFile(fake, data, 0o755) != nil {
		t.Fatal("copy sleep", err)
	}
	var exited []chan error
	var dirs []string
	for _, id := range []string{"sb_killedmidcreate", "bake-reclaimed", sandbox.PreparedPrefix + "reclaimed"} {
		dir := a.runDir(id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		vmm := exec.Command(fake, "600")
		vmm.Dir = dir
		if err := vmm.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vmm.Process.Kill() })
		done := make(chan error, 1)
		go func() { done <- vmm.Wait() }()
		exited = append(exited, done)
		dirs = append(dirs, dir)
	}
	for _, d := range []string{filepath.Join(a.sandboxesDir(), "sb_killedmidcreate"), filepath.Join(a.templatesDir(), "tmpl-x.baking"),
		filepath.Join(a.sandboxesDir(), sandbox.PreparedPrefix+"reclaimed")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	h.stop()
	h.start()
	for i, done := range exited {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("VMM %d still runs after the agent's start", i)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s is still there after the agent's start", d)
		}
	}
}
