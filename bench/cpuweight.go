package main

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/host/layout"
)

// cpuWeightSuite: creates through the API and the minimal restore (an unconfined QEMU, outside
// the VMMs' groups) on a host kept busy by one spinning process per core, with the VMMs' parent
// groups at the kernel's default CPU weight (one process) and at the agent's default (one per
// core, hostagent.Config.VMMCPUWeight), switched before each sample, all interleaved: create /
// minimal_restore under load with either weight. The agent's weight is set back at the end.
func (b *bench) cpuWeightSuite(ctx context.Context, res map[string]float64, rounds int) error {
	cg, err := cgroup.Open("pandastack/" + layout.ShortHash(b.dataDir)) // the main agent's parent group
	if err != nil {
		return err
	}
	cpus := runtime.NumCPU()
	defer cg.SetCPUWeight(cpus)
	floor, err := b.minimalRestore(ctx)
	if err != nil {
		return err
	}
	stop, err := spin(cpus)
	if err != nil {
		return err
	}
	defer stop()
	weighted := func(w int, s sample) sample {
		return func() (float64, error) {
			if err := cg.SetCPUWeight(w); err != nil {
				return 0, err
			}
			return s()
		}
	}
	create := b.createViaAPI("base")
	lat, err := interleaved(rounds, weighted(1, create), weighted(1, floor), weighted(cpus, create), weighted(cpus, floor))
	if err != nil {
		return err
	}
	for i, k := range []string{"one", "cpus"} {
		c, m := pct(lat[2*i], 50), pct(lat[2*i+1], 50)
		res["cpuweight_"+k+"_create_p50_ms"], res["cpuweight_"+k+"_minimal_restore_p50_ms"] = c, m
		res["cpuweight_"+k+"_create_over_minimal_restore"] = c / m
		fmt.Printf("VMM parent weight %-4s: create %.1f ms, minimal restore %.1f ms: create / minimal_restore %.2f (%d busy processes)\n",
			k, c, m, c/m, cpus)
	}
	res["cpuweight_one_over_cpus_create"] = res["cpuweight_one_create_p50_ms"] / res["cpuweight_cpus_create_p50_ms"]
	return nil
}

// spin starts n busy processes (the load of other work on the host); stop ends them.
func spin(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
