package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/timing"
)

// crossHostSuite: two agents sharing a blob store (a directory: the S3 driver's cost is the blob
// suite's). A 512 MiB guest (base) that dirtied 64 MiB is forked on its host and onto the other
// (snapshot + publish there, pull + restore here), interleaved; then hibernated on its host and
// adopted by the other (wake anywhere). The second host pulled base first, so it fetches only what
// the guest dirtied (artifact.Local); its first restore of a snapshot is measured apart.
func (b *bench) crossHostSuite(ctx context.Context, res map[string]float64) error {
	store := filepath.Join(b.dataDir, "xhost-blobs")
	os.RemoveAll(store)
	defer os.RemoveAll(store)
	withStore := func(c *hostagent.Config) { c.BlobStore = "file://" + store }
	src, err := b.sideAgent(ctx, "xhost-a", withStore) // bakes and publishes base
	if err != nil {
		return err
	}
	defer src.Close()
	t := time.Now()
	dst, err := b.sideAgent(ctx, "xhost-b", withStore) // pulls base
	if err != nil {
		return err
	}
	defer dst.Close()
	res["xhost_template_pull_ms"] = ms(time.Since(t))
	srcAPI := httptest.NewServer(src.Handler())
	defer srcAPI.Close()

	// A parent that dirties 64 MiB of fresh bytes before each fork: each snapshot has new chunks.
	parent, err := src.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		return err
	}
	defer src.Kill(parent.ID)
	dirty := func() error {
		return postTo(srcAPI.URL, "/v1/sandboxes/"+parent.ID+"/exec",
			map[string]any{"cmd": "head -c 64M /dev/urandom > /dev/shm/fill", "user": "root"}, 200)
	}
	sameHost := func() (float64, error) {
		if err := dirty(); err != nil {
			return 0, err
		}
		t := time.Now()
		kids, err := src.Fork(ctx, parent.ID, 1)
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		return d, src.Kill(kids[0].ID)
	}
	var snapMS, restoreMS, faults []float64
	cut := &cutCompare{dir: filepath.Join(b.dataDir, "xhost-cuts")}
	defer cut.close()
	crossHost := func() (float64, error) {
		if err := dirty(); err != nil {
			return 0, err
		}
		t := time.Now()
		srcTrace := timing.NewTrace()
		sn, err := src.SnapshotForFork(timing.With(ctx, srcTrace), parent.ID) // as ForkTo takes it
		if err != nil {
			return 0, err
		}
		if !sn.Published {
			return 0, fmt.Errorf("snapshot %s was not published", sn.ID)
		}
		mid, dstTrace := time.Now(), timing.NewTrace()
		kid, err := dst.Create(timing.With(ctx, dstTrace), hostagent.CreateRequest{SnapshotID: sn.ID, ForkOf: parent.ID})
		if err != nil {
			return 0, err
		}
		d := ms(time.Since(t))
		// What the child's first answer read from disk: the pulled RAM file's uncached pages.
		if n, err := majorFaults(kid.PID); err == nil {
			faults = append(faults, n)
		}
		fmt.Printf("  cross-host fork %.0f ms: source %v\n    target %v\n", d, srcTrace.LogArgs(), dstTrace.LogArgs()) // where the time goes
		snapMS, restoreMS = append(snapMS, ms(mid.Sub(t))), append(restoreMS, ms(time.Since(mid)))
		src.DeleteSnapshot(sn.ID)
		dst.DeleteSnapshot(sn.ID)
		return d, dst.Kill(kid.ID)
	}
	if _, err := crossHost(); err != nil { // the first: the destination's first pull of this guest
		return err
	}
	res["xhost_fork_first_ms"] = snapMS[0] + restoreMS[0]
	snapMS, restoreMS, faults = nil, nil, nil
	lat, err := interleaved(12, sameHost, crossHost)
	if err != nil {
		return err
	}
	res["xhost_same_host_fork_p50_ms"] = pct(lat[0], 50)
	res["xhost_fork_p50_ms"], res["xhost_fork_p99_ms"] = pct(lat[1], 50), pct(lat[1], 99)
	res["xhost_fork_snapshot_publish_p50_ms"], res["xhost_fork_pull_restore_p50_ms"] = pct(snapMS, 50), pct(restoreMS, 50)
	res["xhost_fork_over_same_host"] = res["xhost_fork_p50_ms"] / res["xhost_same_host_fork_p50_ms"]
	res["xhost_fork_child_major_faults"] = pct(faults, 50)
	// The cut of memory images, on snapshots of the same parent, after the forks.
	for range samples(8) {
		if err := dirty(); err != nil {
			return err
		}
		sn, err := src.SnapshotSandbox(ctx, parent.ID)
		if err != nil {
			return err
		}
		err = cut.sample(ctx, sn)
		src.DeleteSnapshot(sn.ID)
		if err != nil {
			return err
		}
	}
	cut.report(res)

	if err := b.lazyRestore(ctx, res, store, src, dst, parent.ID, dirty); err != nil {
		return err
	}

	// Wake anywhere: hibernate (and publish) on the source, adopt and wake on the other.
	var hib, adopt []float64
	for range samples(3) {
		sb, err := src.Create(ctx, hostagent.CreateRequest{Template: "base"})
		if err != nil {
			return err
		}
		if err := postTo(srcAPI.URL, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": "head -c 64M /dev/urandom > /dev/shm/fill", "user": "root"}, 200); err != nil {
			return err
		}
		t := time.Now()
		h, err := src.Hibernate(ctx, sb.ID)
		if err != nil {
			return err
		}
		mid := time.Now()
		if _, err := dst.Create(ctx, hostagent.CreateRequest{ID: sb.ID, Hibernated: h.Hibernated}); err != nil {
			return err
		}
		hib, adopt = append(hib, ms(mid.Sub(t))), append(adopt, ms(time.Since(mid)))
		src.Kill(sb.ID)
		dst.Kill(sb.ID)
	}
	res["xhost_hibernate_publish_p50_ms"], res["xhost_adopt_wake_p50_ms"] = pct(hib, 50), pct(adopt, 50)
	res["xhost_load_avg_1m"] = loadAvg() // other work on the machine: the absolute figures swing with it
	fmt.Printf("cross-host: fork p50 %.0f ms (same host %.0f ms, ×%.1f; snapshot+publish %.0f, pull+restore %.0f; child VMM major faults %.0f), first %.0f ms; "+
		"hibernate+publish %.0f ms, adopt+wake %.0f ms; template pull %.0f ms\n",
		res["xhost_fork_p50_ms"], res["xhost_same_host_fork_p50_ms"], res["xhost_fork_over_same_host"],
		res["xhost_fork_snapshot_publish_p50_ms"], res["xhost_fork_pull_restore_p50_ms"], res["xhost_fork_child_major_faults"], res["xhost_fork_first_ms"],
		res["xhost_hibernate_publish_p50_ms"], res["xhost_adopt_wake_p50_ms"], res["xhost_template_pull_ms"])
	return nil
}

// lazyRestore: a third host with lazy restore. Each snapshot of the parent (64 MiB dirtied before
// it) is restored on the eager host and on the lazy one, in alternating order, to the first exec.
func (b *bench) lazyRestore(ctx context.Context, res map[string]float64, store string, src, eager *hostagent.Agent, parent string, dirty func() error) error {
	lz, err := b.sideAgent(ctx, "xhost-c", func(c *hostagent.Config) { c.BlobStore, c.LazyRestore = "file://"+store, true })
	if err != nil {
		return err
	}
	defer lz.Close()
	hosts := []*hostagent.Agent{eager, lz}
	apis := make([]string, 2)
	for i, h := range hosts {
		srv := httptest.NewServer(h.Handler())
		defer srv.Close()
		apis[i] = srv.URL
	}
	lat := make([][]float64, 2)
	for i := range samples(5) {
		if err := dirty(); err != nil {
			return err
		}
		sn, err := src.SnapshotSandbox(ctx, parent)
		if err != nil {
			return err
		}
		for _, k := range []int{i % 2, 1 - i%2} {
			t := time.Now()
			kid, err := hosts[k].Create(ctx, hostagent.CreateRequest{SnapshotID: sn.ID, ForkOf: parent})
			if err != nil {
				return err
			}
			if err := postTo(apis[k], "/v1/sandboxes/"+kid.ID+"/exec", map[string]any{"cmd": "true"}, 200); err != nil {
				return err
			}
			lat[k] = append(lat[k], ms(time.Since(t)))
			hosts[k].Kill(kid.ID)
			hosts[k].DeleteSnapshot(sn.ID)
		}
		src.DeleteSnapshot(sn.ID)
	}
	res["xhost_eager_restore_first_exec_p50_ms"], res["xhost_lazy_restore_first_exec_p50_ms"] = pct(lat[0], 50), pct(lat[1], 50)
	res["xhost_lazy_over_eager_restore"] = pct(lat[1], 50) / pct(lat[0], 50)
	fmt.Printf("cross-host restore to first exec: eager p50 %.0f ms, lazy p50 %.0f ms (x%.2f)\n", pct(lat[0], 50), pct(lat[1], 50), res["xhost_lazy_over_eager_restore"])
	return nil
}

// loadAvg is the machine's 1-minute load average (0 where unknown).
func loadAvg() float64 {
	var l float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &l)
	}
	return l
}
