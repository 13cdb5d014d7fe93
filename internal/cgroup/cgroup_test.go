package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSetCPUWeight: the parent group and the level of its name above it weigh cpus processes
// (cpu.shares on v1, cpu.weight on v2), a group made in it keeps its own quota, and cpus < 1
// gives back the kernel's default of one process.
func TestSetCPUWeight(t *testing.T) {
	m := testManager(t, "pandastack-test-weight/"+strconv.Itoa(os.Getpid()))
	file, unit := "cpu.shares", 1024
	if m.v2 {
		file, unit = "cpu.weight", 100
	}
	dir := m.parents["cpu"]
	if m.v2 {
		dir = m.parents[""]
	}
	read := func(d string) int {
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	if err := m.SetCPUWeight(3); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.CPUWeight(); got != 3*unit || read(dir) != 3*unit || read(filepath.Dir(dir)) != 3*unit {
		t.Fatalf("after SetCPUWeight(3): %s %d here, %d above; want %d", file, got, read(filepath.Dir(dir)), 3*unit)
	}
	dirs, err := m.Create("vmm", Limits{CPUs: 1, MemoryBytes: 64 << 20, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	quota := "cpu.cfs_quota_us"
	if m.v2 {
		quota = "cpu.max"
	}
	if q, err := Read(dirs, quota); err != nil || !strings.HasPrefix(q, "100000") {
		t.Errorf("the VMM group's %s is %q (%v), want its own one-CPU quota", quota, q, err)
	}
	if err := m.SetCPUWeight(0); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.CPUWeight(); got != unit {
		t.Fatalf("after SetCPUWeight(0): %s %d, want the default %d", file, got, unit)
	}
}

// testManager opens name for a test (as root, where cgroups are mounted; else the test is
// skipped) and closes it after.
func testManager(t *testing.T, name string) *Manager {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	m, err := Open(name)
	if err != nil {
		t.Skip("no usable cgroup hierarchy here: ", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
