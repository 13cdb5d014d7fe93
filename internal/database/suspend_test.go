package database

import (
	"context"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/testenv/fakehost"
)

// cluster is two server replicas' database services on one PostgreSQL store (sts), their
// sandboxes on the fake host ag, their archive in bs (nil: none), and a database d of team_1 on
// its sandbox sb.
type cluster struct {
	a, b *Service
	sts  []*store.Store
	ag   *agenttest.Agent
	d    store.Database
	sb   store.Sandbox
}

func twoReplicas(t *testing.T, name string, bs blob.Store, suspendAfter int64) cluster {
	t.Helper()
	ctx := context.Background()
	c := cluster{ag: agenttest.New("host-a", "tok", "base")}
	t.Cleanup(c.ag.Close)
	c.sts = testenv.PostgresStores(t, testenv.PostgresDatabase(t, name), 2)
	replica := func(st *store.Store) *Service {
		sbs, tpls := fakehost.Services(t, st, c.ag.URL(), c.ag.Token)
		return New(Config{ProductDeps: sandboxes.ProductDeps{Store: st, Logger: fakehost.Quiet, Templates: tpls, Sandboxes: sbs}, Blob: bs})
	}
	c.a, c.b = replica(c.sts[0]), replica(c.sts[1])
	if _, err := c.sts[0].CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.sb, err = c.a.cfg.Sandboxes.Create(ctx, "team_1", sandboxes.CreateParams{Template: "base", AgentTemplate: "base"}); err != nil {
		t.Fatal(err)
	}
	if c.d, err = c.sts[0].CreateDatabase(ctx, store.Database{ID: "db_one", TeamID: "team_1", Name: "one", Version: "17",
		SandboxID: c.sb.ID, State: "running", SuspendAfterSeconds: suspendAfter}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSuspendCountsEveryReplica: two server replicas on one PostgreSQL store. A database with a
// client on one replica is not suspended by the other, however long that one has seen no client;
// once the client leaves, the other waits suspend_after_seconds from the leaving, not from its own
// last sight; a replica that stops reporting (dead, its clients with it) stops counting.
func TestSuspendCountsEveryReplica(t *testing.T) {
	ctx := context.Background()
	c := twoReplicas(t, "suspend", nil, 1)
	a, b, sts, d, sb := c.a, c.b, c.sts, c.d, c.sb
	state := func() string {
		t.Helper()
		got, err := sts[0].GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	suspend := func(svc *Service) int {
		t.Helper()
		n, err := svc.SuspendIdle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	b.Active(d.ID, 1) // a client on B
	if n := suspend(b); n != 0 {
		t.Fatalf("B suspended its own connected database")
	}
	time.Sleep(1100 * time.Millisecond) // past suspend_after_seconds for A, which never saw a client
	if n := suspend(a); n != 0 || state() != store.StateRunning {
		t.Fatalf("A suspended a database B has a client on (%d, %s)", n, state())
	}

	// The client leaves B; A has seen nothing for long, but the leaving was just now.
	b.Active(d.ID, -1)
	if n := suspend(b); n != 0 {
		t.Fatalf("B suspended a database its client left just now")
	}
	if n := suspend(a); n != 0 {
		t.Fatalf("A suspended a database whose last client (on B) left less than suspend_after_seconds ago")
	}
	time.Sleep(1100 * time.Millisecond)
	if n := suspend(a); n != 1 || state() != store.StateHibernated {
		t.Fatalf("A did not suspend the database once idle everywhere (%d, %s)", n, state())
	}

	// A replica that stops reporting no longer holds a database up: its reports go stale.
	if _, err := a.cfg.Sandboxes.Wake(ctx, mustSandbox(t, sts[0], sb.ID)); err != nil {
		t.Fatal(err)
	}
	b.Active(d.ID, 1)
	if n := suspend(b); n != 0 {
		t.Fatal("B suspended its own connected database")
	}
	a.act.staleAfter = 500 * time.Millisecond // B's reports are stale after this here
	time.Sleep(1100 * time.Millisecond)
	if n := suspend(a); n != 1 {
		t.Fatalf("A kept up a database only a silent replica claimed clients on (%d)", n)
	}
}

func mustSandbox(t *testing.T, st *store.Store, id string) store.Sandbox {
	t.Helper()
	sb, err := st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
