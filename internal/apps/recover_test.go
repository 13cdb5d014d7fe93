package apps

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/testenv/fakehost"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestRecoverAfterRestart: a server stopped mid-build (its build blocked in the build sandbox's
// exec, its service never closed: a crash) leaves one deployment building and the next queued;
// a new service over the same (SQLite: one server) store records them failed with
// ErrServerStopped at its start and
// kills the build sandbox, leaving the live deployment and its route alone. A deployment whose
// lease holds is left alone by the periodic recovery, one whose lease passed is failed; one the
// new server took after its start is not failed by its start's recovery. Over a real
// SQLite store and the fake host agent behind a proxy that holds execs.
func TestRecoverAfterRestart(t *testing.T) {
	ctx := context.Background()
	st := testenv.SQLiteStore(t)
	ag := agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	agURL, _ := url.Parse(ag.URL())
	fwd := httputil.NewSingleHostReverseProxy(agURL)
	fwd.ErrorLog = log.New(io.Discard, "", 0) // the held exec's end when the old server closes
	execs, hold := make(chan string, 4), make(chan struct{})
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/exec") {
			execs <- r.URL.Path
			<-hold
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	t.Cleanup(func() { close(hold) }) // runs first: the held exec returns, the old service can close
	newService := func() *Service {   // a server: its own scheduler and services over the store
		sbs, tpls := fakehost.Services(t, st, proxy.URL, "tok")
		return New(Config{ProductDeps: sandboxes.ProductDeps{Store: st, Logger: fakehost.Quiet, Templates: tpls, Sandboxes: sbs}})
	}
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	old := newService()
	t.Cleanup(old.Close)
	a, err := old.Create(ctx, "team_1", v1.AppSpec{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	// The live deployment (recorded as a finished deploy leaves it) and a deployment of another
	// replica whose lease holds.
	live, err := st.CreateDeployment(ctx, store.Deployment{ID: "dep_live", AppID: a.ID, TeamID: a.TeamID, State: Deploying, Source: "upload"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.SetLiveDeployment(ctx, a.ID, "", live.ID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := st.CreateDeployment(ctx, store.Deployment{ID: "dep_held", AppID: a.ID, TeamID: a.TeamID, State: Building,
		Source: "upload", LeaseUntil: time.Now().Add(LeaseTime / 2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDeployment(ctx, store.Deployment{ID: "dep_lost", AppID: a.ID, TeamID: a.TeamID, State: Building,
		Source: "upload", LeaseUntil: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := bundle.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	building, err := old.Deploy(ctx, "team_1", "web", src, Source{})
	if err != nil {
		t.Fatal(err)
	}
	<-execs // the build runs in its sandbox: held there
	queued, err := old.Deploy(ctx, "team_1", "web", src, Source{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(id string) store.Deployment {
		d, err := st.GetDeployment(ctx, a.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := get(building.ID); d.State != Building {
		t.Fatalf("before the restart: %s", d.State)
	}
	buildSbs, _, err := st.ListSandboxes(ctx, store.SandboxFilter{Metadata: map[string]string{"pandastack.deployment": building.ID}})
	if err != nil || len(buildSbs) != 1 {
		t.Fatalf("build sandboxes %v %v", buildSbs, err)
	}

	// Periodic recovery (replicas over PostgreSQL) fails a deployment whose lease passed and
	// leaves those whose lease holds.
	cur := newService()
	t.Cleanup(cur.Close)
	if err := cur.Recover(ctx, false); err != nil {
		t.Fatal(err)
	}
	if d := get("dep_lost"); d.State != Failed || d.Error != ErrServerStopped {
		t.Errorf("a deployment whose lease passed: %s %q", d.State, d.Error)
	}
	for _, id := range []string{building.ID, queued.ID, "dep_held"} {
		if d := get(id); d.State == Failed {
			t.Fatalf("%s with its lease held was recovered", id)
		}
	}
	// The new server's start: the old one's unfinished deployments are failed, not one the new
	// server took meanwhile.
	if _, err := st.CreateDeployment(ctx, store.Deployment{ID: "dep_new", AppID: a.ID, TeamID: a.TeamID, State: Queued,
		Source: "upload", LeaseUntil: st.Clock(ctx).Add(LeaseTime)}); err != nil {
		t.Fatal(err)
	}
	if err := cur.Recover(ctx, true); err != nil {
		t.Fatal(err)
	}
	cur.Wait()
	for _, id := range []string{building.ID, queued.ID, "dep_held"} {
		d := get(id)
		if d.State != Failed || d.Error != ErrServerStopped || d.FinishedAt.IsZero() || !d.LeaseUntil.IsZero() ||
			!strings.Contains(d.Logs, ErrServerStopped) {
			t.Errorf("%s after the restart: %+v", id, d)
		}
	}
	if sb, err := st.GetSandbox(ctx, buildSbs[0].ID); err != nil || sb.State != store.StateKilled {
		t.Errorf("build sandbox: %s %v", sb.State, err)
	}
	if slices := ag.Running(); len(slices) != 0 {
		t.Errorf("running on the host: %v", slices)
	}
	if d := get("dep_new"); d.State != Queued {
		t.Errorf("the new server's own deployment: %s", d.State)
	}
	if d := get(live.ID); d.State != Live {
		t.Errorf("live deployment: %s", d.State)
	}
	if got, _ := st.GetTeamApp(ctx, "team_1", a.ID); got.LiveDeploymentID != live.ID {
		t.Errorf("route moved to %q", got.LiveDeploymentID)
	}
}
