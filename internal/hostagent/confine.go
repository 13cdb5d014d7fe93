package hostagent

import (
	"fmt"
	goruntime "runtime"
	"strings"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/runtime/qemu"
)

// confine turns on the driver's confinement (docs/security.md): jails, a uid per sandbox, and a
// cgroup per VMM under pandastack/<this agent> in the agent's own cgroup.
func (a *Agent) confine(drv *qemu.Driver) error {
	defaults.Positive(&a.cfg.JailUIDBase, 100000)
	if a.cfg.JailUIDs <= 1 {
		a.cfg.JailUIDs = 10000
	}
	defaults.Positive(&a.cfg.VMMOverheadMiB, 512)
	cg, err := cgroup.Open("pandastack/" + layout.ShortHash(a.cfg.DataDir))
	if err != nil {
		return err
	}
	// An operator-set host memory is enforced on all VMMs together (unset: no limit of our own).
	var limit int64
	if a.cfg.HostMemoryMiB > 0 && a.hostMemorySet {
		limit = int64(a.cfg.HostMemoryMiB) << 20
	}
	if err := cg.SetMemoryLimit(limit); err != nil {
		// E.g. VMMs re-adopted from an earlier run already use more: admission and the
		// pressure path still go by HostMemoryMiB.
		a.log.Warn("cannot set the VMMs' memory limit", "host_memory_mib", a.cfg.HostMemoryMiB, "err", err)
	}
	// All VMMs together weigh as many processes as the host has CPUs (they can use them all):
	// with the kernel's default they would weigh one, and a create would lose its CPU to any
	// other busy process on a loaded host.
	weight := a.cfg.VMMCPUWeight
	if weight == 0 {
		weight = goruntime.NumCPU()
	}
	if err := cg.SetCPUWeight(weight); err != nil {
		a.log.Warn("cannot set the VMMs' CPU weight", "cpus", weight, "err", err)
	}
	drv.Confine(&qemu.Confinement{GID: a.cfg.JailUIDBase, DefaultUID: a.cfg.JailUIDBase, JailRoot: "/run/pandastack/jail-root",
		Cgroups: cg, MemoryOverheadMiB: a.cfg.VMMOverheadMiB, PidsMax: 256})
	a.confined, a.cg = true, cg
	a.log.Info("VMMs confined", "uids", fmt.Sprintf("%d-%d", a.cfg.JailUIDBase, a.cfg.JailUIDBase+a.cfg.JailUIDs-1), "cgroup", cg.Version(),
		"cgroups", strings.Join(cg.Dirs(), ","))
	return nil
}
