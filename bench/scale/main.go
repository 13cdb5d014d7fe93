package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/pandastack/pandastack/bench/results"
)

func main() {
	var c Config
	out := flag.String("out", "bench/results.json", "results file (merged; empty: do not write)")
	phases := flag.String("phases", strings.Join(AllPhases, ","), "comma-separated phases, in order")
	flag.IntVar(&c.Hosts, "hosts", 1000, "fake host agents")
	flag.IntVar(&c.Live, "live", 100_000, "live sandboxes the fill reaches and the churn keeps")
	flag.IntVar(&c.Slots, "slots", 0, "slots per host (default: live × 1.5 / hosts)")
	flag.DurationVar(&c.Phase, "phase", 0, "length of each timed phase (default 1m; peaks take a third)")
	flag.DurationVar(&c.FillMax, "fill-max", 0, "the fill stops after this even short of -live (default 8m)")
	flag.IntVar(&c.Clients, "clients", 64, "closed-loop clients (fill, peaks)")
	flag.Float64Var(&c.Rate, "rate", 0, "churn creates/s (default: 70% of the fill's rate)")
	flag.DurationVar(&c.CreateDelay, "create-delay", 0, "how long each host's create takes (default 150ms, near a real restore)")
	flag.DurationVar(&c.Heartbeat, "heartbeat", 0, "agents' heartbeat interval (default 5s)")
	flag.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", 0, "the servers' --heartbeat-timeout (default 15s)")
	flag.IntVar(&c.HostsKilled, "hosts-killed", 0, "hosts taken away in the hosts-down phase (default 10)")
	flag.BoolVar(&c.InProcess, "in-process", false, "run the servers inside this process (their CPU then includes the fleet and the load)")
	flag.StringVar(&c.Logs, "logs", "", "directory to keep the servers' logs in (default: removed at the end)")
	flag.StringVar(&c.Bin, "bin", "", "pandastack binary for the servers (default: built from this tree)")
	against := flag.Int("against", 0, "first run the same phases with this many hosts, then print each phase's creates/s at -hosts as a ratio of it")
	flag.Parse()
	c.Phases = strings.Split(*phases, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var figures map[string]float64
	var err error
	if *against > 0 {
		figures, err = RunAgainst(ctx, c, *against)
	} else {
		var rep *Report
		if rep, err = Run(ctx, c); err == nil {
			figures = rep.Figures
		}
	}
	if err == nil && *out != "" {
		err = results.Merge(*out, figures)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}
