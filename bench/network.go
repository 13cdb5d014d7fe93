package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network"
)

// networkSuite: create p50 of the same template with a NIC (slot from the ready pool), with a NIC
// whose slot is made on the create path (no ready pool), and without a NIC (the main agent),
// interleaved so all three see the same load. Two extra agents, each with its own data dir and
// slot pool, live only for this suite.
func (b *bench) networkSuite(ctx context.Context, res map[string]float64, dataDir, guestAgent, imageCache string, creates int) error {
	abs, err := filepath.Abs(guestAgent)
	if err != nil {
		return err
	}
	agent := func(name string, ready int, cidr string) (*hostagent.Agent, error) {
		return hostagent.New(ctx, hostagent.Config{
			DataDir: filepath.Join(dataDir, name), GuestAgent: abs, ImageCacheDir: imageCache,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Network: &network.Config{CIDR: netip.MustParsePrefix(cidr), Ready: ready, Prefix: "pb" + name[len(name)-1:],
				DNS: netip.MustParseAddr("198.18.255.53")},
		})
	}
	pooled, err := agent("net-a", 8, "10.198.0.0/20")
	if err != nil {
		return err
	}
	defer pooled.Close()
	onDemand, err := agent("net-b", -1, "10.198.16.0/20")
	if err != nil {
		return err
	}
	defer onDemand.Close()
	for _, a := range []*hostagent.Agent{pooled, onDemand} {
		if _, err := a.EnsureTemplate(ctx, "base", func(s string) { fmt.Println("  " + s) }); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // let the ready pool fill
	timed := func(a *hostagent.Agent) (float64, error) {
		t := time.Now()
		info, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		return d, a.Kill(info.ID)
	}
	var plain, nic, nicNoPool []float64
	for range creates {
		for _, c := range []struct {
			a    *hostagent.Agent
			into *[]float64
		}{{b.agent, &plain}, {pooled, &nic}, {onDemand, &nicNoPool}} {
			d, err := timed(c.a)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, d)
		}
	}
	res["create_no_nic_p50_ms"] = pct(plain, 50)
	res["create_nic_p50_ms"], res["create_nic_p99_ms"] = pct(nic, 50), pct(nic, 99)
	res["create_nic_no_ready_slots_p50_ms"] = pct(nicNoPool, 50)
	res["create_nic_over_no_nic"] = res["create_nic_p50_ms"] / res["create_no_nic_p50_ms"]
	res["create_nic_no_ready_slots_over_no_nic"] = res["create_nic_no_ready_slots_p50_ms"] / res["create_no_nic_p50_ms"]
	return nil
}
