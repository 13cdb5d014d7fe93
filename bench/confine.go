package main

import (
	"context"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// confineSuite: create p50 with every VMM confined (jail, own uid, cgroup: the main agent) vs
// unconfined (a second agent with its own data dir), interleaved so both see the same load.
func (b *bench) confineSuite(ctx context.Context, res map[string]float64, creates int) error {
	open, err := b.sideAgent(ctx, "unconfined", func(c *hostagent.Config) { c.Unconfined = true })
	if err != nil {
		return err
	}
	defer open.Close()
	base := hostagent.CreateRequest{Template: "base"}
	lat, err := interleaved(creates, createOn(ctx, b.agent, base), createOn(ctx, open, base))
	if err != nil {
		return err
	}
	on, off := lat[0], lat[1]
	res["create_confined_p50_ms"], res["create_confined_p99_ms"] = pct(on, 50), pct(on, 99)
	res["create_unconfined_p50_ms"], res["create_unconfined_p99_ms"] = pct(off, 50), pct(off, 99)
	res["create_confined_over_unconfined"] = res["create_confined_p50_ms"] / res["create_unconfined_p50_ms"]
	return nil
}
