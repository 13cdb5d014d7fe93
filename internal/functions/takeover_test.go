package functions

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/store/pgtest"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/testenv/fakehost"
)

// newReplica is one server's functions service (its own scheduler, sandbox and template
// services) over st and the fake host agent ag, with runs' leases of lease (0: the default).
func newReplica(t *testing.T, st *store.Store, ag *agenttest.Agent, lease time.Duration) *Service {
	t.Helper()
	sbs, tpls := fakehost.Services(t, st, ag.URL(), ag.Token)
	svc := New(Config{LeaseTime: lease, ProductDeps: sandboxes.ProductDeps{Store: st, Logger: fakehost.Quiet, Templates: tpls, Sandboxes: sbs}})
	t.Cleanup(svc.Close)
	return svc
}

// addFunction records team_1 (if new) and a function f with the given concurrency; warm gives
// its version a warm snapshot (else an invocation has to bake one, which the fake agent cannot).
func addFunction(t *testing.T, svc *Service, maxConcurrency int64, warm bool) (store.Function, store.FunctionVersion) {
	t.Helper()
	ctx := context.Background()
	st := svc.cfg.Store
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	v := store.FunctionVersion{TeamID: "team_1", Runtime: "python3", Handler: "main.handler", TimeoutSeconds: 60,
		MaxConcurrency: maxConcurrency, State: "ready"}
	if warm {
		sb, err := svc.cfg.Sandboxes.Create(ctx, "team_1", sandboxes.CreateParams{Template: "base", AgentTemplate: "base"})
		if err != nil {
			t.Fatal(err)
		}
		sn, err := svc.cfg.Sandboxes.Snapshot(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		v.SnapshotID = sn.ID
	}
	fn, v, err := st.AddFunctionVersion(ctx, "fn_test", "f", v)
	if err != nil {
		t.Fatal(err)
	}
	return fn, v
}

// gatedRunner stands in for the function's runner in every sandbox of the fake agent: the first
// invocation waits in the runner until release is closed (entered is closed when it is there);
// the others answer at once.
type gatedRunner struct {
	entered, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	first            bool
}

func newGatedRunner(ag *agenttest.Agent) *gatedRunner {
	g := &gatedRunner{entered: make(chan struct{}), release: make(chan struct{})}
	ag.ServePorts(g)
	return g
}

func (g *gatedRunner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	wait := !g.first
	g.first = true
	g.mu.Unlock()
	if wait {
		g.once.Do(func() { close(g.entered) })
		<-g.release
	}
	json.NewEncoder(w).Encode(invocation{Result: json.RawMessage(`"ok"`), DurationMS: 1})
}

// twoReplicas is two servers' functions services, each with its own store handle, on one
// PostgreSQL database and one fake host agent; replica A reaches the database through cut when
// it is not nil.
func twoReplicas(t *testing.T, pg *pgtest.Server, name string, lease time.Duration, cut *cutProxy) (a, b *Service, stA, stB *store.Store, ag *agenttest.Agent) {
	t.Helper()
	ctx := context.Background()
	url, err := pg.NewDatabase(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	ag = agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	urlA := url
	if cut != nil {
		urlA = cut.start(t, url)
	}
	stA, stB = testenv.PostgresStores(t, urlA, 1)[0], testenv.PostgresStores(t, url, 1)[0]
	return newReplica(t, stA, ag, lease), newReplica(t, stB, ag, lease), stA, stB, ag
}

// cutProxy stands between one replica and PostgreSQL: it forwards connections from a unix socket
// of its own to the server's, and while cut it holds every byte in flight both ways (a network
// partition; the connections stay up and go on when healed).
type cutProxy struct {
	mu   sync.Mutex
	cond *sync.Cond
	cut  bool
}

// start listens and returns the URL (url with the proxy's socket directory as its host).
func (p *cutProxy) start(t *testing.T, url string) string {
	t.Helper()
	p.cond = sync.NewCond(&p.mu)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	dir, err := os.MkdirTemp("", "pgcut")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := "/.s.PGSQL." + q.Get("port")
	ln, err := net.Listen("unix", dir+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); p.set(false) })
	server := q.Get("host") + sock
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", server)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
	q.Set("host", dir)
	u.RawQuery = q.Encode()
	return u.String()
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.cut {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// set cuts (true) or heals (false) the link.
func (p *cutProxy) set(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.cond.Broadcast()
	p.mu.Unlock()
}

// takenOver calls b's TakeOver until run id is no longer running (at most a minute) and returns it.
func takenOver(t *testing.T, b *Service, st *store.Store, fnID, id string) store.FunctionRun {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err := b.TakeOver(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := st.GetFunctionRun(ctx, fnID, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != RunRunning || time.Now().After(deadline) {
			return r
		}
	}
}

// answer is what an invocation returned.
type answer struct {
	run store.FunctionRun
	err error
}

// heldInvoke starts a sync invocation of fn on a that waits in g's runner and returns its run's
// id (read through st, which must show it running with a lease) and where its answer arrives.
func heldInvoke(t *testing.T, a *Service, st *store.Store, g *gatedRunner, fn store.Function) (string, <-chan answer) {
	t.Helper()
	ctx := context.Background()
	done := make(chan answer, 1)
	go func() {
		run, err := a.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync")
		done <- answer{run, err}
	}()
	<-g.entered
	runs, err := st.ListFunctionRuns(ctx, fn.ID, 0)
	if err != nil || len(runs) != 1 || runs[0].Status != RunRunning || runs[0].LeaseUntil.IsZero() {
		t.Fatalf("the run under way: %+v, %v; want one running with a lease", runs, err)
	}
	return runs[0].ID, done
}

// lostRun is whether r is a run recorded failed because its server was lost.
func lostRun(r store.FunctionRun) bool {
	return r.Status == RunFailed && r.ErrorType == "PlatformError" && r.ErrorMessage == ServerLost && !r.FinishedAt.IsZero() && r.LeaseUntil.IsZero()
}

// TestReplicas: two server replicas on one PostgreSQL store.
func TestReplicas(t *testing.T) {
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()

	// max_concurrency counts the function's running invocations on every replica: while one
	// replica runs the only slot's invocation, the other refuses with Exhausted (429); once it
	// ends the other runs.
	t.Run("ConcurrencyIsClusterWide", func(t *testing.T) {
		a, b, _, _, ag := twoReplicas(t, pg, "concurrency", 0, nil)
		fn, _ := addFunction(t, a, 1, true)
		g := newGatedRunner(ag)
		done := make(chan error, 1)
		go func() {
			run, err := a.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync")
			if err == nil && run.Status != RunSucceeded {
				t.Errorf("the first invocation: %+v", run)
			}
			done <- err
		}()
		<-g.entered
		run, err := b.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync")
		if !errdefs.Is(err, errdefs.Exhausted) {
			t.Errorf("the other replica's invocation while the only slot is taken: %+v, %v; want Exhausted", run, err)
		}
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if run, err := b.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync"); err != nil || run.Status != RunSucceeded {
			t.Errorf("the other replica's invocation once the slot is free: %+v, %v", run, err)
		}
	})

	// A sync invocation whose server dies (it stops renewing the run's lease and cannot write
	// any more) is recorded failed by another replica, and its slot is free again.
	t.Run("SyncRunServerLost", func(t *testing.T) {
		a, b, stA, stB, ag := twoReplicas(t, pg, "lost", 2*time.Second, nil)
		fn, _ := addFunction(t, a, 1, true)
		g := newGatedRunner(ag)
		defer close(g.release)
		id, _ := heldInvoke(t, a, stB, g, fn)
		a.Close() // server A dies: no more renewals, no more writes
		stA.Close()
		if r := takenOver(t, b, stB, fn.ID, id); !lostRun(r) {
			t.Fatalf("the lost run: %+v; want failed with %q", r, ServerLost)
		}
		if run, err := b.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync"); err != nil || run.Status != RunSucceeded {
			t.Errorf("an invocation on the live replica after the lost one: %+v, %v", run, err)
		}
	})

	// A server cut off from the database (not dead) past its run's lease: another replica
	// records the run lost; when the link comes back, the cut-off server's late lease renewal
	// and outcome must not overwrite that record, and its caller is answered with it.
	t.Run("SyncRunCutOff", func(t *testing.T) {
		cut := &cutProxy{}
		a, b, _, stB, ag := twoReplicas(t, pg, "cutoff", 2*time.Second, cut)
		fn, _ := addFunction(t, a, 1, true)
		g := newGatedRunner(ag)
		id, done := heldInvoke(t, a, stB, g, fn)
		cut.set(true) // A can no longer renew the lease
		if r := takenOver(t, b, stB, fn.ID, id); !lostRun(r) {
			t.Fatalf("the cut-off run: %+v; want failed with %q", r, ServerLost)
		}
		cut.set(false) // A is back: its renewal and then its outcome arrive late
		close(g.release)
		if got := <-done; got.err != nil || got.run.ID != id || !lostRun(got.run) {
			t.Errorf("the cut-off server's answer to its caller: %+v, %v; want the run as recorded (lost)", got.run, got.err)
		}
		if r, err := stB.GetFunctionRun(ctx, fn.ID, id); err != nil || !lostRun(r) {
			t.Errorf("the run after the cut-off server finished: %+v, %v; want still failed with %q", r, err, ServerLost)
		}
		if run, err := b.Invoke(ctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync"); err != nil || run.Status != RunSucceeded {
			t.Errorf("an invocation after the cut-off one: %+v, %v", run, err)
		}
	})
}

// TestTakeOver: an async run whose replica stopped (its lease passed) is taken over and attempted
// again; one whose last attempt was under way is recorded failed without running it again; one
// whose lease holds is left alone. Over a real store and the fake host agent (the function has
// no warm snapshot and the fake cannot bake one, so the resumed attempt fails on the platform
// side: what is checked is that it was attempted and recorded).
func TestTakeOver(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLiteStore(t)
	ag := agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	svc := newReplica(t, st, ag, 0)
	fn, v := addFunction(t, svc, 5, false)
	now := time.Now().UTC()
	for _, r := range []store.FunctionRun{
		{ID: "run_lost", Status: RunQueued, LeaseUntil: now.Add(-time.Minute)},
		{ID: "run_last", Status: RunRunning, Attempts: 1, LeaseUntil: now.Add(-time.Minute)},
		{ID: "run_held", Status: RunQueued, LeaseUntil: now.Add(time.Hour)},
	} {
		r.FunctionID, r.TeamID, r.Version, r.Trigger = fn.ID, fn.TeamID, v.Version, "async"
		if _, err := st.CreateFunctionRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	svc.Wait()
	get := func(id string) store.FunctionRun {
		r, err := st.GetFunctionRun(ctx, fn.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := get("run_lost"); r.Status != RunFailed || r.Attempts != 1 || r.ErrorType != "PlatformError" || !r.LeaseUntil.IsZero() || r.FinishedAt.IsZero() {
		t.Errorf("taken-over run: %+v, want attempted once and recorded", r)
	}
	if r := get("run_last"); r.Status != RunFailed || r.Attempts != 1 || r.ErrorMessage != ServerLost {
		t.Errorf("run lost during its last attempt: %+v", r)
	}
	if r := get("run_held"); r.Status != RunQueued || r.Attempts != 0 {
		t.Errorf("run with a live lease was touched: %+v", r)
	}
}

// TestTransports: an invocation reaches the runner over the port path by default, through the
// guest agent relay when asked to (WithTransport) and the host has it, and over the port path as
// the fallback when the host answers the relay with 404 (an agent from before it). Over a fake
// host agent whose runner answers both ways.
func TestTransports(t *testing.T) {
	ctx := context.Background()
	ag := agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	svc := newReplica(t, testenv.SQLiteStore(t), ag, 0)
	fn, _ := addFunction(t, svc, 5, true)
	g := newGatedRunner(ag)
	close(g.release)
	for _, c := range []struct {
		relay     bool
		transport string
		relayed   int
	}{{true, "", 0}, {true, TransportRelay, 1}, {true, TransportPort, 0}, {false, TransportRelay, 0}} {
		ag.ServeRelay(c.relay)
		before := ag.Relayed()
		tctx, err := WithTransport(ctx, c.transport)
		if err != nil {
			t.Fatal(err)
		}
		run, err := svc.Invoke(tctx, fn.TeamID, fn.ID, json.RawMessage(`{}`), "sync")
		if err != nil || run.Status != RunSucceeded || ag.Relayed()-before != c.relayed {
			t.Errorf("relay on the host %v, transport %q: %+v, %v; relayed %d, want %d", c.relay, c.transport, run, err, ag.Relayed()-before, c.relayed)
		}
	}
	if _, err := WithTransport(ctx, "carrier-pigeon"); !errdefs.Is(err, errdefs.Invalid) {
		t.Errorf("an unknown transport: %v", err)
	}
}
