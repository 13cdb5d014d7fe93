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
	timed := func(req hostagent.CreateRequest) (float64, error) {
		t := time.Now()
		info, err := a.Create(ctx, req)
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		return d, a.Kill(info.ID)
	}
	var plain, withVol []float64
	for range creates {
		d, err := timed(hostagent.CreateRequest{Template: "base"})
		if err != nil {
			return err
		}
		plain = append(plain, d)
		d, err = timed(hostagent.CreateRequest{Template: "base",
			Volumes: []hostagent.VolumeMount{{VolumeID: "vol_bench", MountPath: "/data"}}})
		if err != nil {
			return err
		}
		withVol = append(withVol, d)
	}
	res["create_plain_p50_ms"] = pct(plain, 50)
	res["create_with_volume_p50_ms"], res["create_with_volume_p99_ms"] = pct(withVol, 50), pct(withVol, 99)
	res["create_with_volume_over_plain"] = res["create_with_volume_p50_ms"] / res["create_plain_p50_ms"]
	return nil
}
