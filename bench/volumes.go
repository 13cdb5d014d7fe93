package main

import (
	"context"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
)

// volumeSuite: create p50 with a read-write volume mounted vs a plain create of the same template,
// interleaved (the volume path adds the drive refresh and the mount in the guest).
func (b *bench) volumeSuite(ctx context.Context, res map[string]float64, creates int) error {
	a := b.agent
	a.DeleteVolume("vol_bench") // leftover of an interrupted run
	if _, err := a.CreateVolume(ctx, "vol_bench", 1024); err != nil {
		return err
	}
	defer a.DeleteVolume("vol_bench")
	lat, err := interleaved(creates, createOn(ctx, a, hostagent.CreateRequest{Template: "base"}),
		createOn(ctx, a, hostagent.CreateRequest{Template: "base",
			Volumes: []hostagent.VolumeMount{{VolumeID: "vol_bench", MountPath: "/data"}}}))
	if err != nil {
		return err
	}
	plain, withVol := lat[0], lat[1]
	res["create_plain_p50_ms"] = pct(plain, 50)
	res["create_with_volume_p50_ms"], res["create_with_volume_p99_ms"] = pct(withVol, 50), pct(withVol, 99)
	res["create_with_volume_over_plain"] = res["create_with_volume_p50_ms"] / res["create_plain_p50_ms"]
	return b.volumeCopySuite(ctx, res, creates)
}

// volumeCopySuite: a snapshot's pause, and a create from the snapshot, of a sandbox that wrote
// 256 MiB to its read-write volume vs one that wrote them to its own disk, interleaved (the
// volume adds its reflink while paused, and the copy's reflink and record at the create).
func (b *bench) volumeCopySuite(ctx context.Context, res map[string]float64, rounds int) error {
	a := b.agent
	plain, err := a.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		return err
	}
	defer a.Kill(plain.ID)
	withVol, err := a.Create(ctx, hostagent.CreateRequest{Template: "base", Volumes: []hostagent.VolumeMount{{VolumeID: "vol_bench", MountPath: "/data"}}})
	if err != nil {
		return err
	}
	defer a.Kill(withVol.ID)
	// The same writes in both (on the sandbox's disk, on the volume), so both guests dirtied the
	// same page cache: the snapshots copy the same memory, and differ by the volume.
	for _, w := range []struct{ id, path string }{{plain.ID, "/home/user/fill"}, {withVol.ID, "/data/fill"}} {
		if err := b.post("/v1/sandboxes/"+w.id+"/exec", map[string]any{"cmd": "head -c 256M /dev/urandom > " + w.path + " && sync"}, 200); err != nil {
			return err
		}
	}
	var pauses, dirty [2][]float64
	snapRestore := func(i int, id string) sample {
		return func() (float64, error) {
			sn, err := a.SnapshotSandbox(ctx, id)
			if err != nil {
				return 0, err
			}
			defer a.DeleteSnapshot(sn.ID)
			pauses[i], dirty[i] = append(pauses[i], sn.PauseMS), append(dirty[i], float64(sn.DirtyBytes>>20))
			t := time.Now()
			sb, err := a.Create(ctx, hostagent.CreateRequest{SnapshotID: sn.ID})
			if err != nil {
				return 0, err
			}
			d := ms(time.Since(t))
			if err := a.Kill(sb.ID); err != nil {
				return 0, err
			}
			for _, m := range sb.Volumes {
				if err := a.DeleteVolume(m.VolumeID); err != nil {
					return 0, err
				}
			}
			return d, nil
		}
	}
	lat, err := interleaved(max(rounds/2, 3), snapRestore(0, plain.ID), snapRestore(1, withVol.ID))
	if err != nil {
		return err
	}
	res["snapshot_pause_plain_p50_ms"], res["snapshot_pause_with_volume_p50_ms"] = pct(pauses[0], 50), pct(pauses[1], 50)
	res["snapshot_dirty_plain_p50_mib"], res["snapshot_dirty_with_volume_p50_mib"] = pct(dirty[0], 50), pct(dirty[1], 50)
	res["snapshot_pause_with_volume_over_plain"] = res["snapshot_pause_with_volume_p50_ms"] / res["snapshot_pause_plain_p50_ms"]
	res["create_from_snapshot_plain_p50_ms"], res["create_from_snapshot_with_volume_p50_ms"] = pct(lat[0], 50), pct(lat[1], 50)
	res["create_from_snapshot_with_volume_over_plain"] = res["create_from_snapshot_with_volume_p50_ms"] / res["create_from_snapshot_plain_p50_ms"]
	return nil
}
