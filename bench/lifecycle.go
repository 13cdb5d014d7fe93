package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// lifecycleSuite: fork vs create, snapshot cost by dirtied memory (diff vs full path), hibernate
// and wake, and the memory children of one parent share.
func (b *bench) lifecycleSuite(ctx context.Context, res map[string]float64) error {
	a := b.agent
	parent, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		return err
	}
	defer a.Kill(parent.ID)
	fork := func() (float64, error) {
		t := time.Now()
		kids, err := a.Fork(ctx, parent.ID, 1)
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		a.Kill(kids[0].ID)
		return d, nil
	}
	lat, err := interleaved(20, fork, b.createViaAPI("base"))
	if err != nil {
		return err
	}
	forks, creates := lat[0], lat[1]
	res["fork_p50_ms"], res["fork_p99_ms"], res["fork_create_p50_ms"] = pct(forks, 50), pct(forks, 99), pct(creates, 50)
	res["fork_over_create"] = res["fork_p50_ms"] / res["fork_create_p50_ms"]

	// Snapshot pause of a 1 GiB guest that dirtied 16 MiB vs 256 MiB: diff vs full path.
	for _, mib := range []int{16, 256} {
		sb, err := a.Create(ctx, hostagent.CreateRequest{Template: "bench-1g"})
		if err != nil {
			return err
		}
		if err := b.post("/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": fmt.Sprintf("head -c %dM /dev/zero > /dev/shm/fill", mib), "user": "root"}, 200); err != nil {
			return err
		}
		for _, full := range []bool{false, true} {
			var pauses []float64
			for range samples(3) {
				snap := a.SnapshotSandbox
				if full {
					snap = a.SnapshotSandboxFull
				}
				s, err := snap(ctx, sb.ID)
				if err != nil {
					return err
				}
				pauses = append(pauses, s.PauseMS)
				a.DeleteSnapshot(s.ID)
			}
			path := "diff"
			if full {
				path = "full"
			}
			res[fmt.Sprintf("snapshot_%s_1g_dirty%dm_pause_ms", path, mib)] = pct(pauses, 50)
		}
		a.Kill(sb.ID)
	}
	res["snapshot_full_over_diff_dirty16m"] = res["snapshot_full_1g_dirty16m_pause_ms"] / res["snapshot_diff_1g_dirty16m_pause_ms"]

	// Hibernate and wake.
	lat, err = interleaved(10,
		timed(func() error { _, err := a.Hibernate(ctx, parent.ID); return err }),
		timed(func() error { _, err := a.Wake(ctx, parent.ID); return err }))
	if err != nil {
		return err
	}
	hib, wake := lat[0], lat[1]
	res["hibernate_p50_ms"], res["wake_p50_ms"] = pct(hib, 50), pct(wake, 50)

	// Host memory: 8 children of one parent that holds 64 MiB vs 8 sandboxes that each wrote it.
	const fill = "head -c 64M /dev/zero > /dev/shm/state"
	if err := b.post("/v1/sandboxes/"+parent.ID+"/exec", map[string]any{"cmd": fill, "user": "root"}, 200); err != nil {
		return err
	}
	n := samples(8)
	kids, err := a.Fork(ctx, parent.ID, n)
	if err != nil {
		return err
	}
	var solo []string
	for range n {
		_, id, err := b.create("base")
		if err != nil {
			return err
		}
		if err := b.post("/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": fill, "user": "root"}, 200); err != nil {
			return err
		}
		solo = append(solo, id)
	}
	time.Sleep(3 * time.Second)
	var kidIDs []string
	for _, k := range kids {
		kidIDs = append(kidIDs, k.ID)
	}
	res["pss_8_forks_mib"], err = b.sumPSS(kidIDs)
	if err != nil {
		return err
	}
	res["pss_8_independent_mib"], err = b.sumPSS(solo)
	if err != nil {
		return err
	}
	res["pss_forks_over_independent"] = res["pss_8_forks_mib"] / res["pss_8_independent_mib"]
	for _, id := range append(kidIDs, solo...) {
		a.Kill(id)
	}
	return nil
}

func (b *bench) sumPSS(ids []string) (float64, error) {
	pss, err := b.pssMiB(ids)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, p := range pss {
		sum += p
	}
	return sum, nil
}
