package scheduler

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// settable is a clock tests move by hand.
type settable struct {
	mu sync.Mutex
	t  time.Time
}

func (c *settable) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *settable) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// agentLists is a host agent whose sandbox list calls are counted and, while block is open,
// never answered (a slow or hung host).
func agentLists(t *testing.T, block bool) (url string, lists *atomic.Int64) {
	lists = &atomic.Int64{}
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/sandboxes" {
			lists.Add(1)
			if block {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"sandboxes":[]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"snapshots":[],"volumes":[]}`))
	}))
	t.Cleanup(func() { close(release); hs.Close() })
	return hs.URL, lists
}

// TestDownCheckNotStarvedByReconcile: a host whose reconcile hangs does not hold up marking a
// silent host down (the reconcile of every host runs in a loop of its own).
func TestDownCheckNotStarvedByReconcile(t *testing.T) {
	clk := &settable{t: time.Now()} // the store stamps heartbeats with the real clock
	s, st := newSched(t, Config{HeartbeatTimeout: 200 * time.Millisecond, ReconcileInterval: 20 * time.Millisecond, Now: clk.now})
	ctx := context.Background()
	hung, lists := agentLists(t, true)
	for _, r := range []Registration{
		{HostID: "hung", URL: hung, Token: "t", SlotsTotal: 4},
		{HostID: "silent", URL: "http://127.0.0.1:1", Token: "t", SlotsTotal: 4},
	} {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(time.Hour) // both are now silent for long
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.Run(rctx)
	for lists.Load() == 0 { // the reconcile is stuck on the hung host
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		h, err := st.GetHost(ctx, "silent")
		if err != nil {
			t.Fatal(err)
		}
		if h.State == store.HostDown {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the silent host was not marked down while a reconcile hung")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFirstHeartbeatReconcilesLater: a new server's first heartbeat from a known host answers
// without a reconcile (no list call inside it); Run's reconcile loop does it after.
func TestFirstHeartbeatReconcilesLater(t *testing.T) {
	ctx := context.Background()
	url, lists := agentLists(t, false)
	r := Registration{HostID: "h", URL: url, Token: "t", SlotsTotal: 4, Templates: []agentclient.Template{{Name: "base"}}}
	old, st := newSched(t, Config{})
	if err := old.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st, Logger: old.cfg.Logger}) // a server (re)started over the same store
	if err := s.Heartbeat(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 0 {
		t.Fatalf("the heartbeat reconciled the host (%d list calls)", n)
	}
	if err := s.Heartbeat(ctx, r); err != nil || lists.Load() != 0 {
		t.Fatalf("second heartbeat: %v, %d list calls", err, lists.Load())
	}
	s.reconcileDue(ctx)
	if n := lists.Load(); n != 1 {
		t.Fatalf("the queued reconcile made %d list calls, want 1", n)
	}
	s.reconcileDue(ctx) // the queue is empty now
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d list calls after the queue emptied", n)
	}
}

// TestPlacementSkipsSilentHosts: a host silent for more than two heartbeat intervals is not a
// candidate, though not marked down yet (it would look emptiest and rank first).
func TestPlacementSkipsSilentHosts(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Add(-time.Hour) // this scheduler has run for an hour: past its start-up grace
	calls := 0
	s, st := newSched(t, Config{HeartbeatTimeout: 15 * time.Second, Now: func() time.Time {
		calls++
		if calls == 1 {
			return start
		}
		return time.Now()
	}})
	path := filepath.Join(t.TempDir(), "s.db") // a store whose file this test can write to
	st.Close()
	st, err := store.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s.cfg.Store = st
	for _, r := range []Registration{reg("busy", 2000, 3, tmpl("base", true)), reg("silent", 8000, 0, tmpl("base", true))} {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.Place(ctx, "base"); !equal(ids(got), []string{"silent", "busy"}) {
		t.Fatalf("placement %v", ids(got))
	}
	setLastHeartbeat(t, path, "silent", time.Now().Add(-11*time.Second)) // missed two 5 s beats
	for _, place := range []func(context.Context) ([]store.Host, error){
		func(ctx context.Context) ([]store.Host, error) { return s.Place(ctx, "base") },
		s.PlaceVolume,
	} {
		if got, err := place(ctx); err != nil || !equal(ids(got), []string{"busy"}) {
			t.Fatalf("placement with a silent host: %v %v", ids(got), err)
		}
	}
	if h, _ := st.GetHost(ctx, "silent"); h.State != store.HostUp {
		t.Fatal("the silent host is not down yet")
	}
}

// setLastHeartbeat writes a host's last heartbeat in the store behind its back (the store stamps
// heartbeats with its own clock).
func setLastHeartbeat(t *testing.T, path, hostID string, at time.Time) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE hosts SET last_heartbeat = ? WHERE id = ?`, at.UnixMicro(), hostID); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileAllOneReplica: of two servers on one PostgreSQL only the one holding the
// reconciler lock lists the hosts; the other takes over once it is let go.
func TestReconcileAllOneReplica(t *testing.T) {
	ctx := context.Background()
	url, lists := agentLists(t, false)
	var replicas []*Scheduler
	for _, st := range replicaStores(t, "reconcile") {
		s := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := s.Register(ctx, Registration{HostID: "h", URL: url, Token: "t", SlotsTotal: 4}); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, s)
	}
	lists.Store(0)
	for i, want := range []int64{1, 1, 2} {
		replicas[i%2].ReconcileAll(ctx)
		if n := lists.Load(); n != want {
			t.Fatalf("after ReconcileAll %d: %d list calls, want %d", i, n, want)
		}
	}
	replicas[0].reconciler.Release()
	replicas[1].ReconcileAll(ctx)
	if n := lists.Load(); n != 3 {
		t.Fatalf("after the lock passed: %d list calls", n)
	}
}

// TestCheckHostsOneReplica: of two servers on one PostgreSQL only the one holding the down-check
// lock marks silent hosts down; the other takes over once it is let go.
func TestCheckHostsOneReplica(t *testing.T) {
	ctx := context.Background()
	sts := replicaStores(t, "downcheck")
	st := sts[0]
	// The scheduler's clock runs ahead of the store's (which stamps the heartbeats) a minute at a
	// time: a host registered before later() has been silent past the timeout after it.
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	later := func() { ahead.Add(int64(time.Minute)) }
	var replicas []*Scheduler
	for _, st := range sts {
		replicas = append(replicas, New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock}))
	}
	register := func(id string) {
		t.Helper()
		if err := replicas[0].Register(ctx, Registration{HostID: id, URL: "http://127.0.0.1:9", Token: "t", SlotsTotal: 4}); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id string) string {
		t.Helper()
		h, err := st.GetHost(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return h.State
	}
	register("h1")
	register("h2")
	later() // both silent for a minute, past the timeout
	if mine, err := replicas[0].downCheck.Hold(ctx); !mine || err != nil {
		t.Fatalf("replica 0 could not take the free lock: %v %v", mine, err)
	}
	if err := replicas[1].CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	if state("h1") != store.HostUp || state("h2") != store.HostUp {
		t.Fatal("the replica without the down-check lock marked hosts down")
	}
	if err := replicas[0].CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	if state("h1") != store.HostDown || state("h2") != store.HostDown {
		t.Fatalf("the holder did not mark the silent hosts down: %s %s", state("h1"), state("h2"))
	}
	replicas[0].downCheck.Release()
	register("h1") // up again, then silent
	later()
	if err := replicas[1].CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	if state("h1") != store.HostDown {
		t.Fatal("the other replica did not take the down check over once the lock was let go")
	}
}

// replicaStores starts PostgreSQL and returns two stores on one new database of it, as two
// server replicas have (closed, with PostgreSQL stopped, at the test's end).
func replicaStores(t *testing.T, name string) [2]*store.Store {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Stop)
	u, err := pg.NewDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	var sts [2]*store.Store
	for i := range sts {
		if sts[i], err = store.OpenPostgres(context.Background(), u); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sts[i].Close() })
	}
	return sts
}
