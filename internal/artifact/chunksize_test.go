package artifact_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/storage"
)

// A memory image ("ram") is cut in MemoryChunkSize chunks and its manifest says so: a page the
// guest wrote costs one small chunk, not 4 MiB. Manifests of format 1 (no chunk size: 4 MiB)
// still pull; a manifest naming a chunk size this build does not accept is refused.
func TestMemoryChunkSize(t *testing.T) {
	ctx := context.Background()
	s := fileStore(t)
	dir, mem := makeArtifact(t)
	os.Rename(filepath.Join(dir, "mem"), filepath.Join(dir, "ram"))
	m, _, err := artifact.Push(ctx, s, "snapshot", "parent", dir, []string{"ram", "sub/config.json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != artifact.FormatVersion || m.Files[0].ChunkSize != artifact.MemoryChunkSize || m.Files[1].ChunkSize != artifact.ChunkSize {
		t.Fatalf("manifest v%d cuts ram in %d, config in %d", m.Version, m.Files[0].ChunkSize, m.Files[1].ChunkSize)
	}
	mem[2*chunk+7] ^= 0xff
	write(t, filepath.Join(dir, "ram"), mem, 0o600)
	_, st, err := artifact.Push(ctx, s, "snapshot", "child", dir, []string{"ram"}, nil)
	if err != nil || st.Transferred != 1 || st.Bytes != artifact.MemoryChunkSize {
		t.Fatalf("child push: %+v %v (want one chunk of %d bytes)", st, err, artifact.MemoryChunkSize)
	}
	out := t.TempDir()
	if _, _, err := artifact.Pull(ctx, s, "snapshot", "child", out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "ram")); !bytes.Equal(got, mem) {
		t.Fatal("pulled bytes differ")
	}

	// Format 1: a manifest written before files said their chunk size.
	dir1, mem1 := makeArtifact(t)
	v2, _, err := artifact.Push(ctx, s, "snapshot", "old", dir1, []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	putManifest := func(edit func(m map[string]any)) {
		t.Helper()
		raw, _ := json.Marshal(v2)
		var doc map[string]any
		json.Unmarshal(raw, &doc)
		edit(doc)
		raw, _ = json.Marshal(doc)
		if err := s.Put(ctx, artifact.ManifestKey("snapshot", "old"), bytes.NewReader(raw)); err != nil {
			t.Fatal(err)
		}
	}
	file := func(doc map[string]any) map[string]any { return doc["files"].([]any)[0].(map[string]any) }
	putManifest(func(doc map[string]any) { doc["version"] = 1; delete(file(doc), "chunk_size") })
	out1 := t.TempDir()
	if _, _, err := artifact.Pull(ctx, s, "snapshot", "old", out1); err != nil {
		t.Fatalf("format 1 manifest: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(out1, "mem")); !bytes.Equal(got, mem1) {
		t.Fatal("pulled bytes of a format 1 manifest differ")
	}
	for _, bad := range []struct {
		version int
		size    int64
	}{{1, artifact.MemoryChunkSize}, {2, 3000}, {2, 2 * artifact.ChunkSize}, {2, 1024}} {
		putManifest(func(doc map[string]any) { doc["version"] = bad.version; file(doc)["chunk_size"] = bad.size })
		if _, err := artifact.Get(ctx, s, "snapshot", "old"); err == nil || !strings.Contains(err.Error(), "chunk size") {
			t.Fatalf("manifest v%d with chunk size %d: %v (want refused naming the chunk size)", bad.version, bad.size, err)
		}
	}
}

// A memory image reflinked from an indexed base cut in 4 MiB chunks (a template published before
// memory chunks were smaller) is cut like its base, so its unchanged chunks are the base's: named
// unread on push, and placed from the base on a pulling host that has it.
func TestMemoryFollowsBaseChunkSize(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a loop-mounted XFS pool)")
	}
	pool, err := storage.Open(t.TempDir(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	ctx := context.Background()
	s := fileStore(t)
	_, mem := makeArtifact(t)
	parent := filepath.Join(pool.Dir, "template")
	write(t, filepath.Join(parent, "mem"), mem, 0o600)
	m, _, err := artifact.Push(ctx, s, "template", "base-1", parent, []string{"mem"}, nil)
	if err != nil || m.Files[0].ChunkSize != artifact.ChunkSize {
		t.Fatalf("template push: %v (cut %d)", err, m.Files[0].ChunkSize)
	}
	// Its memory file is "ram", published in 4 MiB chunks.
	os.Rename(filepath.Join(parent, "mem"), filepath.Join(parent, "ram"))
	m.Files[0].Path = "ram"
	host := artifact.NewLocal()
	host.Add(parent, m)

	child := filepath.Join(pool.Dir, "child")
	os.MkdirAll(child, 0o700)
	if err := storage.Clone(filepath.Join(parent, "ram"), filepath.Join(child, "ram")); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(child, "ram"), os.O_WRONLY, 0)
	page := make([]byte, 4096)
	rand.Read(page)
	f.WriteAt(page, 2*chunk+4096)
	f.Close()
	counted := &statCounter{Store: s}
	cm, st, err := host.Push(ctx, counted, "snapshot", "snap_child", child, []string{"ram"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Files[0].ChunkSize != artifact.ChunkSize || st.Known != 3 || st.Transferred != 1 {
		t.Fatalf("push of the child: cut %d, %+v (want 4 MiB chunks, 3 known, 1 sent)", cm.Files[0].ChunkSize, st)
	}
	// The store was asked only for the chunk read: the base's manifest names the known ones.
	if n := counted.stats.Load(); n != 1 {
		t.Fatalf("push of the child asked the store for %d chunks, want 1", n)
	}
	// Without the base's manifest in the store, each chunk is asked for (and none is missing).
	if err := artifact.Delete(ctx, s, "template", "base-1"); err != nil {
		t.Fatal(err)
	}
	counted.stats.Store(0)
	if _, st, err := host.Push(ctx, counted, "snapshot", "snap_child", child, []string{"ram"}, nil); err != nil || st.Transferred != 0 {
		t.Fatalf("push again: %+v %v", st, err)
	}
	if n := counted.stats.Load(); n != 4 {
		t.Fatalf("push without the base's manifest asked for %d chunks, want all 4", n)
	}
	other := artifact.NewLocal()
	other.Add(parent, m)
	out := t.TempDir()
	_, pst, err := other.Pull(ctx, s, "snapshot", "snap_child", out)
	if err != nil || pst.Local != 3 || pst.Transferred != 1 || pst.LocalBytes != 2*chunk+chunk/2 {
		t.Fatalf("pull with the base local: %+v %v (want 3 placed: 10 MiB, 1 fetched)", pst, err)
	}
	want := bytes.Clone(mem)
	copy(want[2*chunk+4096:], page)
	if got, _ := os.ReadFile(filepath.Join(out, "ram")); !bytes.Equal(got, want) {
		t.Fatal("pulled bytes differ")
	}
}

// statCounter counts the chunks a push asks the store about.
type statCounter struct {
	blob.Store
	stats atomic.Int64
}

func (c *statCounter) Stat(ctx context.Context, key string) (blob.Info, error) {
	if strings.HasPrefix(key, "chunks/") {
		c.stats.Add(1)
	}
	return c.Store.Stat(ctx, key)
}
