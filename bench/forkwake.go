package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// forkWakeSuite: a create, a fork (one child of a running parent) and a wake (of a sandbox
// hibernated before each round, not timed) of base on the main agent, interleaved: fork / create
// and wake / create, with each op's steps (means from the agent's step histograms over this
// suite). Then 8 clients create and kill sandboxes through the agent's HTTP API at once: the rate
// against cores / create p50 (the rate if creates used the cores fully), and the create steps
// under that concurrency (a step that grows far more than the CPU-bound ones serialises).
func (b *bench) forkWakeSuite(ctx context.Context, res map[string]float64, rounds int) error {
	a := b.agent
	ops, done, err := forkWakeOps(ctx, a)
	if err != nil {
		return err
	}
	defer done()
	create, fork, wake := ops[0], ops[1], ops[2]
	before, err := b.metrics()
	if err != nil {
		return err
	}
	lat, err := interleaved(rounds, create.sample, fork.sample, wake.sample)
	if err != nil {
		return err
	}
	after, err := b.metrics()
	if err != nil {
		return err
	}
	res["fw_create_p50_ms"], res["fw_fork_p50_ms"], res["fw_wake_p50_ms"] = pct(lat[0], 50), pct(lat[1], 50), pct(lat[2], 50)
	res["fw_create_p99_ms"], res["fw_fork_p99_ms"], res["fw_wake_p99_ms"] = pct(lat[0], 99), pct(lat[1], 99), pct(lat[2], 99)
	res["fw_fork_over_create"] = res["fw_fork_p50_ms"] / res["fw_create_p50_ms"]
	res["fw_wake_over_create"] = res["fw_wake_p50_ms"] / res["fw_create_p50_ms"]
	fmt.Printf("\ncreate %.1f, fork %.1f, wake %.1f ms (p50 over %d): fork / create %.2f, wake / create %.2f\n",
		res["fw_create_p50_ms"], res["fw_fork_p50_ms"], res["fw_wake_p50_ms"], len(lat[0]), res["fw_fork_over_create"], res["fw_wake_over_create"])
	fmt.Printf("p99: create %.1f, fork %.1f, wake %.1f ms\n", res["fw_create_p99_ms"], res["fw_fork_p99_ms"], res["fw_wake_p99_ms"])
	printStepTable([]string{"create", "fork", "fork_snapshot", "wake"}, before, after)
	for _, op := range ops {
		res["fw_"+op.name+"_major_faults"] = pct(op.faults, 50)
	}
	fmt.Printf("VMM major page faults when ready (p50): create %.0f, fork child %.0f, woken %.0f\n",
		res["fw_create_major_faults"], res["fw_fork_major_faults"], res["fw_wake_major_faults"])

	// 8 clients through the HTTP API, each creating and killing sandboxes.
	serial := res["fw_create_p50_ms"]
	clients, each := 8, samples(max(rounds/4, 2))
	if before, err = b.metrics(); err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() {
			for range each {
				_, id, err := b.create("base")
				if err != nil {
					errs[i] = err
					return
				}
				b.agent.Kill(id)
			}
		})
	}
	wg.Wait()
	rate := float64(clients*each) / time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if after, err = b.metrics(); err != nil {
		return err
	}
	ideal := float64(runtime.NumCPU()) / (serial / 1000)
	res["fw_creates_per_s_8_clients"], res["fw_creates_per_s_ideal"] = rate, ideal
	res["fw_creates_per_s_8_clients_over_ideal"] = rate / ideal
	fmt.Printf("8 clients: %.2f creates/s; cores / create p50 = %d / %.1f ms = %.2f/s: ratio %.2f (goal >= 0.8)\n",
		rate, runtime.NumCPU(), serial, ideal, rate/ideal)
	printStepTable([]string{"create"}, before, after)
	return nil
}

// faultedOp is a measured op that also keeps the major page faults of the VMM it started.
type faultedOp struct {
	name   string
	sample sample
	faults []float64
}

// forkWakeOps are a create, a fork (of a parent made here) and a wake (of a sandbox made here,
// hibernated before each wake, not timed, and its wake's VMM prepared) on a, each keeping its VMM's major faults when ready;
// done kills the parent and the sleeper.
func forkWakeOps(ctx context.Context, a *hostagent.Agent) (ops []*faultedOp, done func(), err error) {
	parent, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		return nil, nil, err
	}
	sleeper, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		a.Kill(parent.ID)
		return nil, nil, err
	}
	done = func() { a.Kill(parent.ID); a.Kill(sleeper.ID) }
	op := func(name string, prepare func() error, start func() (pid int, kill func() error, err error)) *faultedOp {
		o := &faultedOp{name: name}
		o.sample = func() (float64, error) {
			if prepare != nil {
				if err := prepare(); err != nil {
					return 0, err
				}
			}
			t := time.Now()
			pid, kill, err := start()
			if err != nil {
				return 0, err
			}
			d := ms(time.Since(t))
			if n, err := majorFaults(pid); err == nil {
				o.faults = append(o.faults, n)
			}
			return d, kill()
		}
		return o
	}
	ops = []*faultedOp{
		op("create", nil, func() (int, func() error, error) {
			info, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
			return info.PID, func() error { return settle(ctx, a, "base", a.Kill(info.ID)) }, err
		}),
		op("fork", nil, func() (int, func() error, error) {
			kids, err := a.Fork(ctx, parent.ID, 1)
			if err != nil {
				return 0, nil, err
			}
			// Then wait for the VMM prepared for the parent's next fork, as a create's.
			return kids[0].PID, func() error {
				if err := a.Kill(kids[0].ID); err != nil {
					return err
				}
				return a.WaitForkPrepared(ctx, parent.ID)
			}, nil
		}),
		op("wake", func() error {
			if _, err := a.Hibernate(ctx, sleeper.ID); err != nil {
				return err
			}
			return a.WaitWakePrepared(ctx, sleeper.ID) // as a create's, out of the measurement
		}, func() (int, func() error, error) {
			info, err := a.Wake(ctx, sleeper.ID)
			return info.PID, func() error { return nil }, err
		}),
	}
	return ops, done, nil
}

// forkWakeColdSuite: fork and wake on the main agent against a side agent whose snapshots copy
// only the pages the guest wrote (hostagent.Config.ColdSnapshots: as before issue 31's warm
// copies), interleaved, with creates on the main agent for the ratios.
func (b *bench) forkWakeColdSuite(ctx context.Context, res map[string]float64, rounds int) error {
	side, err := b.sideAgent(ctx, "cold-snapshots", func(c *hostagent.Config) { c.ColdSnapshots = true })
	if err != nil {
		return err
	}
	defer side.Close()
	warm, doneWarm, err := forkWakeOps(ctx, b.agent)
	if err != nil {
		return err
	}
	defer doneWarm()
	cold, doneCold, err := forkWakeOps(ctx, side)
	if err != nil {
		return err
	}
	defer doneCold()
	all := []*faultedOp{warm[0], warm[1], cold[1], warm[2], cold[2]}
	names := []string{"create", "fork", "cold_fork", "wake", "cold_wake"}
	var ss []sample
	for _, o := range all {
		ss = append(ss, o.sample)
	}
	lat, err := interleaved(rounds, ss...)
	if err != nil {
		return err
	}
	for i, n := range names {
		res["fwc_"+n+"_p50_ms"], res["fwc_"+n+"_major_faults"] = pct(lat[i], 50), pct(all[i].faults, 50)
	}
	c := res["fwc_create_p50_ms"]
	for _, n := range []string{"fork", "cold_fork", "wake", "cold_wake"} {
		res["fwc_"+n+"_over_create"] = res["fwc_"+n+"_p50_ms"] / c
	}
	fmt.Printf("\ncreate %.1f ms; fork warm %.1f / cold %.1f ms (over create %.2f / %.2f); wake warm %.1f / cold %.1f ms (over create %.2f / %.2f); p50 over %d\n",
		c, res["fwc_fork_p50_ms"], res["fwc_cold_fork_p50_ms"], res["fwc_fork_over_create"], res["fwc_cold_fork_over_create"],
		res["fwc_wake_p50_ms"], res["fwc_cold_wake_p50_ms"], res["fwc_wake_over_create"], res["fwc_cold_wake_over_create"], len(lat[0]))
	fmt.Printf("VMM major faults when ready (p50): create %.0f, fork warm %.0f / cold %.0f, wake warm %.0f / cold %.0f\n",
		res["fwc_create_major_faults"], res["fwc_fork_major_faults"], res["fwc_cold_fork_major_faults"], res["fwc_wake_major_faults"], res["fwc_cold_wake_major_faults"])
	return nil
}

// metrics is the main agent's /metrics text.
func (b *bench) metrics() (string, error) {
	resp, err := http.Get(b.url + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return string(data), err
}

// printStepTable prints, for each op, the mean of every step over what happened between two
// readings of the agent's /metrics.
func printStepTable(ops []string, before, after string) {
	cols := make([]map[string]float64, len(ops))
	names := map[string]bool{}
	for i, op := range ops {
		cols[i] = stepMeansSince(parseStepTotals(before, op), parseStepTotals(after, op))
		for k := range cols[i] {
			names[k] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	fmt.Printf("%-18s", "step (mean ms)")
	for _, op := range ops {
		fmt.Printf(" %14s", op)
	}
	fmt.Println()
	for _, k := range sorted {
		fmt.Printf("%-18s", k)
		for _, c := range cols {
			if v, ok := c[k]; ok {
				fmt.Printf(" %14.2f", v)
			} else {
				fmt.Printf(" %14s", "-")
			}
		}
		fmt.Println()
	}
}

// majorFaults is a process's major page faults so far (/proc/<pid>/stat field 12).
func majorFaults(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	_, rest, _ := strings.Cut(string(data), ") ") // after the command name, which may hold spaces
	f := strings.Fields(rest)
	if len(f) < 10 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return strconv.ParseFloat(f[9], 64)
}
