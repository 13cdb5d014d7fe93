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

// sample is one measured operation: its latency in ms (what it does after the measured part, a
// kill say, is not counted).
type sample func() (float64, error)

// interleaved runs every sample once per round, rounds times, so that all of them see the same
// machine load; it returns each sample's latencies, in the order given.
func interleaved(rounds int, ops ...sample) ([][]float64, error) {
	out := make([][]float64, len(ops))
	for range samples(rounds) {
		for i, s := range ops {
			d, err := s()
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], d)
		}
	}
	return out, nil
}

// timed measures op.
func timed(op func() error) sample {
	return func() (float64, error) {
		t := time.Now()
		if err := op(); err != nil {
			return 0, err
		}
		return ms(time.Since(t)), nil
	}
}

// createOn measures a create sent to agent a directly, then kills the sandbox.
func createOn(ctx context.Context, a *hostagent.Agent, req hostagent.CreateRequest) sample {
	return func() (float64, error) {
		t := time.Now()
		info, err := a.Create(ctx, req)
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		return d, settle(ctx, a, req.Template, a.Kill(info.ID))
	}
}

// settle waits, after a create of template on a was measured and its sandbox killed (err), for
// the VMM a prepares for the next create: the preparation is off the create's path, and is kept
// out of the next measurement too.
func settle(ctx context.Context, a *hostagent.Agent, template string, err error) error {
	if err != nil || template == "" {
		return err
	}
	return a.WaitPrepared(ctx, template)
}

// createViaAPI measures a create of template through the main agent's HTTP API, then kills the
// sandbox.
func (b *bench) createViaAPI(template string) sample {
	return func() (float64, error) {
		d, id, err := b.create(template)
		if err != nil {
			return 0, err
		}
		b.agent.Kill(id)
		return d, settle(context.Background(), b.agent, template, nil)
	}
}

// progress prints a bake's progress lines.
func progress(s string) { fmt.Println("  " + s) }

// agentConfig is what every agent of the bench starts from: data dir, guest agent, image cache,
// no log, VMMs prepared as the agent command's default.
func (b *bench) agentConfig(dataDir string) hostagent.Config {
	return hostagent.Config{DataDir: dataDir, GuestAgent: b.guestAgent, ImageCacheDir: b.imageCache,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PreparedTemplates: hostagent.DefaultPreparedTemplates,
		DiskReserveMiB: diskReserveMiB}
}

// newAgent starts an extra agent in its own data dir (name, under the bench's), configured by set,
// with nothing baked. The caller closes it.
func (b *bench) newAgent(name string, set func(*hostagent.Config)) (*hostagent.Agent, error) {
	cfg := b.agentConfig(filepath.Join(b.dataDir, name))
	set(&cfg)
	return hostagent.New(context.Background(), cfg)
}

// sideAgent starts an extra agent for one suite, in its own data dir (name, under the bench's)
// and configured by set, with base baked. The caller closes it.
func (b *bench) sideAgent(ctx context.Context, name string, set func(*hostagent.Config)) (*hostagent.Agent, error) {
	a, err := b.newAgent(name, set)
	if err != nil {
		return nil, err
	}
	if _, err := a.EnsureTemplate(ctx, "base", progress); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// pssMiB is the PSS of each sandbox's VMM.
func (b *bench) pssMiB(ids []string) ([]float64, error) {
	var out []float64
	for _, id := range ids {
		info, err := b.agent.Get(id)
		if err != nil {
			return nil, err
		}
		kb, err := pssKB(info.PID)
		if err != nil {
			return nil, err
		}
		out = append(out, kb/1024)
	}
	return out, nil
}
