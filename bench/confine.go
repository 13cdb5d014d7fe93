package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// confineSuite: create p50 with every VMM confined (jail, own uid, cgroup: the main agent) vs
// unconfined (a second agent with its own data dir), interleaved so both see the same load.
func (b *bench) confineSuite(ctx context.Context, res map[string]float64, dataDir, guestAgent, imageCache string, creates int) error {
	abs, err := filepath.Abs(guestAgent)
	if err != nil {
		return err
	}
	open, err := hostagent.New(ctx, hostagent.Config{DataDir: filepath.Join(dataDir, "unconfined"), GuestAgent: abs,
		ImageCacheDir: imageCache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Unconfined: true})
	if err != nil {
		return err
	}
	defer open.Close()
	if _, err := open.EnsureTemplate(ctx, "base", func(s string) { fmt.Println("  " + s) }); err != nil {
		return err
	}
	timed := func(a *hostagent.Agent) (float64, error) {
		t := time.Now()
		info, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		return d, a.Kill(info.ID)
	}
	var on, off []float64
	for range creates {
		for _, c := range []struct {
			a    *hostagent.Agent
			into *[]float64
		}{{b.agent, &on}, {open, &off}} {
			d, err := timed(c.a)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, d)
		}
	}
	res["create_confined_p50_ms"], res["create_confined_p99_ms"] = pct(on, 50), pct(on, 99)
	res["create_unconfined_p50_ms"], res["create_unconfined_p99_ms"] = pct(off, 50), pct(off, 99)
	res["create_confined_over_unconfined"] = res["create_confined_p50_ms"] / res["create_unconfined_p50_ms"]
	return nil
}
