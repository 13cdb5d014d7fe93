package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// cutCompare measures what cutting a memory image in MemoryChunkSize chunks instead of 4 MiB
// ones saves a cross-host fork, on snapshots of the parent the crosshost suite forks: each is published
// from the source host's files and pulled by a host that has its template, once cut each way, in
// alternating order. A memory file named "ram" is cut small, any other name in 4 MiB chunks (the
// cut before), so each way is the same files under another name: reflinks of the template's
// memory and the snapshot's, sharing their blocks as the originals do. Publish and pull only: the
// restore after them is the same either way.
type cutCompare struct {
	dir   string
	ways  []*cutWay
	n     int
	ready bool
}

// cutWay is one cut: its own store, the source's and the target's index of the template.
type cutWay struct {
	name          string // the memory file's name, which chooses the cut
	store         blob.Store
	src, dst      *artifact.Local
	tmpl          string
	lat, mib, pub []float64
}

func (c *cutCompare) init(ctx context.Context, sn hostapi.Snapshot) error {
	os.RemoveAll(c.dir)
	for _, name := range []string{"mem", "ram"} {
		w := &cutWay{name: name, src: artifact.NewLocal(), dst: artifact.NewLocal()}
		var err error
		if w.store, err = blob.Open(ctx, "file://"+filepath.Join(c.dir, "store-"+name)); err != nil {
			return err
		}
		// On the agents' pool (reflinks): beside the snapshot's directory.
		w.tmpl = filepath.Join(poolOf(sn), "bench-cut-template-"+name)
		os.RemoveAll(w.tmpl)
		if err := cloneInto(filepath.Join(sn.TemplateDir, "ram"), w.tmpl, name); err != nil {
			return err
		}
		m, _, err := w.src.Push(ctx, w.store, "template", "base", w.tmpl, []string{name}, nil)
		if err != nil {
			return err
		}
		w.dst.Add(w.tmpl, m)
		c.ways = append(c.ways, w)
	}
	c.ready = true
	return nil
}

func poolOf(sn hostapi.Snapshot) string { return filepath.Dir(filepath.Dir(sn.TemplateDir)) }

func cloneInto(src, dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return storage.Clone(src, filepath.Join(dir, name))
}

// sample publishes and pulls snapshot sn's memory cut each way.
func (c *cutCompare) sample(ctx context.Context, sn hostapi.Snapshot) error {
	if !c.ready {
		if err := c.init(ctx, sn); err != nil {
			return err
		}
	}
	for k := range c.ways {
		w := c.ways[(k+c.n)%2]
		snap := filepath.Join(poolOf(sn), "bench-cut-snapshot-"+w.name)
		out := filepath.Join(poolOf(sn), "bench-cut-pulled-"+w.name)
		os.RemoveAll(snap)
		os.RemoveAll(out)
		if err := cloneInto(filepath.Join(poolOf(sn), "snapshots", sn.ID, "ram"), snap, w.name); err != nil {
			return err
		}
		t := time.Now()
		m, _, err := w.src.Push(ctx, w.store, "snapshot", sn.ID, snap, []string{w.name}, nil)
		if err != nil {
			return err
		}
		mid := time.Now()
		st, err := w.dst.PullUnsynced(ctx, w.store, m, out)
		if err != nil {
			return err
		}
		w.lat, w.pub = append(w.lat, ms(time.Since(t))), append(w.pub, ms(mid.Sub(t)))
		w.mib = append(w.mib, float64(st.Bytes)/(1<<20))
		os.RemoveAll(snap)
		os.RemoveAll(out)
		artifact.Delete(ctx, w.store, "snapshot", sn.ID)
	}
	c.n++
	return nil
}

func (c *cutCompare) report(res map[string]float64) {
	if len(c.ways) != 2 {
		return
	}
	big, small := c.ways[0], c.ways[1]
	res["xhost_mem_4m_publish_pull_p50_ms"], res["xhost_mem_4m_publish_pull_p99_ms"] = pct(big.lat, 50), pct(big.lat, 99)
	res["xhost_mem_small_publish_pull_p50_ms"], res["xhost_mem_small_publish_pull_p99_ms"] = pct(small.lat, 50), pct(small.lat, 99)
	res["xhost_mem_4m_pulled_mib"], res["xhost_mem_small_pulled_mib"] = pct(big.mib, 50), pct(small.mib, 50)
	res["xhost_mem_small_over_4m"] = pct(small.lat, 50) / pct(big.lat, 50)
	for _, w := range c.ways {
		fmt.Printf("  %s cut: publish+pull ms %.0f\n", w.name, w.lat)
	}
	fmt.Printf("memory chunks, publish+pull of a fork's memory: 4 MiB p50 %.0f ms (publish %.0f, %.0f MiB pulled), %d KiB p50 %.0f ms (publish %.0f, %.0f MiB pulled), x%.2f\n",
		pct(big.lat, 50), pct(big.pub, 50), pct(big.mib, 50), artifact.MemoryChunkSize>>10, pct(small.lat, 50), pct(small.pub, 50), pct(small.mib, 50), res["xhost_mem_small_over_4m"])
}

func (c *cutCompare) close() {
	for _, w := range c.ways {
		os.RemoveAll(w.tmpl)
	}
	os.RemoveAll(c.dir)
}
