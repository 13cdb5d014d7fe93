package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// minimalRestore is the minimal restore of base on this machine (minimal.go), set up on first
// use and shared by the suites that compare against it.
func (b *bench) minimalRestore(ctx context.Context) (sample, error) {
	if b.minimal == nil {
		tmpl, err := b.agent.EnsureTemplate(ctx, "base", nil)
		if err != nil {
			return nil, err
		}
		// In the agent's pool (next to its templates dir), where disk clones are reflinks.
		if b.minimal, err = newMinimal(ctx, tmpl, filepath.Join(filepath.Dir(filepath.Dir(tmpl.Dir)), "bench-minimal")); err != nil {
			return nil, err
		}
	}
	return func() (float64, error) { return b.minimal.restore(ctx) }, nil
}

// restoreSuite: a create through the HTTP API against the minimal restore of the same template
// on this machine, and each step of a create (the sandbox manager's timing marks, medians over
// the creates), all interleaved.
func (b *bench) restoreSuite(ctx context.Context, res map[string]float64, creates int) error {
	floor, err := b.minimalRestore(ctx)
	if err != nil {
		return err
	}
	var steps, floorSteps stepSamples
	tracedFloor := floorSteps.traced(ctx, func(ctx context.Context) (func() error, error) {
		_, err := b.minimal.restore(ctx)
		return func() error { return nil }, err
	})
	lat, err := interleaved(creates, b.createViaAPI("base"), steps.create(ctx, b.agent), floor, tracedFloor)
	if err != nil {
		return err
	}
	res["restore_create_p50_ms"], res["restore_traced_create_p50_ms"] = pct(lat[0], 50), pct(lat[1], 50)
	res["minimal_restore_p50_ms"], res["minimal_restore_p99_ms"] = pct(lat[2], 50), pct(lat[2], 99)
	res["create_over_minimal_restore"] = res["restore_create_p50_ms"] / res["minimal_restore_p50_ms"]
	fmt.Printf("\ncreate steps (agent-level create, p50 over %d):\n", len(lat[1]))
	for _, name := range steps.order {
		xs := steps.ms[name]
		res["step_"+name+"_p50_ms"] = pct(xs, 50)
		fmt.Printf("  %-18s %7.2f ms  (p90 %.2f)\n", name, pct(xs, 50), pct(xs, 90))
	}
	fmt.Printf("minimal restore steps (p50 over %d): ", len(lat[3]))
	for _, name := range floorSteps.order {
		fmt.Printf("%s %.2f  ", name, floorSteps.p50(name))
	}
	fmt.Println()
	fmt.Printf("create via API %.1f ms, minimal restore %.1f ms: create / minimal_restore = %.2f\n",
		res["restore_create_p50_ms"], res["minimal_restore_p50_ms"], res["create_over_minimal_restore"])
	return nil
}

// stepMeans reads a host agent's /metrics text and returns the mean of each create step.
func stepMeans(metrics string) map[string]float64 {
	return stepMeansSince(stepTotals{}, parseStepTotals(metrics, "create"))
}

// stepTotals are the sums (seconds) and counts of each create step in a host agent's /metrics.
type stepTotals struct{ sums, counts map[string]float64 }

func parseStepTotals(metrics, op string) stepTotals {
	t := stepTotals{map[string]float64{}, map[string]float64{}}
	for _, line := range strings.Split(metrics, "\n") {
		name, rest, ok := strings.Cut(line, `{op="`+op+`",step="`)
		if !ok {
			continue
		}
		step, val, ok := strings.Cut(rest, `"} `)
		var v float64
		if _, err := fmt.Sscan(val, &v); !ok || err != nil {
			continue
		}
		switch name {
		case "pandastack_host_sandbox_step_seconds_sum":
			t.sums[step] = v
		case "pandastack_host_sandbox_step_seconds_count":
			t.counts[step] = v
		}
	}
	return t
}

// stepMeansSince is the mean (ms) of each step over the operations between before and after.
func stepMeansSince(before, after stepTotals) map[string]float64 {
	out := map[string]float64{}
	for s, n := range after.counts {
		if n -= before.counts[s]; n > 0 {
			out[s] = (after.sums[s] - before.sums[s]) / n * 1000
		}
	}
	return out
}

// printStepMeans prints stepMeans in name order.
func printStepMeans(title string, means map[string]float64) {
	names := make([]string, 0, len(means))
	for n := range means {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Println(title)
	for _, n := range names {
		fmt.Printf("  %-18s %7.2f ms\n", n, means[n])
	}
}
