package artifact_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/testenv"
)

const chunk = artifact.ChunkSize

// makeArtifact writes mem (6.5 chunks: random, zero, random, zero, zero, random, half random)
// and a small config file into a new directory.
func makeArtifact(t *testing.T) (dir string, mem []byte) {
	dir = t.TempDir()
	mem = make([]byte, 6*chunk+chunk/2)
	for _, i := range []int{0, 2, 5, 6} {
		end := min((i+1)*chunk, len(mem))
		rand.Read(mem[i*chunk : end])
	}
	write(t, filepath.Join(dir, "mem"), mem, 0o600)
	write(t, filepath.Join(dir, "sub", "config.json"), []byte(`{"a":1}`), 0o640)
	return dir, mem
}

func write(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o700)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

func fileStore(t *testing.T) blob.Store {
	s, err := blob.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func roundTrip(t *testing.T, s blob.Store) {
	ctx := context.Background()
	dir, mem := makeArtifact(t)
	rec := map[string]string{"template": "base", "vmm": "qemu 7.2"}
	m, st, err := artifact.Push(ctx, s, "snapshot", "snap_1", dir, []string{"mem", "sub/config.json"}, rec)
	if err != nil {
		t.Fatal(err)
	}
	// mem: 4 data chunks + 3 holes; config: 1 chunk.
	if st.Chunks != 5 || st.Holes != 3 || st.Transferred != 5 {
		t.Fatalf("first push: %+v, want 5 chunks, 3 holes, 5 sent", st)
	}
	// What a pull writes (what a host admits for it): the data chunks, not the holes.
	if want := int64(3*chunk+chunk/2) + 7; m.DataBytes() != want {
		t.Fatalf("manifest data bytes %d, want %d", m.DataBytes(), want)
	}
	if string(m.Record) != `{"template":"base","vmm":"qemu 7.2"}` {
		t.Fatalf("record = %s", m.Record)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	got, pst, err := artifact.Pull(ctx, s, "snapshot", "snap_1", out)
	if err != nil {
		t.Fatal(err)
	}
	if pst.Transferred != 5 || pst.Holes != 3 || string(got.Record) != string(m.Record) {
		t.Fatalf("pull: %+v, record %s", pst, got.Record)
	}
	b, _ := os.ReadFile(filepath.Join(out, "mem"))
	if !bytes.Equal(b, mem) {
		t.Fatal("pulled memory differs from the pushed one")
	}
	fi, _ := os.Stat(filepath.Join(out, "mem"))
	if blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512; blocks > int64(4*chunk+chunk/2) {
		t.Errorf("pulled file allocates %d bytes: its all-zero chunks should stay holes", blocks)
	}
	ci, _ := os.Stat(filepath.Join(out, "sub", "config.json"))
	if ci.Mode().Perm() != 0o640 {
		t.Errorf("config mode %v, want 0640", ci.Mode().Perm())
	}
}

func TestRoundTripFile(t *testing.T) { roundTrip(t, fileStore(t)) }

func TestRoundTripS3(t *testing.T) {
	srv := blobtest.StartS3(t)
	srv.Env(t)
	s, err := blob.Open(context.Background(), srv.URL("artifacts", "test"))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, s)
}

// A second artifact that changes one chunk uploads one chunk; the store holds the shared ones once.
func TestDedupe(t *testing.T) {
	ctx := context.Background()
	s := fileStore(t)
	dir, mem := makeArtifact(t)
	if _, _, err := artifact.Push(ctx, s, "snapshot", "parent", dir, []string{"mem"}, nil); err != nil {
		t.Fatal(err)
	}
	mem[2*chunk+7] ^= 0xff // dirty one page of one chunk
	write(t, filepath.Join(dir, "mem"), mem, 0o600)
	_, st, err := artifact.Push(ctx, s, "snapshot", "child", dir, []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 1 || st.Bytes != chunk {
		t.Fatalf("child push sent %d chunks (%d bytes), want only the dirty one", st.Transferred, st.Bytes)
	}
	if n := count(t, s, "chunks/"); n != 5 {
		t.Fatalf("store holds %d chunks, want 5 (4 shared + 1 dirty)", n)
	}
}

func count(t *testing.T, s blob.Store, prefix string) int {
	n := 0
	if err := s.List(context.Background(), prefix, func(blob.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A corrupt or missing chunk fails the pull naming artifact and chunk, and leaves no file.
func TestBadChunks(t *testing.T) {
	ctx := context.Background()
	s := fileStore(t)
	dir, _ := makeArtifact(t)
	m, _, err := artifact.Push(ctx, s, "template", "base", dir, []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	victim := m.Files[0].Chunks[2]
	key := "chunks/" + victim
	rc, _ := s.Get(ctx, key)
	good, _ := io.ReadAll(rc)
	rc.Close()
	bad := bytes.Clone(good)
	bad[100] ^= 1
	out := t.TempDir()
	// Flipped, one byte longer, one byte shorter.
	for _, b := range [][]byte{bad, append(bytes.Clone(good), 0), good[:len(good)-1]} {
		s.Put(ctx, key, bytes.NewReader(b))
		_, _, err = artifact.Pull(ctx, s, "template", "base", out)
		if err == nil || !strings.Contains(err.Error(), "template/base") || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("pull of a corrupt chunk (%d bytes): %v", len(b), err)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Fatalf("a failed pull left %d files behind", len(ents))
		}
	}
	s.Delete(ctx, key)
	_, _, err = artifact.Pull(ctx, s, "template", "base", out)
	if err == nil || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("pull of a missing chunk: %v", err)
	}
	if _, _, err := artifact.Pull(ctx, s, "template", "nope", out); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("pull of an unknown artifact: %v", err)
	}
	for _, n := range []string{"", "../x", "A", "a/b"} {
		if _, _, err := artifact.Push(ctx, s, "template", n, dir, []string{"mem"}, nil); !errdefs.Is(err, errdefs.Invalid) {
			t.Errorf("push named %q: %v", n, err)
		}
	}
	if _, _, err := artifact.Push(ctx, s, "template", "x", dir, []string{"../etc/passwd"}, nil); !errdefs.Is(err, errdefs.Invalid) {
		t.Errorf("push of a path outside the directory: %v", err)
	}
}

// failingStore fails every Put after the first n.
type failingStore struct {
	blob.Store
	n atomic.Int64
}

func (f *failingStore) Put(ctx context.Context, key string, body io.ReadSeeker) error {
	if f.n.Add(-1) < 0 {
		return errors.New("connection reset")
	}
	return f.Store.Put(ctx, key, body)
}

// A push cut midway leaves no manifest; Sweep then removes its orphan chunks but never a chunk a
// live manifest names.
func TestCutPushAndSweep(t *testing.T) {
	ctx := context.Background()
	s := fileStore(t)
	dir, mem := makeArtifact(t)
	if _, _, err := artifact.Push(ctx, s, "snapshot", "kept", dir, []string{"mem"}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range mem { // all new content for the second artifact, except chunk 0
		if i >= chunk {
			mem[i] ^= 0x5a
		}
	}
	write(t, filepath.Join(dir, "mem"), mem, 0o600)
	fs := &failingStore{Store: s}
	fs.n.Store(3)
	if _, _, err := artifact.Push(ctx, fs, "snapshot", "cut", dir, []string{"mem"}, nil); err == nil {
		t.Fatal("a push whose uploads fail succeeded")
	}
	if _, err := artifact.Get(ctx, s, "snapshot", "cut"); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("a cut push left a manifest: %v", err)
	}
	before := count(t, s, "chunks/")
	n, err := artifact.Sweep(ctx, s, 0)
	if err != nil || n != before-4 || n == 0 {
		t.Fatalf("sweep deleted %d of %d chunks (%v), want the %d orphans", n, before, err, before-4)
	}
	if _, _, err := artifact.Pull(ctx, s, "snapshot", "kept", t.TempDir()); err != nil {
		t.Fatalf("the live artifact no longer pulls after a sweep: %v", err)
	}
	// Deleting the manifest frees its chunks at the next sweep.
	artifact.Delete(ctx, s, "snapshot", "kept")
	if n, err := artifact.Sweep(ctx, s, 0); err != nil || n != 4 || count(t, s, "chunks/") != 0 {
		t.Fatalf("sweep after delete: %d, %v, %d left", n, err, count(t, s, "chunks/"))
	}
}

// TestLocalChunks: a host that holds an artifact's files pulls a child of it (one chunk dirtied)
// by copying the unchanged chunks from its own files and fetching only the dirty one; after a
// restart the index comes back from the manifest left beside the files; a local file that changed
// since is not trusted: its chunks are fetched.
func TestLocalChunks(t *testing.T) {
	ctx := context.Background()
	s, _, parent, child, mem, dirty := pushedParent(t, 2*chunk, 3*chunk)
	if _, _, err := artifact.Push(ctx, s, "snapshot", "snap_child", child, []string{"mem"}, nil); err != nil {
		t.Fatal(err)
	}

	// A restarted host: the index is rebuilt from the manifest Push left.
	restarted := artifact.NewLocal()
	restarted.AddDir(parent)
	out := t.TempDir()
	_, st, err := restarted.Pull(ctx, s, "snapshot", "snap_child", out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Local != 3 || st.Transferred != 1 {
		t.Fatalf("pull with the parent's files local: %+v (want 3 local, 1 fetched)", st)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "mem")); !bytes.Equal(got, dirty) {
		t.Fatal("pulled bytes differ")
	}

	// The pulled copy goes (a deleted snapshot): the parent's files still serve the next pull.
	os.RemoveAll(out)
	if _, st, err = restarted.Pull(ctx, s, "snapshot", "snap_child", t.TempDir()); err != nil || st.Local != 3 {
		t.Fatalf("pull after another local copy went: %+v %v (want 3 local)", st, err)
	}

	// The parent's file changed on disk: nothing of it is used.
	write(t, filepath.Join(parent, "mem"), make([]byte, len(mem)), 0o600)
	stale := artifact.NewLocal()
	stale.AddDir(parent)
	out2 := t.TempDir()
	if _, st, err = stale.Pull(ctx, s, "snapshot", "snap_child", out2); err != nil {
		t.Fatal(err)
	}
	if st.Transferred != 4 || st.Local != 0 {
		t.Fatalf("pull after the local file changed: %+v", st)
	}
	if got, _ := os.ReadFile(filepath.Join(out2, "mem")); !bytes.Equal(got, dirty) {
		t.Fatal("pulled bytes differ after the local file changed")
	}
}

// pushedParent pushes makeArtifact's "mem" (parent) as template base-1 with host's index, and
// writes a child's "mem": the parent's with bytes [from, to) made random (dirty).
func pushedParent(t *testing.T, from, to int) (s blob.Store, host *artifact.Local, parent, child string, mem, dirty []byte) {
	t.Helper()
	s = fileStore(t)
	parent, mem = makeArtifact(t)
	host = artifact.NewLocal()
	if _, _, err := host.Push(context.Background(), s, "template", "base-1", parent, []string{"mem"}, nil); err != nil {
		t.Fatal(err)
	}
	child = t.TempDir()
	dirty = bytes.Clone(mem)
	rand.Read(dirty[from:to])
	write(t, filepath.Join(child, "mem"), dirty, 0o600)
	return s, host, parent, child, mem, dirty
}

// reflinkParent makes a reflink filesystem (a loop-mounted XFS pool) and the artifact of
// makeArtifact's "mem" in its directory "template".
func reflinkParent(t *testing.T) (pool, parent string, mem []byte) {
	pool = testenv.ReflinkPool(t)
	_, mem = makeArtifact(t)
	parent = filepath.Join(pool, "template")
	write(t, filepath.Join(parent, "mem"), mem, 0o600)
	return pool, parent, mem
}

// TestPushNamesSharedChunksUnread: on a reflink filesystem, a child reflinked from an indexed
// parent with one chunk rewritten is pushed reading only that chunk: the others are named from the
// parent's digests because their blocks are the parent's; the manifest is the one a full read
// gives. A parent changed since it was indexed lends nothing.
func TestPushNamesSharedChunksUnread(t *testing.T) {
	pool, parent, mem := reflinkParent(t)
	ctx := context.Background()
	s := fileStore(t)
	host := artifact.NewLocal()
	if _, _, err := host.Push(ctx, s, "template", "base-1", parent, []string{"mem"}, nil); err != nil {
		t.Fatal(err)
	}

	child := filepath.Join(pool, "child")
	os.MkdirAll(child, 0o700)
	if err := storage.Clone(filepath.Join(parent, "mem"), filepath.Join(child, "mem")); err != nil {
		t.Fatal(err)
	}
	dirty := make([]byte, chunk)
	rand.Read(dirty)
	f, err := os.OpenFile(filepath.Join(child, "mem"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(dirty, 2*chunk)
	f.Close()

	m, st, err := host.Push(ctx, s, "snapshot", "snap_child", child, []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks 0, 5 and 6 are the parent's blocks, 1, 3 and 4 holes; 2 was read (and is new).
	want := bytes.Clone(mem)
	copy(want[2*chunk:], dirty)
	checkChildPush(t, s, m, st, child, want)
	// Pulled by a host that holds the parent, into the pool: chunks 0, 5 and 6 (a run, its last a
	// half chunk) are cloned from the parent's blocks, 2 is fetched.
	beside := artifact.NewLocal()
	beside.AddDir(parent)
	pulled := filepath.Join(pool, "pulled")
	if _, st, err := beside.Pull(ctx, s, "snapshot", "snap_child", pulled); err != nil || st.Local != 3 || st.Transferred != 1 {
		t.Fatalf("pull beside the parent: %+v %v (want 3 local, 1 fetched)", st, err)
	}
	if got, _ := os.ReadFile(filepath.Join(pulled, "mem")); !bytes.Equal(got, want) {
		t.Fatal("bytes pulled beside the parent differ")
	}
	extents := func(p string) []storage.Extent {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		e, err := storage.Extents(f)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	pe, pu := extents(filepath.Join(parent, "mem")), extents(filepath.Join(pulled, "mem"))
	for _, i := range []uint64{0, 5, 6} {
		if a, b := storage.ExtentsIn(pe, i*chunk, chunk), storage.ExtentsIn(pu, i*chunk, chunk); len(a) == 0 || !slices.Equal(a, b) {
			t.Fatalf("pulled chunk %d does not share the parent's blocks: %v vs %v", i, b, a)
		}
	}

	// The parent written after it was indexed (its mtime moves): it is no base any more.
	pf, _ := os.OpenFile(filepath.Join(parent, "mem"), os.O_WRONLY, 0)
	pf.WriteAt([]byte{1}, 0)
	pf.Close()
	_, st, err = host.Push(ctx, s, "snapshot", "snap_child2", child, []string{"mem"}, nil)
	if err != nil || st.Known != 0 {
		t.Fatalf("push after the parent changed: %+v %v (want nothing known)", st, err)
	}
}

// A memory image ("ram") is cut in MemoryChunkSize chunks in a store of cheap small objects (a
// directory; S3 keeps 4 MiB) and its manifest says so: a page the
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
	// A store where small objects are not cheap (S3; here any wrapped store) keeps 4 MiB chunks.
	if m, _, err := artifact.Push(ctx, &statCounter{Store: s}, "snapshot", "s3-like", dir, []string{"ram"}, nil); err != nil ||
		m.Files[0].ChunkSize != artifact.ChunkSize {
		t.Fatalf("push to a store of costly objects: %v (ram cut in %d)", err, m.Files[0].ChunkSize)
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
	pool, parent, mem := reflinkParent(t)
	ctx := context.Background()
	s := fileStore(t)
	m, _, err := artifact.Push(ctx, s, "template", "base-1", parent, []string{"mem"}, nil)
	if err != nil || m.Files[0].ChunkSize != artifact.ChunkSize {
		t.Fatalf("template push: %v (cut %d)", err, m.Files[0].ChunkSize)
	}
	// Its memory file is "ram", published in 4 MiB chunks.
	os.Rename(filepath.Join(parent, "mem"), filepath.Join(parent, "ram"))
	m.Files[0].Path = "ram"
	host := artifact.NewLocal()
	host.Add(parent, m)

	child := filepath.Join(pool, "child")
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

// TestPushDerived: a file declared a copy of an indexed base with some runs written is pushed
// reading only the chunks those runs touch; the others take the base's digests (holes stay
// holes) and the manifest is the one a full read gives. A base changed since it was indexed, or
// a run outside the file, lends nothing: the file is pushed as any other.
func TestPushDerived(t *testing.T) {
	ctx := context.Background()
	s, host, parent, child, mem, dirty := pushedParent(t, 2*chunk+4096, 2*chunk+8192)
	d := map[string]artifact.Derived{"mem": {Base: filepath.Join(parent, "mem"), Written: []storage.Run{{Off: 2*chunk + 4096, Len: 4096}}}}
	m, st, err := host.PushDerived(ctx, s, "snapshot", "snap_child", child, []string{"mem"}, nil, d)
	if err != nil {
		t.Fatal(err)
	}
	// Chunks 0, 5 and 6 named from the parent, 1, 3 and 4 holes; 2 read and sent.
	checkChildPush(t, s, m, st, child, dirty)

	bad := map[string]artifact.Derived{"mem": {Base: d["mem"].Base, Written: []storage.Run{{Off: int64(len(mem)), Len: 4096}}}}
	if _, st, err := host.PushDerived(ctx, s, "snapshot", "snap_bad_run", child, []string{"mem"}, nil, bad); err != nil || st.Known != 0 {
		t.Fatalf("push with a run outside the file: %+v %v (want nothing known)", st, err)
	}
	pf, _ := os.OpenFile(filepath.Join(parent, "mem"), os.O_WRONLY, 0)
	pf.WriteAt([]byte{1}, 0)
	pf.Close()
	if _, st, err := host.PushDerived(ctx, s, "snapshot", "snap_child2", child, []string{"mem"}, nil, d); err != nil || st.Known != 0 {
		t.Fatalf("push after the base changed: %+v %v (want nothing known)", st, err)
	}
}

// checkChildPush checks the push m (stats st) of snapshot snap_child's mem (in dir child, whose
// parent is makeArtifact's with chunk 2 changed): 3 chunks known unread, 3 holes, 4 chunks and 1
// sent; its digests those a full read gives; pulled back, its bytes are want.
func checkChildPush(t *testing.T, s blob.Store, m artifact.Manifest, st artifact.Stats, child string, want []byte) {
	t.Helper()
	ctx := context.Background()
	if st.Known != 3 || st.Holes != 3 || st.Chunks != 4 || st.Transferred != 1 {
		t.Fatalf("push of the child: %+v (want 3 known, 3 holes, 4 chunks, 1 sent)", st)
	}
	full, _, err := artifact.Push(ctx, fileStore(t), "snapshot", "snap_child", child, []string{"mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Files[0].Chunks, full.Files[0].Chunks) {
		t.Fatalf("digests named unread differ from a full read:\n%v\n%v", m.Files[0].Chunks, full.Files[0].Chunks)
	}
	out := t.TempDir()
	if _, _, err := artifact.Pull(ctx, s, "snapshot", "snap_child", out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "mem")); !bytes.Equal(got, want) {
		t.Fatal("pulled bytes differ")
	}
}
