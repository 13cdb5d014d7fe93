package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// backToBackSuite: creates of base one right after the other (each killed before the next, no
// wait for a preparation), in blocks of 5 alternating between the main agent (VMMs prepared)
// and a side agent with none, so the next VMM's preparation runs while the next create does.
func (b *bench) backToBackSuite(ctx context.Context, res map[string]float64, creates int) error {
	side, err := b.sideAgent(ctx, "unprepared", func(c *hostagent.Config) { c.PreparedTemplates = 0 })
	if err != nil {
		return err
	}
	defer side.Close()
	const block = 5
	lat := map[*hostagent.Agent][]float64{}
	for range max(samples(creates)/block, 1) {
		for _, a := range []*hostagent.Agent{b.agent, side} {
			for range min(block, samples(creates)) {
				t := time.Now()
				info, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
				if err != nil {
					return err
				}
				lat[a] = append(lat[a], ms(time.Since(t)))
				if err := a.Kill(info.ID); err != nil {
					return err
				}
			}
		}
	}
	_, used := b.agent.PreparedCounts()
	res["b2b_create_p50_ms"], res["b2b_unprepared_create_p50_ms"] = pct(lat[b.agent], 50), pct(lat[side], 50)
	res["b2b_unprepared_over_prepared"] = res["b2b_unprepared_create_p50_ms"] / res["b2b_create_p50_ms"]
	fmt.Printf("\nback-to-back creates, p50 over %d: prepared %.1f ms (%d creates so far took a prepared VMM), spawning %.1f ms: %.2fx\n",
		len(lat[side]), res["b2b_create_p50_ms"], used, res["b2b_unprepared_create_p50_ms"], res["b2b_unprepared_over_prepared"])
	return nil
}
