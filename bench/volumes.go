package main

import (
	"context"

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
	return nil
}
