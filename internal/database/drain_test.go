package database

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/blob"
)

// gatedBlob is a file blob store whose Puts wait while the gate is shut: it holds a drain mid-way
// while another replica tries the same database, and shows whether a drain stores segments
// concurrently (two Puts in flight at once). Puts under a context marked other are counted apart
// and never wait.
type gatedBlob struct {
	blob.Store
	mu        sync.Mutex
	shut      bool
	inFlight  int
	puts      int
	otherPuts int
	entered   chan struct{} // closed at the first Put while shut
	two       chan struct{} // closed when two Puts are in flight at once
	open      chan struct{} // closed by the test: Puts go through
}

type otherKey struct{}

func (g *gatedBlob) Put(ctx context.Context, key string, body io.ReadSeeker) error {
	g.mu.Lock()
	shut := g.shut
	if ctx.Value(otherKey{}) != nil {
		g.otherPuts++
		shut = false
	} else {
		g.puts++
	}
	if shut {
		g.inFlight++
		switch g.inFlight {
		case 1:
			close(g.entered)
		case 2:
			close(g.two)
		}
	}
	g.mu.Unlock()
	if shut {
		<-g.open
	}
	return g.Store.Put(ctx, key, body)
}

// segment is the content of a made-up WAL file i: compressible, as a WAL segment's end is.
func segment(i int) []byte {
	return append(bytes.Repeat(fmt.Appendf(nil, "wal record %d ", i), 4096), make([]byte, 1<<20)...)
}

// TestDrainOneReplicaAtATime: two server replicas on one PostgreSQL store archive one database.
// While one drains it (its lease held), the other leaves it alone: no segment is read or stored
// twice. A drain moves several segments at once. Segments are gzipped in the blob store and
// deleted from the VM's spool. Once the drain ends (the lease let go) the other replica drains
// what comes next; a lease held by a replica that died stops counting when it lapses.
func TestDrainOneReplicaAtATime(t *testing.T) {
	ctx := context.Background()
	fs, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bs := &gatedBlob{Store: fs, shut: true, entered: make(chan struct{}), two: make(chan struct{}), open: make(chan struct{})}
	c := twoReplicas(t, "drain", bs, 0)
	tgt, err := c.a.cfg.Sandboxes.Target(ctx, c.sb)
	if err != nil {
		t.Fatal(err)
	}
	files := tgt.FilesAs("root")
	spool := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			b := segment(i)
			if _, err := files.Write(ctx, c.sb.ID, path.Join(walSpool, fmt.Sprintf("0000000100000000000000%02X", i)), bytes.NewReader(b), int64(len(b))); err != nil {
				t.Fatal(err)
			}
		}
	}
	spool(1, 7)
	if err := files.Mkdir(ctx, c.sb.ID, walSpool+"/.000000010000000000000007.tmp"); err != nil { // not a file: left alone
		t.Fatal(err)
	}

	drained := make(chan int, 1)
	go func() {
		n, err := c.a.DrainWAL(ctx)
		if err != nil {
			t.Error(err)
		}
		drained <- n
	}()
	<-bs.entered // A holds the lease and is storing a segment
	if n, err := c.b.DrainWAL(context.WithValue(ctx, otherKey{}, true)); err != nil || n != 0 || bs.otherPuts != 0 {
		t.Fatalf("B drained %d segments (%v, %d stored) of a database A is draining", n, err, bs.otherPuts)
	}
	select {
	case <-bs.two:
	case <-time.After(30 * time.Second):
		t.Fatal("A stores one segment at a time: no second Put while the first is in flight")
	}
	bs.mu.Lock()
	bs.shut = false
	bs.mu.Unlock()
	close(bs.open)
	if n := <-drained; n != 6 {
		t.Fatalf("A drained %d segments, want 6", n)
	}
	if bs.puts != 6 {
		t.Fatalf("%d puts for 6 segments", bs.puts)
	}
	for i := 1; i < 7; i++ {
		key := prefix(c.d.ID) + fmt.Sprintf("wal/0000000100000000000000%02X.gz", i)
		r, err := fs.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := fs.Stat(ctx, key)
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		r.Close()
		if err != nil || !bytes.Equal(got, segment(i)) {
			t.Fatalf("%s does not gunzip to the segment (%v)", key, err)
		}
		if info.Size*10 > int64(len(got)) {
			t.Fatalf("%s: %d bytes stored for %d", key, info.Size, len(got))
		}
	}
	left, err := files.List(ctx, c.sb.ID, walSpool, 1)
	if err != nil || len(left) != 1 {
		t.Fatalf("the spool after the drain: %+v %v", left, err)
	}

	// The lease was let go: B drains what the archiver copies next.
	spool(7, 9)
	if n, err := c.b.DrainWAL(ctx); err != nil || n != 2 {
		t.Fatalf("B drained %d (%v), want 2", n, err)
	}
	// A replica that died holding the lease: the others wait for it to lapse.
	now := c.sts[0].Clock(ctx)
	if ok, err := c.sts[0].ClaimDatabaseDrain(ctx, c.d.ID, "r_dead", now, now.Add(time.Minute)); err != nil || !ok {
		t.Fatalf("claim of a free lease: %v %v", ok, err)
	}
	spool(9, 10)
	if n, err := c.a.DrainWAL(ctx); err != nil || n != 0 {
		t.Fatalf("A drained %d (%v) under a dead replica's live lease", n, err)
	}
	if _, err := c.sts[0].ClaimDatabaseDrain(ctx, c.d.ID, "r_dead", now, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.a.DrainWAL(ctx); err != nil || n != 1 {
		t.Fatalf("A drained %d (%v) once the dead replica's lease lapsed, want 1", n, err)
	}
}
