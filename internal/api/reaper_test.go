package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// reapFleet is replicas (api.Servers, each with its scheduler) over one store and one fake host.
type reapFleet struct {
	t        *testing.T
	st       *store.Store
	agent    *agenttest.Agent
	replicas []*Server
	seq      int
	mu       sync.Mutex
	kills    map[string]int // agent kills per sandbox id
}

// newReapFleet serves n replicas over st; the host is reached at the URL hostURL makes of the
// fake's (nil: the fake itself).
func newReapFleet(t *testing.T, st *store.Store, n int, hostURL func(string) string) *reapFleet {
	t.Helper()
	ctx := context.Background()
	f := &reapFleet{t: t, st: st, agent: agenttest.New("host-a", agentToken, "base"), kills: map[string]int{}}
	t.Cleanup(f.agent.Close)
	f.agent.OnKill(func(id string, _ bool) { f.mu.Lock(); f.kills[id]++; f.mu.Unlock() })
	u := f.agent.URL()
	if hostURL != nil {
		u = hostURL(u)
	}
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team_r", Name: "r"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		sched := scheduler.New(scheduler.Config{Store: st, Logger: quietLogger()})
		sched.AddStaticAgent(u, agentToken)
		if err := sched.PollStatic(ctx); err != nil {
			t.Fatal(err)
		}
		f.replicas = append(f.replicas, New(Config{Store: st, Scheduler: sched, Logger: quietLogger()}))
	}
	return f
}

// expired adds n running sandboxes (on the host and in the store) whose TTL ran out.
func (f *reapFleet) expired(n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		f.seq++
		id := fmt.Sprintf("sb_r%d", f.seq)
		f.agent.AddSandbox(id, "base")
		past := time.Now().Add(-time.Minute)
		if _, err := f.st.CreateSandbox(context.Background(), store.Sandbox{ID: id, TeamID: "team_r", Template: "base",
			State: store.StateRunning, HostID: "host-a", CreatedAt: past, ExpiresAt: past}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *reapFleet) reap(replica, want int) {
	f.t.Helper()
	if n, err := f.replicas[replica].ReapOnce(context.Background()); n != want || err != nil {
		f.t.Fatalf("replica %d reaped %d (%v), want %d", replica, n, err, want)
	}
}

func postgresStore(t *testing.T) *store.Store {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Stop)
	u, err := pg.NewDatabase(context.Background(), "reaper")
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenPostgres(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestReaperOneReplica: of two servers on one PostgreSQL only the one holding the reaper lock
// reaps, so no sandbox is killed twice; the other takes over once the lock is let go.
func TestReaperOneReplica(t *testing.T) {
	f := newReapFleet(t, postgresStore(t), 2, nil)
	f.expired(3)
	f.reap(0, 3)
	f.expired(2)
	f.reap(1, 0) // replica 0 reaps
	f.reap(0, 2)
	f.replicas[0].reapLock().Release() // as when its process dies
	f.expired(1)
	f.reap(1, 1)
	f.reap(0, 0)
	for id, n := range f.kills {
		if n != 1 {
			t.Errorf("%s killed %d times", id, n)
		}
	}
	if len(f.kills) != 6 {
		t.Errorf("%d sandboxes killed, want 6", len(f.kills))
	}
}

// TestReaperKillsInParallel: a pass has several kills at its hosts at once (the host holds each
// kill until a second one is under way, or 10 s).
func TestReaperKillsInParallel(t *testing.T) {
	st, err := store.OpenSQLite(context.Background(), t.TempDir()+"/state.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	inFlight, peak := 0, 0
	two, once := make(chan struct{}), sync.Once{}
	barrier := func(agentURL string) string {
		target, _ := url.Parse(agentURL)
		proxy := httputil.NewSingleHostReverseProxy(target)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") {
				mu.Lock()
				inFlight++
				if peak = max(peak, inFlight); peak >= 2 {
					once.Do(func() { close(two) })
				}
				mu.Unlock()
				select {
				case <-two:
				case <-time.After(10 * time.Second):
				}
				mu.Lock()
				inFlight--
				mu.Unlock()
			}
			proxy.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	f := newReapFleet(t, st, 1, barrier)
	f.expired(4)
	f.reap(0, 4)
	mu.Lock()
	defer mu.Unlock()
	if peak < 2 {
		t.Fatalf("kills ran one at a time (peak %d)", peak)
	}
	if len(f.kills) != 4 {
		t.Fatalf("killed %v", f.kills)
	}
}

// TestReaperSlowKillHoldsNoBatch: a pass goes on reading and killing the expired rows past a batch
// while one kill of the batch is still at its host (the host holds that kill until every other
// sandbox is killed, or 10 s).
func TestReaperSlowKillHoldsNoBatch(t *testing.T) {
	st, err := store.OpenSQLite(context.Background(), t.TempDir()+"/state.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	total := reapBatch + reapWorkers + 20 // more than one read's worth
	var mu sync.Mutex
	killed := 0
	rest, once := make(chan struct{}), sync.Once{}
	slow := "/v1/sandboxes/sb_r1" // the oldest expiry: the first row of the first read
	held := false
	hold := func(agentURL string) string {
		target, _ := url.Parse(agentURL)
		proxy := httputil.NewSingleHostReverseProxy(target)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/") {
				if r.URL.Path == slow {
					select {
					case <-rest:
					case <-time.After(10 * time.Second):
						mu.Lock()
						held = true
						mu.Unlock()
					}
				} else {
					defer func() {
						mu.Lock()
						if killed++; killed == total-1 {
							once.Do(func() { close(rest) })
						}
						mu.Unlock()
					}()
				}
			}
			proxy.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	f := newReapFleet(t, st, 1, hold)
	f.expired(total)
	f.reap(0, total)
	mu.Lock()
	defer mu.Unlock()
	if held {
		t.Fatalf("the pass waited for the slow kill: %d others killed meanwhile, want %d", killed, total-1)
	}
	if len(f.kills) != total {
		t.Fatalf("%d sandboxes killed, want %d", len(f.kills), total)
	}
}
