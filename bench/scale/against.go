package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// RunAgainst runs the phases twice in one go, first with base hosts and then with c.Hosts (each
// fleet's slots from -live, so both have the same room in all), and prints
// each phase's creates/s with c.Hosts as a ratio of the base run's: does a create cost more in a
// larger fleet? The base run's figures are keyed scale_h<base>_…, the ratios
// scale_ratio_<phase>_creates_per_s.
func RunAgainst(ctx context.Context, c Config, base int) (map[string]float64, error) {
	if c.Bin == "" && !c.InProcess { // build once for both runs
		dir, err := os.MkdirTemp("", "pandastack-scale-bin-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if c.Bin, err = buildBinary(ctx, dir); err != nil {
			return nil, err
		}
	}
	small := c
	small.Hosts = base
	small.Slots = 0
	smallRep, err := Run(ctx, small)
	if err != nil {
		return nil, fmt.Errorf("run with %d hosts: %w", base, err)
	}
	rep, err := Run(ctx, c)
	if err != nil {
		return nil, err
	}
	figures := rep.Figures
	prefix := fmt.Sprintf("scale_h%d_", base)
	for k, v := range smallRep.Figures {
		figures[prefix+strings.TrimPrefix(k, "scale_")] = v
	}
	out := c.Out
	if out == nil {
		out = os.Stdout
	}
	fmt.Fprintf(out, "\n== %d hosts against %d (same run)\n", c.Hosts, base)
	phases := slices.Clone(c.Phases)
	if len(phases) == 0 {
		phases = AllPhases
	}
	for _, p := range phases {
		key := "scale_" + p + "_creates_per_s"
		b, ok := smallRep.Figures[key]
		if !ok || b <= 0 {
			continue
		}
		r := figures[key] / b
		figures["scale_ratio_"+p+"_creates_per_s"] = r
		fmt.Fprintf(out, "  %-13s %7.1f vs %7.1f creates/s = %.2fx   server CPU-ms/create %.2f vs %.2f   create p99 %.0f vs %.0f ms\n",
			p, figures[key], b, r, figures["scale_"+p+"_server_cpu_ms_per_create"], smallRep.Figures["scale_"+p+"_server_cpu_ms_per_create"],
			figures["scale_"+p+"_create_p99_ms"], smallRep.Figures["scale_"+p+"_create_p99_ms"])
	}
	return figures, nil
}
