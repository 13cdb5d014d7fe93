package sandbox

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Metrics sampling: a CPU share needs two readings of the guest's tick counters. The previous
// call's reading serves when it is recent enough; otherwise the call reads twice, cpuWindow apart.
const (
	cpuWindow    = 250 * time.Millisecond
	maxSampleAge = time.Minute
)

// Metrics reads a running sandbox's resource figures: the guest's own (its agent's usage op) and
// its VMM's on this host. It neither wakes a hibernated sandbox (a conflict) nor counts as use.
func (m *Manager) Metrics(ctx context.Context, id string) (hostapi.SandboxMetrics, error) {
	sb, err := m.get(id)
	if err != nil {
		return hostapi.SandboxMetrics{}, err
	}
	c, err := sb.guest(ctx)
	if err != nil {
		return hostapi.SandboxMetrics{}, err
	}
	now, err := c.Usage(ctx)
	if guest.ErrorCode(err) == guest.CodeInvalidArgument && strings.Contains(err.Error(), "unknown op") {
		return hostapi.SandboxMetrics{}, errdefs.Conflictf("sandbox %s runs a guest agent older than metrics: a sandbox of a template baked since has them", id)
	}
	if err != nil {
		return hostapi.SandboxMetrics{}, m.callErr(sb, err)
	}
	at := time.Now()
	sb.mu.Lock()
	prev, prevAt, lastPct := sb.usage, sb.usageAt, sb.usagePct
	vm, vcpus := sb.rec.VM, sb.rec.VCPUs
	sb.mu.Unlock()
	usable := !prevAt.IsZero() && at.Sub(prevAt) <= maxSampleAge &&
		prev.CPUTotalTicks <= now.CPUTotalTicks && prev.CPUBusyTicks <= now.CPUBusyTicks
	var pct float64
	switch {
	case usable && at.Sub(prevAt) < cpuWindow:
		// Too close to the previous reading for a share of its own: that reading's share stands
		// (and stays the base of the next).
		pct = lastPct
	default:
		if !usable {
			// No usable earlier reading (the first call, an old one, or a guest that rebooted).
			select {
			case <-ctx.Done():
				return hostapi.SandboxMetrics{}, ctx.Err()
			case <-time.After(cpuWindow):
			}
			prev = now
			if now, err = c.Usage(ctx); err != nil {
				return hostapi.SandboxMetrics{}, m.callErr(sb, err)
			}
			at = time.Now()
		}
		if dt := now.CPUTotalTicks - prev.CPUTotalTicks; dt > 0 && now.CPUBusyTicks >= prev.CPUBusyTicks {
			pct = min(100, 100*float64(now.CPUBusyTicks-prev.CPUBusyTicks)/float64(dt))
		}
		sb.mu.Lock()
		sb.usage, sb.usageAt, sb.usagePct = now, at, pct
		sb.mu.Unlock()
	}

	out := hostapi.SandboxMetrics{At: hostapi.Time(at), VCPUs: vcpus, CPUUsedPct: pct,
		MemTotalBytes: now.MemTotal, MemUsedBytes: max(now.MemTotal-now.MemAvailable, 0), MemCacheBytes: now.MemCache,
		DiskTotalBytes: now.DiskTotal, DiskUsedBytes: now.DiskUsed}
	if now.CPUs > 0 {
		out.VCPUs = now.CPUs
	}
	if cpu, mem, err := vmmUsage(vm); err == nil {
		out.HostCPUSeconds, out.HostMemBytes = cpu.Seconds(), mem
	} else {
		m.log.Debug("sandbox metrics: VMM figures", "sandbox", id, "err", err)
	}
	return out, nil
}

// vmmUsage is the CPU time and memory of a VMM: its cgroup's where the group accounts for them
// (a v1 host with cpuacct apart from cpu does not count CPU in our group), else its process's
// (utime + stime of all its threads, resident set).
func vmmUsage(vm runtime.VM) (cpu time.Duration, mem int64, err error) {
	cpu, cerr := cgroup.CPUUsage(vm.Cgroups)
	mem, merr := cgroup.MemoryUsage(vm.Cgroups)
	if cerr == nil && merr == nil {
		return cpu, mem, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", vm.Pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command (which may hold spaces) start at the last ')': state is field 3,
	// utime and stime are 14 and 15.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", vm.Pid)
	}
	if cerr != nil {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * time.Second / clockTicks
	}
	if merr != nil {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", vm.Pid))
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				mem = kb << 10
			}
		}
	}
	return cpu, mem, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on every Linux port we run on).
const clockTicks = 100
