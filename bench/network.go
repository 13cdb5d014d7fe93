package main

import (
	"context"
	"net/netip"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network"
)

// networkSuite: create p50 of the same template with a NIC (slot from the ready pool), with a NIC
// whose slot is made on the create path (no ready pool), and without a NIC (the main agent),
// interleaved so all three see the same load. Two extra agents, each with its own data dir and
// slot pool, live only for this suite.
func (b *bench) networkSuite(ctx context.Context, res map[string]float64, creates int) error {
	withNIC := func(name string, ready int, cidr string) (*hostagent.Agent, error) {
		return b.sideAgent(ctx, name, func(c *hostagent.Config) {
			c.Network = &network.Config{CIDR: netip.MustParsePrefix(cidr), Ready: ready, Prefix: "pb" + name[len(name)-1:],
				DNS: netip.MustParseAddr("198.18.255.53")}
		})
	}
	pooled, err := withNIC("net-a", 8, "10.198.0.0/20")
	if err != nil {
		return err
	}
	defer pooled.Close()
	onDemand, err := withNIC("net-b", -1, "10.198.16.0/20")
	if err != nil {
		return err
	}
	defer onDemand.Close()
	time.Sleep(2 * time.Second) // let the ready pool fill
	base := hostagent.CreateRequest{Template: "base"}
	lat, err := interleaved(creates, createOn(ctx, b.agent, base), createOn(ctx, pooled, base), createOn(ctx, onDemand, base))
	if err != nil {
		return err
	}
	plain, nic, nicNoPool := lat[0], lat[1], lat[2]
	res["create_no_nic_p50_ms"] = pct(plain, 50)
	res["create_nic_p50_ms"], res["create_nic_p99_ms"] = pct(nic, 50), pct(nic, 99)
	res["create_nic_no_ready_slots_p50_ms"] = pct(nicNoPool, 50)
	res["create_nic_over_no_nic"] = res["create_nic_p50_ms"] / res["create_no_nic_p50_ms"]
	res["create_nic_no_ready_slots_over_no_nic"] = res["create_nic_no_ready_slots_p50_ms"] / res["create_no_nic_p50_ms"]
	return nil
}
