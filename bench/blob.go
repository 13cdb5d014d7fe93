package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
	"github.com/pandastack/pandastack/internal/storage"
)

// blobSuite: artifacts through a real S3 server (versitygw on loopback). A 1 GiB memory image
// with 256 MiB of data: the first push, a push after 16 MiB were dirtied (only the dirty chunks
// should move), a pull, and the store bytes for 8 forks each dirtying their own 16 MiB against 1.
func blobSuite(ctx context.Context, res map[string]float64, dataDir string) error {
	work := filepath.Join(dataDir, "bench-blob")
	os.RemoveAll(work)
	defer os.RemoveAll(work)
	srv, stop, err := blobtest.RunS3(filepath.Join(work, "s3"))
	if err != nil {
		return err
	}
	defer stop()
	os.Setenv("AWS_ACCESS_KEY_ID", srv.Access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", srv.Secret)
	s, err := blob.Open(ctx, srv.URL("bench", "artifacts"))
	if err != nil {
		return err
	}
	const size, data, dirty = 1 << 30, 256 << 20, 16 << 20
	src := filepath.Join(work, "src")
	os.MkdirAll(src, 0o700)
	mem := filepath.Join(src, "mem")
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	if err := fill(mem, size, 0, data, rng); err != nil {
		return err
	}
	push := func(name string) (time.Duration, artifact.Stats, error) {
		t := time.Now()
		_, st, err := artifact.Push(ctx, s, "snapshot", name, src, []string{"mem"}, nil)
		return time.Since(t), st, err
	}
	d, st, err := push("full")
	if err != nil {
		return err
	}
	res["blob_push_1g_full_ms"] = ms(d)
	res["blob_push_1g_full_mib"] = float64(st.Bytes) / (1 << 20)
	stored := func() (int64, error) {
		var n int64
		err := s.List(ctx, "chunks/", func(in blob.Info) error { n += in.Size; return nil })
		return n, err
	}
	base, err := stored()
	if err != nil {
		return err
	}
	// 8 forks, each dirtying its own 16 MiB (scattered 1 MiB runs inside the data): each push
	// should move only the chunks those runs touch.
	var dirtyMs, dirtyMiB []float64
	for i := range 8 {
		for j := range dirty >> 20 {
			off := int64((i*16+j)*7+3) << 20 % data
			if err := fill(mem, size, off, 1<<20, rng); err != nil {
				return err
			}
		}
		d, st, err := push(fmt.Sprintf("fork-%d", i))
		if err != nil {
			return err
		}
		dirtyMs, dirtyMiB = append(dirtyMs, ms(d)), append(dirtyMiB, float64(st.Bytes)/(1<<20))
	}
	res["blob_push_1g_dirty16m_ms"] = pct(dirtyMs, 50)
	res["blob_push_1g_dirty16m_mib"] = pct(dirtyMiB, 50)
	res["blob_push_dirty_over_full"] = res["blob_push_1g_dirty16m_ms"] / res["blob_push_1g_full_ms"]
	all, err := stored()
	if err != nil {
		return err
	}
	res["blob_store_8_forks_over_1"] = float64(all) / float64(base)
	// Pull of the last fork into an empty directory.
	t := time.Now()
	if _, _, err := artifact.Pull(ctx, s, "snapshot", "fork-7", filepath.Join(work, "pulled")); err != nil {
		return err
	}
	res["blob_pull_1g_ms"] = ms(time.Since(t))
	res["blob_pull_mib_per_s"] = float64(data>>20) / time.Since(t).Seconds()
	return publishReflinkedChild(ctx, res, s, work, mem, size, rng)
}

// publishReflinkedChild: what a snapshot's publish costs when its memory is a reflink of an
// indexed, published template's (the host's case) — pushed by a Local that names shared chunks
// from their blocks, against the same child pushed reading every chunk, interleaved. The child
// dirties 16 MiB of the parent's data each round.
func publishReflinkedChild(ctx context.Context, res map[string]float64, s blob.Store, work, mem string, size int64, rng *rand.Rand) error {
	pool, err := storage.Open(filepath.Join(work, "pool"), 4, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	parent, child := filepath.Join(pool.Dir, "parent"), filepath.Join(pool.Dir, "child")
	os.MkdirAll(parent, 0o700)
	os.MkdirAll(child, 0o700)
	if err := storage.Clone(mem, filepath.Join(parent, "mem")); err != nil {
		// Another filesystem: copy it once.
		raw, err := os.ReadFile(mem)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(parent, "mem"), raw, 0o600); err != nil {
			return err
		}
	}
	local := artifact.NewLocal()
	if _, _, err := local.Push(ctx, s, "template", "parent", parent, []string{"mem"}, nil); err != nil {
		return err
	}
	var known, read, knownPct []float64
	for i := range 6 {
		os.Remove(filepath.Join(child, "mem"))
		if err := storage.Clone(filepath.Join(parent, "mem"), filepath.Join(child, "mem")); err != nil {
			return err
		}
		if err := fill(filepath.Join(child, "mem"), size, int64(i*16)<<20, 16<<20, rng); err != nil {
			return err
		}
		for _, byBlocks := range []bool{i%2 == 0, i%2 == 1} {
			t := time.Now()
			var st artifact.Stats
			if byBlocks {
				_, st, err = local.Push(ctx, s, "snapshot", fmt.Sprintf("child-%d-k", i), child, []string{"mem"}, nil)
			} else {
				_, st, err = artifact.Push(ctx, s, "snapshot", fmt.Sprintf("child-%d-r", i), child, []string{"mem"}, nil)
			}
			if err != nil {
				return err
			}
			if byBlocks {
				known, knownPct = append(known, ms(time.Since(t))), append(knownPct, 100*float64(st.Known)/float64(max(st.Chunks, 1)))
			} else {
				read = append(read, ms(time.Since(t)))
			}
		}
	}
	res["blob_publish_child_by_blocks_ms"], res["blob_publish_child_reading_ms"] = pct(known, 50), pct(read, 50)
	res["blob_publish_child_by_blocks_over_reading"] = pct(known, 50) / pct(read, 50)
	res["blob_publish_child_named_unread_pct"] = pct(knownPct, 50)
	return nil
}

// fill writes n pseudo-random bytes at off into the file p (made sparse to size if new).
func fill(p string, size, off, n int64, rng *rand.Rand) error {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for done := int64(0); done < n; done += int64(len(buf)) {
		for i := 0; i+8 <= len(buf); i += 8 {
			v := rng.Uint64()
			buf[i], buf[i+1], buf[i+2], buf[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			buf[i+4], buf[i+5], buf[i+6], buf[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
		}
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), n-done)], off+done); err != nil {
			return err
		}
	}
	return nil
}
