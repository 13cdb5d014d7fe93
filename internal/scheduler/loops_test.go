package scheduler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/store"
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
