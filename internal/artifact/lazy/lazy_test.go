package lazy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/artifact/lazy"
	"github.com/pandastack/pandastack/internal/blob"
)

const chunk = artifact.ChunkSize

// fuseStore skips a test on a machine without FUSE, else returns an empty file store.
func fuseStore(t *testing.T) blob.Store {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine")
	}
	s, err := blob.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// setup pushes a 5.5-chunk memory file (chunk 1 all zero) and returns the store, its manifest
// and the bytes.
func setup(t *testing.T) (blob.Store, artifact.Manifest, []byte) {
	ctx, s := context.Background(), fuseStore(t)
	src := t.TempDir()
	mem := make([]byte, 5*chunk+chunk/2)
	rand.Read(mem[:chunk])
	rand.Read(mem[2*chunk:])
	os.MkdirAll(filepath.Join(src, "snap"), 0o700)
	if err := os.WriteFile(filepath.Join(src, "snap", "mem"), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	m, _, err := artifact.Push(ctx, s, "snapshot", "lazy", src, []string{"snap/mem"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, m, mem
}

func serve(t *testing.T, m artifact.Manifest, c *lazy.Cache) *lazy.Mount {
	// Not under t.TempDir (mode 0700): another user must reach the mount.
	dir, err := os.MkdirTemp("", "pandastack-lazy-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.Remove(dir) }) // runs after the unmount below
	mt, err := lazy.Serve(dir, m, c, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mt.Close() })
	return mt
}

func TestLazyReadsOnlyWhatIsTouched(t *testing.T) {
	s, m, mem := setup(t)
	c, err := lazy.NewCache(t.TempDir(), s)
	if err != nil {
		t.Fatal(err)
	}
	mt := serve(t, m, c)
	p := filepath.Join(mt.Dir, "snap", "mem")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if st.Size() != int64(len(mem)) || st.Mode().Perm() != 0o444 {
		t.Fatalf("served file: size %d mode %v", st.Size(), st.Mode())
	}
	// One page in chunk 3, one in the zero chunk 1: one fetch.
	page := make([]byte, 4096)
	if _, err := f.ReadAt(page, 3*chunk+8192); err != nil || !bytes.Equal(page, mem[3*chunk+8192:3*chunk+8192+4096]) {
		t.Fatalf("page of chunk 3: %v", err)
	}
	if _, err := f.ReadAt(page, chunk+100); err != nil || !bytes.Equal(page, make([]byte, 4096)) {
		t.Fatalf("page of the zero chunk: %v", err)
	}
	if n := c.Fetched.Load(); n != 1 {
		t.Fatalf("%d chunks fetched for one touched data chunk", n)
	}
	// A private mapping (as QEMU maps guest RAM) sees the whole file byte-exact. It is made by
	// another process: a Go process that faults on a file it serves itself can deadlock (a fault
	// holds its thread where the garbage collector cannot stop it, and the server waits for it).
	script := `import hashlib, mmap, sys
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
print(hashlib.sha256(m).hexdigest())
m[0] ^= 0xFF  # private: stays in this mapping
`
	out, err := exec.Command("python3", "-c", script, p).Output()
	want := sha256.Sum256(mem)
	if err != nil || strings.TrimSpace(string(out)) != hex.EncodeToString(want[:]) {
		t.Fatalf("mapped file: %s %v, want digest %x", out, err, want)
	}
	if n := c.Fetched.Load(); n != 5 {
		t.Fatalf("%d chunks fetched after reading all, want the 5 data chunks", n)
	}
	tr := mt.Trace()
	if len(tr) != 6 || tr[0] != (lazy.Touch{Path: "snap/mem", Chunk: 3}) || tr[1].Chunk != 1 {
		t.Fatalf("trace = %v, want chunk 3 then 1 first, and all 6", tr)
	}
	// Another user (the VMM runs unprivileged) can read it.
	out, err = exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "head", "-c", "16", p).Output()
	if err != nil || !bytes.Equal(out, mem[:16]) {
		t.Fatalf("read as an unprivileged user: %v", err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o600); err == nil {
		t.Fatal("a served file accepted a write")
	}
}

func TestLazyPrefetchAndSharedCache(t *testing.T) {
	s, m, mem := setup(t)
	ctx := context.Background()
	c, _ := lazy.NewCache(t.TempDir(), s)
	order := []lazy.Touch{{"snap/mem", 5}, {"snap/mem", 0}, {"snap/mem", 1}, {"snap/mem", 99}}
	if err := lazy.Prefetch(ctx, c, m, order, 4); err != nil {
		t.Fatal(err)
	}
	if n := c.Fetched.Load(); n != 2 {
		t.Fatalf("prefetch fetched %d, want 2 (the zero chunk and the bad index skipped)", n)
	}
	// Two mounts of one artifact share the cache: reading everything through both fetches each
	// data chunk once.
	for range 2 {
		mt := serve(t, m, c)
		b, err := os.ReadFile(filepath.Join(mt.Dir, "snap", "mem"))
		if err != nil || !bytes.Equal(b, mem) {
			t.Fatalf("read through a mount: %v", err)
		}
	}
	if n := c.Fetched.Load(); n != 5 {
		t.Fatalf("%d fetches for 5 data chunks over two mounts", n)
	}
}

func TestLazyCorruptChunkIsEIO(t *testing.T) {
	s, m, _ := setup(t)
	ctx := context.Background()
	bad := m.Files[0].Chunks[2]
	s.Put(ctx, "chunks/"+bad, bytes.NewReader(make([]byte, chunk)))
	var logged []string
	c, _ := lazy.NewCache(t.TempDir(), s)
	mt, err := lazy.Serve(t.TempDir(), m, c, func(msg string, args ...any) { logged = append(logged, msg) })
	if err != nil {
		t.Fatal(err)
	}
	defer mt.Close()
	f, err := os.Open(filepath.Join(mt.Dir, "snap", "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, 2*chunk); err == nil || !errorIs(err, syscall.EIO) {
		t.Fatalf("read of a corrupt chunk: %v, want EIO", err)
	}
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("a good chunk after a bad one: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Dir(), bad)); err == nil {
		t.Fatal("a corrupt chunk entered the cache")
	}
	if len(logged) == 0 {
		t.Fatal("the failed read was not logged")
	}
}

func errorIs(err error, errno syscall.Errno) bool {
	pe, ok := err.(*os.PathError)
	return ok && pe.Err == errno
}

// TestServerProcess: a mount served by a process of its own (in its own session, so it outlives
// the agent that started it) reads back the artifact's bytes; chunks this host holds in an
// indexed artifact directory are cloned from there, not fetched (they are gone from the store
// here, so a fetch would fail the read); unmounting ends the process.
func TestServerProcess(t *testing.T) {
	_, m, mem := setup(t)
	storeDir := t.TempDir()
	fs, err := blob.OpenFile(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	// The same artifact in a file store whose chunks 0 and 2 exist only on this host.
	local := artifact.NewLocal()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "snap"), 0o700)
	os.WriteFile(filepath.Join(src, "snap", "mem"), mem, 0o600)
	if _, _, err := local.Push(context.Background(), fs, "snapshot", "lazy", src, []string{"snap/mem"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if err := os.Remove(filepath.Join(storeDir, "chunks", m.Files[0].Chunks[i])); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "pandastack-lazy-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	pid, err := lazy.Start(lazy.ProcessSpec{Mount: dir, CacheDir: t.TempDir(), Store: "file://" + storeDir, Manifest: m,
		IndexDirs: []string{src}, Log: filepath.Join(t.TempDir(), "lazy.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Unmount(dir)
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Errorf("server %d is in session %d, not its own", pid, sid)
	}
	got, err := os.ReadFile(filepath.Join(dir, "snap", "mem"))
	if err != nil || !bytes.Equal(got, mem) {
		t.Fatalf("read through the server process: %v (equal %v)", err, bytes.Equal(got, mem))
	}
	// Its reads are this artifact's first restore: the server keeps their order in the store.
	var trace []lazy.Touch
	for range 200 {
		if trace, err = lazy.LoadTrace(context.Background(), fs, m); err != nil || trace != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || len(trace) != 6 || trace[0].Chunk != 0 || trace[5].Chunk != 5 {
		t.Fatalf("trace the server saved: %v, %v; want chunks 0 to 5", trace, err)
	}
	if err := lazy.Unmount(dir); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("server %d still runs after its mount was unmounted", pid)
}

// The first restore's reads are recorded once they pause and kept beside the manifest; a later
// restore prefetches those chunks first, in that order; entries that name no chunk of the
// artifact are dropped on load; deleting the artifact deletes its trace.
func TestLazyTraceRecordedThenReplayed(t *testing.T) {
	s, m, mem := setup(t)
	ctx := context.Background()
	if tr, err := lazy.LoadTrace(ctx, s, m); err != nil || tr != nil {
		t.Fatalf("trace before any restore = %v, %v; want none", tr, err)
	}
	c, _ := lazy.NewCache(t.TempDir(), s)
	mt := serve(t, m, c)
	f, err := os.Open(filepath.Join(mt.Dir, "snap", "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for _, i := range []int64{4, 0, 4, 2} {
		if _, err := f.ReadAt(page, i*chunk+4096); err != nil || !bytes.Equal(page, mem[i*chunk+4096:i*chunk+8192]) {
			t.Fatalf("page of chunk %d: %v", i, err)
		}
	}
	rec, err := lazy.RecordTrace(ctx, s, mt, m, 200*time.Millisecond, 10*time.Second)
	want := []lazy.Touch{{"snap/mem", 4}, {"snap/mem", 0}, {"snap/mem", 2}}
	if err != nil || !slices.Equal(rec, want) {
		t.Fatalf("recorded %v, %v; want %v", rec, err, want)
	}
	got, err := lazy.LoadTrace(ctx, s, m)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("loaded %v, %v; want %v", got, err, want)
	}
	order := lazy.PrefetchOrder(m, got)
	wantOrder := []int{4, 0, 2, 1, 3, 5}
	if len(order) != len(wantOrder) {
		t.Fatalf("prefetch order %v, want chunks %v", order, wantOrder)
	}
	for i, c := range wantOrder {
		if order[i] != (lazy.Touch{Path: "snap/mem", Chunk: c}) {
			t.Fatalf("prefetch order %v, want chunks %v", order, wantOrder)
		}
	}
	// A trace naming chunks the artifact lacks only loses those entries.
	bad := []lazy.Touch{{"snap/mem", 5}, {"snap/mem", 6}, {"snap/mem", -1}, {"../etc/passwd", 0}, {"snap/mem", 1}}
	if err := lazy.SaveTrace(ctx, s, m, bad); err != nil {
		t.Fatal(err)
	}
	if got, err := lazy.LoadTrace(ctx, s, m); err != nil || !slices.Equal(got, []lazy.Touch{{"snap/mem", 5}, {"snap/mem", 1}}) {
		t.Fatalf("loaded a bad trace as %v, %v", got, err)
	}
	if err := artifact.Delete(ctx, s, m.Kind, m.Name); err != nil {
		t.Fatal(err)
	}
	if tr, err := lazy.LoadTrace(ctx, s, m); err != nil || tr != nil {
		t.Fatalf("trace after the artifact's delete = %v, %v; want none", tr, err)
	}
}

// A memory image cut in small chunks (MemoryChunkSize) is served byte-exact, reads spanning
// chunks included, and a read fetches only the small chunks it touches.
func TestLazySmallChunks(t *testing.T) {
	ctx, s := context.Background(), fuseStore(t)
	const small = artifact.MemoryChunkSize
	src := t.TempDir()
	mem := make([]byte, 10*small+small/2)
	rand.Read(mem[:3*small])
	rand.Read(mem[5*small:])
	if err := os.WriteFile(filepath.Join(src, "ram"), mem, 0o600); err != nil {
		t.Fatal(err)
	}
	m, _, err := artifact.Push(ctx, s, "snapshot", "small", src, []string{"ram"}, nil)
	if err != nil || m.Files[0].ChunkSize != small {
		t.Fatalf("push: %v (cut %d)", err, m.Files[0].ChunkSize)
	}
	c, err := lazy.NewCache(t.TempDir(), s)
	if err != nil {
		t.Fatal(err)
	}
	mt := serve(t, m, c)
	f, err := os.Open(filepath.Join(mt.Dir, "ram"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	span := make([]byte, 8192) // the last page of chunk 1 and the first of chunk 2
	if _, err := f.ReadAt(span, 2*small-4096); err != nil || !bytes.Equal(span, mem[2*small-4096:2*small+4096]) {
		t.Fatalf("read across chunks 1 and 2: %v", err)
	}
	if n := c.Fetched.Load(); n != 2 {
		t.Fatalf("%d chunks fetched for a read of two", n)
	}
	all, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(all, mem) {
		t.Fatalf("whole file: %v (equal %v)", err, bytes.Equal(all, mem))
	}
}
