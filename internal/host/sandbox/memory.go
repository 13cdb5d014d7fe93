package sandbox

import (
	"context"
	"os"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/template"
)

// Memory and CPU policy (docs/security.md, "Host resources"):
//
//   - Size limits: no VM (sandbox, template bake, build VM) may have more vCPUs than MaxVCPUs or
//     more memory than MaxMemoryMiB: 400 `invalid_request` naming the limit.
//   - Commit limit: the guest memory of the VMs running on this host (sandboxes running or being
//     made, bake and build VMs) may add up to MemoryOvercommit × HostMemoryMiB; past it a create,
//     bake, build or wake is 503 `capacity`. Restored sandboxes share their template's clean
//     pages, which is why the limit may exceed the host.
//   - Pressure: the memory really available to VMs is checked every PressureInterval; below
//     MemoryWatermarkMiB the idlest sandboxes are hibernated (least recently used first) until it
//     is above again. A create while below the watermark first does the same, and is refused
//     (`capacity`) only if that could not free enough.

// DefaultMemoryOvercommit is the commit limit's ratio when none is configured (the figures behind
// it are in docs/security.md).
const DefaultMemoryOvercommit = 2.0

// Limits is the memory and CPU policy above, as configured (Config's fields of the same names).
type Limits struct {
	// MaxVCPUs and MaxMemoryMiB bound one VM: a sandbox, a bake VM or a build VM.
	MaxVCPUs, MaxMemoryMiB int
	// HostMemoryMiB is the memory this host's VMs may use in all.
	HostMemoryMiB int
	// MemoryOvercommit: the guest memory of running VMs may add up to this × HostMemoryMiB.
	MemoryOvercommit float64
	// MemoryWatermarkMiB: below this much memory available to VMs, the idlest sandboxes are
	// hibernated (negative: never).
	MemoryWatermarkMiB int
	// PressureInterval is how often available memory is checked.
	PressureInterval time.Duration
}

// WithDefaults fills the limits the operator left unset from the host: its CPUs and MemTotal,
// half of that per VM, DefaultMemoryOvercommit, a watermark of 1/16 of the memory (256-2048 MiB),
// a check every second.
func (l Limits) WithDefaults() Limits {
	c := &l
	if c.HostMemoryMiB <= 0 {
		c.HostMemoryMiB, _ = memInfoMiB()
	}
	defaults.Positive(&c.MaxVCPUs, goruntime.NumCPU())
	defaults.Positive(&c.MaxMemoryMiB, c.HostMemoryMiB/2)
	defaults.Positive(&c.MemoryOvercommit, DefaultMemoryOvercommit)
	if c.MemoryWatermarkMiB == 0 {
		c.MemoryWatermarkMiB = min(max(c.HostMemoryMiB/16, 256), 2048)
	}
	defaults.Positive(&c.PressureInterval, time.Second)
	return l
}

// CommitLimitMiB is the guest memory this host admits in all.
func (m *Manager) CommitLimitMiB() int {
	return int(m.cfg.MemoryOvercommit * float64(m.cfg.HostMemoryMiB))
}

// SlotsTotal bounds how many sandboxes this host keeps, hibernated ones included (they hold no
// memory): its commit limit over the smallest guest a template may have. Placement goes by
// committed memory; slots only cap the count, and a create past them is refused (`capacity`)
// like one past the commit limit, so the control plane tries another host.
func (m *Manager) SlotsTotal() int {
	return max(1, m.CommitLimitMiB()/template.MinMemoryMiB)
}

// admitSandboxLocked checks that a new sandbox of memMiB fits: a free slot and the commit limit
// (m.mu held).
func (m *Manager) admitSandboxLocked(id string, memMiB int) error {
	if n, slots := len(m.sandboxes), m.SlotsTotal(); n >= slots {
		return errdefs.Capacityf("sandbox %s: this host has no free slot (%d sandboxes, hibernated ones included, of %d slots)", id, n, slots)
	}
	return m.admitLocked("sandbox "+id, memMiB)
}

// CheckSize refuses a VM larger than this host's limits (bake.VMs).
func (m *Manager) CheckSize(what string, vcpus, memMiB int) error {
	if vcpus > m.cfg.MaxVCPUs {
		return errdefs.Invalidf("%s: %d vCPUs is more than this host's limit of %d (max_vcpus)", what, vcpus, m.cfg.MaxVCPUs)
	}
	if memMiB > m.cfg.MaxMemoryMiB {
		return errdefs.Invalidf("%s: %d MiB of memory is more than this host's limit of %d MiB per VM (max_memory_mib)", what, memMiB, m.cfg.MaxMemoryMiB)
	}
	return nil
}

// committedLocked is the guest memory of what runs or is being started (call with m.mu held).
func (m *Manager) committedLocked() int {
	n := m.reservedMiB
	for _, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.rec.State == StateRunning || sb.rec.State == StateCreating {
			n += sb.rec.MemoryMiB
		}
		sb.mu.Unlock()
	}
	return n
}

// admitLocked checks that memMiB more guest memory fits under the commit limit (m.mu held).
func (m *Manager) admitLocked(what string, memMiB int) error {
	if c, limit := m.committedLocked(), m.CommitLimitMiB(); c+memMiB > limit {
		return errdefs.Capacityf("%s needs %d MiB of guest memory; this host has committed %d of its %d MiB (%.2g × %d MiB, memory_overcommit)",
			what, memMiB, c, limit, m.cfg.MemoryOvercommit, m.cfg.HostMemoryMiB)
	}
	return nil
}

// Reserve admits a VM that is not a running sandbox (a bake or build VM, a sandbox waking) and
// counts it until release (bake.VMs).
func (m *Manager) Reserve(what string, memMiB int) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.admitLocked(what, memMiB); err != nil {
		return nil, err
	}
	m.reservedMiB += memMiB
	done := false
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !done {
			m.reservedMiB -= memMiB
			done = true
		}
	}, nil
}

// MemAvailableMiB is the memory VMs can still use: the host's MemAvailable, or less when the
// VMMs' cgroup (or one above it, e.g. the agent's own) has a smaller limit.
func (m *Manager) MemAvailableMiB() int {
	_, avail := memInfoMiB()
	if m.cg != nil {
		if limit, used, err := m.cg.Memory(); err == nil && limit > 0 {
			avail = min(avail, int((limit-used)>>20))
		}
	}
	return avail
}

// pressureLoop hibernates the idlest sandboxes whenever available memory is below the watermark.
func (m *Manager) pressureLoop(ctx context.Context) {
	periodic.Every(ctx, m.cfg.PressureInterval, func() { m.relieve(ctx) })
}

// relieve hibernates sandboxes, idlest first, until available memory is above the watermark. It
// reports whether it is. Sandboxes with no call in flight go first (least recently used first);
// then, rather than let the host run out of memory, busy ones (their calls end with a conflict;
// the sandbox wakes on its next call).
func (m *Manager) relieve(ctx context.Context) bool {
	if m.cfg.MemoryWatermarkMiB < 0 {
		return true
	}
	m.pressureMu.Lock()
	defer m.pressureMu.Unlock()
	tried := map[string]bool{}
	for {
		avail := m.MemAvailableMiB()
		if avail >= m.cfg.MemoryWatermarkMiB {
			return true
		}
		id, idle, busy := m.idlest(tried)
		if id == "" {
			m.log.Error("memory below the watermark and no sandbox left to hibernate", "available_mib", avail, "watermark_mib", m.cfg.MemoryWatermarkMiB)
			return false
		}
		tried[id] = true
		if _, err := m.hibernate(ctx, id, false); err != nil {
			m.log.Warn("memory pressure: hibernation failed", "sandbox", id, "err", err)
			continue
		}
		m.log.Warn("memory pressure: hibernated the idlest sandbox", "sandbox", id, "available_mib", avail,
			"watermark_mib", m.cfg.MemoryWatermarkMiB, "idle", idle.Round(time.Millisecond), "busy", busy)
	}
}

// idlest is the running sandbox to hibernate first (not among skip): no call in flight before
// any with one, then the longest untouched.
func (m *Manager) idlest(skip map[string]bool) (id string, idle time.Duration, busy bool) {
	type cand struct {
		id       string
		busy     bool
		lastUsed time.Time
	}
	var cands []cand
	m.mu.Lock()
	for sid, sb := range m.sandboxes {
		sb.mu.Lock()
		if sb.rec.State == StateRunning && !skip[sid] {
			cands = append(cands, cand{sid, sb.busy > 0, sb.lastUsed})
		}
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	if len(cands) == 0 {
		return "", 0, false
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].busy != cands[j].busy {
			return !cands[i].busy
		}
		return cands[i].lastUsed.Before(cands[j].lastUsed)
	})
	return cands[0].id, time.Since(cands[0].lastUsed), cands[0].busy
}

// RelieveForCreate makes sure a new VM (sandbox, bake or build VM) starts above the watermark:
// refused (`capacity`) only if hibernating sandboxes could not get there (bake.VMs).
func (m *Manager) RelieveForCreate(ctx context.Context, what string) error {
	if m.relieve(ctx) {
		return nil
	}
	return errdefs.Capacityf("%s: this host is low on memory (%d MiB available, watermark %d MiB) and has no sandbox left to hibernate",
		what, m.MemAvailableMiB(), m.cfg.MemoryWatermarkMiB)
}

// memInfoMiB reads MemTotal and MemAvailable.
func memInfoMiB() (total, avail int) {
	data, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "MemTotal:":
			total = kb / 1024
		case "MemAvailable:":
			avail = kb / 1024
		}
	}
	return
}

// admitWake admits a hibernated sandbox's memory back under the commit limit. Past the limit it
// hibernates the idlest other sandboxes with no call in flight (a sandbox that is used again
// takes the place of one that is not); with none left the wake is refused (`capacity`), and the
// sandbox stays hibernated.
func (m *Manager) admitWake(ctx context.Context, id string, memMiB int) (release func(), err error) {
	skip := map[string]bool{id: true}
	for {
		release, err := m.Reserve("waking sandbox "+id, memMiB)
		if err == nil {
			return release, nil
		}
		victim, _, busy := m.idlest(skip)
		if victim == "" || busy {
			return nil, err
		}
		skip[victim] = true
		if _, herr := m.hibernate(ctx, victim, false); herr != nil {
			m.log.Warn("hibernation to make room for a wake failed", "sandbox", victim, "err", herr)
			continue
		}
		m.log.Info("hibernated the idlest sandbox to make room for a wake", "sandbox", victim, "woken", id)
	}
}
