// Package cgroup gives each VMM its own cgroup with CPU, memory and pids limits (and an I/O
// weight where the host supports it), on cgroup v1 (one hierarchy per controller) and v2 (one
// unified hierarchy). Groups live under a "pandastack" parent inside the agent's own cgroup, so
// an agent that was itself limited cannot hand out more than it has.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Limits of one group.
type Limits struct {
	// CPUs is the CPU time quota in CPUs (1.5 = one and a half cores per period).
	CPUs float64
	// MemoryBytes bounds everything the processes use: anonymous memory and the page cache they
	// bring in (clean cache is reclaimed first, then the kernel's OOM killer acts in the group).
	MemoryBytes int64
	// Pids bounds processes and threads.
	Pids int64
	// IOWeight (1-10000, v2 only, 0: unset) is the group's share of disk time under contention.
	IOWeight int
}

// Manager creates groups under one parent.
type Manager struct {
	v2 bool
	// parents: controller name ("" on v2) -> the parent directory of our groups.
	parents map[string]string
	name    string // the parent's path below the process's own cgroup, e.g. pandastack/<agent>
}

// v1Controllers are the v1 hierarchies we use (blkio throttling needs a device and direct I/O on
// v1, so disk I/O is left to the host's scheduler there).
var v1Controllers = []string{"cpu", "memory", "pids"}

const period = 100000 // µs, the CFS period for CPU quotas

// Open finds the cgroup hierarchies, creates the parent group named name inside this process's
// own cgroup, and enables the controllers there.
func Open(name string) (*Manager, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	m := &Manager{parents: map[string]string{}, name: filepath.Clean(name)}
	v1 := true
	for _, c := range v1Controllers {
		_, has := mounts[c]
		v1 = v1 && has
	}
	if mp, ok := mounts[""]; ok && !v1 {
		// The controllers are on the unified hierarchy (a v2 host; a hybrid host keeps them on
		// v1, and its v2 mount has none).
		m.v2 = true
		dir := filepath.Join(mp, own[""], name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		// A v2 group with processes cannot have children with controllers ("no internal
		// processes"); our parent holds none, so enable the controllers for its children.
		if err := enableV2(dir); err != nil {
			return nil, err
		}
		m.parents[""] = dir
		return m, nil
	}
	for _, c := range v1Controllers {
		mp, ok := mounts[c]
		if !ok {
			return nil, fmt.Errorf("cgroup v1: no %s hierarchy mounted", c)
		}
		dir := filepath.Join(mp, own[c], name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", c, err)
		}
		m.parents[c] = dir
	}
	return m, nil
}

// Dirs returns the parent group's directories, one per hierarchy.
func (m *Manager) Dirs() []string {
	out := make([]string, 0, len(m.parents))
	for _, d := range m.parents {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Close removes what Open and Create made once no process is left in it: the groups inside the
// parent, the parent, and the levels of the parent's name above it when they are empty (another
// agent may still use them). A group that still holds a process stays, and Close says so.
func (m *Manager) Close() error {
	var errs []error
	for _, dir := range m.Dirs() {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var kids []string
		for _, e := range entries {
			if e.IsDir() {
				kids = append(kids, filepath.Join(dir, e.Name()))
			}
		}
		if err := Remove(kids); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := Remove([]string{dir}); err != nil {
			errs = append(errs, err)
			continue
		}
		d := dir
		for range strings.Count(m.name, "/") {
			d = filepath.Dir(d)
			if syscall.Rmdir(d) != nil {
				break // not empty: shared with another agent
			}
		}
	}
	return errors.Join(errs...)
}

// Version is 1 or 2.
func (m *Manager) Version() int {
	if m.v2 {
		return 2
	}
	return 1
}

// Create makes (or re-limits) the group name and returns its directories, one per hierarchy.
func (m *Manager) Create(name string, l Limits) ([]string, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad group name %q", name)
	}
	var dirs []string
	fail := func(err error) ([]string, error) {
		Remove(dirs)
		return nil, err
	}
	if m.v2 {
		dir := filepath.Join(m.parents[""], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		dirs = append(dirs, dir)
		files := map[string]string{
			"cpu.max":    fmt.Sprintf("%d %d", int64(l.CPUs*period), period),
			"memory.max": strconv.FormatInt(l.MemoryBytes, 10),
			"pids.max":   strconv.FormatInt(l.Pids, 10),
		}
		if l.MemoryBytes > 0 {
			files["memory.swap.max"] = "0"
		}
		if l.IOWeight > 0 {
			files["io.weight"] = "default " + strconv.Itoa(l.IOWeight)
		}
		for f, v := range files {
			if err := write(dir, f, v); err != nil && !(f == "io.weight" || f == "memory.swap.max") {
				return fail(err)
			}
		}
		return dirs, nil
	}
	for _, c := range v1Controllers {
		dir := filepath.Join(m.parents[c], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fail(err)
		}
		dirs = append(dirs, dir)
		var err error
		switch c {
		case "cpu":
			if err = write(dir, "cpu.cfs_period_us", strconv.Itoa(period)); err == nil {
				err = write(dir, "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*period), 10))
			}
		case "memory":
			err = write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
			// With swap accounting, swap counts too: a guest cannot push its RAM to swap instead.
			if err == nil {
				write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
			}
		case "pids":
			err = write(dir, "pids.max", strconv.FormatInt(l.Pids, 10))
		}
		if err != nil {
			return fail(err)
		}
	}
	return dirs, nil
}

// Remove deletes groups once their processes are gone (a group empties a moment after its last
// task is reaped, so EBUSY is retried briefly). Missing groups are fine.
func Remove(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		for i := 0; i < 50; i++ {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// Read returns a control file of a group's directory among dirs (e.g. "memory.max_usage_in_bytes"
// or "memory.peak"), for tests and diagnostics.
func Read(dirs []string, file string) (string, error) {
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
			return strings.TrimSpace(string(b)), nil
		}
	}
	return "", fmt.Errorf("no %s in %v", file, dirs)
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s=%s: %w", filepath.Join(dir, file), value, err)
	}
	return nil
}

func enableV2(dir string) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var want []string
	for _, c := range strings.Fields(string(avail)) {
		if c == "cpu" || c == "memory" || c == "pids" || c == "io" {
			want = append(want, "+"+c)
		}
	}
	for _, c := range []string{"cpu", "memory", "pids"} {
		if !strings.Contains(string(avail), c) {
			return fmt.Errorf("cgroup v2: controller %s not available in %s (delegate it to the agent's cgroup)", c, dir)
		}
	}
	return write(dir, "cgroup.subtree_control", strings.Join(want, " "))
}

// ownCgroups maps controller ("" for v2) to this process's cgroup path.
func ownCgroups() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// cgroupMounts maps controller ("" for the v2 hierarchy) to its mount point.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		switch b[0] {
		case "cgroup2":
			out[""] = a[4]
		case "cgroup":
			for _, o := range strings.Split(b[2], ",") {
				if _, dup := out[o]; !dup {
					out[o] = a[4]
				}
			}
		}
	}
	return out, sc.Err()
}

// SetMemoryLimit bounds the memory of all groups together: the parent's own limit (0 or less:
// none). An operator who tells the agent how much memory its VMs may use gets it enforced here.
func (m *Manager) SetMemoryLimit(bytes int64) error {
	if m.v2 {
		v := "max"
		if bytes > 0 {
			v = strconv.FormatInt(bytes, 10)
		}
		if err := write(m.parents[""], "memory.max", v); err != nil {
			return err
		}
		if bytes > 0 {
			write(m.parents[""], "memory.swap.max", "0")
		}
		return nil
	}
	dir := m.parents["memory"]
	v := "-1"
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	// memsw must stay >= the limit: raise it first, lower it last (absent without swap accounting).
	write(dir, "memory.memsw.limit_in_bytes", v)
	if err := write(dir, "memory.limit_in_bytes", v); err != nil {
		return err
	}
	write(dir, "memory.memsw.limit_in_bytes", v)
	return nil
}

// SetCPUWeight gives the parent group, and each level of its name above it (the "pandastack"
// group all agents on the host share), the CPU weight of cpus busy processes: cpu.shares
// cpus×1024 on v1, cpu.weight cpus×100 on v2 (each process's default being 1024 and 100). With
// the default weight of one, all VMMs together would get one process's share of a busy host
// against the processes outside our groups, whatever the machine's size. It only weighs the
// groups against their siblings under contention: each VMM's own CPU quota is unchanged. cpus < 1:
// the kernel's default weight (one process).
func (m *Manager) SetCPUWeight(cpus int) error {
	file, unit, maxW := "cpu.shares", 1024, 262144
	dir := m.parents["cpu"]
	if m.v2 {
		file, unit, maxW, dir = "cpu.weight", 100, 10000, m.parents[""]
	}
	v := strconv.Itoa(min(max(cpus, 1)*unit, maxW))
	var errs []error
	for range strings.Count(m.name, "/") + 1 {
		errs = append(errs, write(dir, file, v))
		dir = filepath.Dir(dir)
	}
	return errors.Join(errs...)
}

// CPUWeight reads the parent group's cpu.shares (v1) or cpu.weight (v2).
func (m *Manager) CPUWeight() (int, error) {
	file, dir := "cpu.shares", m.parents["cpu"]
	if m.v2 {
		file, dir = "cpu.weight", m.parents[""]
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Memory reports the limit the groups are under together (the smallest on the parent's path;
// 0: none) and their working set: usage less inactive file pages, the clean cache the kernel
// reclaims first (what cAdvisor and the kubelet count too).
func (m *Manager) Memory() (limit, used int64, err error) {
	var dir, usageFile, inactiveKey string
	if m.v2 {
		dir, usageFile, inactiveKey = m.parents[""], "memory.current", "inactive_file"
		// v2 files show a group's own limit: walk up to the root for the smallest.
		for d := dir; ; d = filepath.Dir(d) {
			b, err := os.ReadFile(filepath.Join(d, "memory.max"))
			if err != nil {
				break // the root has no memory.max
			}
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && (limit == 0 || v < limit) {
				limit = v
			}
		}
	} else {
		dir, usageFile, inactiveKey = m.parents["memory"], "memory.usage_in_bytes", "total_inactive_file"
	}
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, 0, err
	}
	var inactive int64
	for _, line := range strings.Split(string(stat), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch {
		case k == inactiveKey:
			inactive = n
		case k == "hierarchical_memory_limit" && !m.v2 && n < 1<<62:
			limit = n // v1 reports the smallest on the path itself; "none" is a huge number
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return limit, max(usage-inactive, 0), nil
}

// CPUUsage reads one group's CPU time (its directories, one per hierarchy, as Create returned
// them): cpu.stat usage_usec on v2, cpuacct.usage on v1 when cpuacct shares the cpu hierarchy.
func CPUUsage(dirs []string) (time.Duration, error) {
	if stat, err := Read(dirs, "cpu.stat"); err == nil {
		for _, line := range strings.Split(stat, "\n") {
			if k, v, _ := strings.Cut(line, " "); k == "usage_usec" {
				n, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond, err
			}
		}
	}
	v, err := Read(dirs, "cpuacct.usage")
	if err != nil {
		return 0, fmt.Errorf("cgroup: no CPU usage in %v", dirs)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return time.Duration(n), err
}

// MemoryUsage reads one group's memory use: memory.current on v2, memory.usage_in_bytes on v1.
func MemoryUsage(dirs []string) (int64, error) {
	v, err := Read(dirs, "memory.current")
	if err != nil {
		if v, err = Read(dirs, "memory.usage_in_bytes"); err != nil {
			return 0, err
		}
	}
	return strconv.ParseInt(v, 10, 64)
}
