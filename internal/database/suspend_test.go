package database

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
	"github.com/pandastack/pandastack/internal/testenv"
)

// replica is one server replica's database service on a shared store, its sandboxes on ag.
func replica(t *testing.T, st *store.Store, ag *agenttest.Agent) *Service {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sched := scheduler.New(scheduler.Config{Store: st, Logger: log})
	sched.AddStaticAgent(ag.URL(), ag.Token)
	if err := sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	return New(Config{Store: st, Logger: log, Templates: templates.New(st, sched, log),
		Sandboxes: sandboxes.New(sandboxes.Config{Store: st, Scheduler: sched, Logger: log, DefaultTTL: time.Hour, MaxTTL: time.Hour})})
}

// TestSuspendCountsEveryReplica: two server replicas on one PostgreSQL store. A database with a
// client on one replica is not suspended by the other, however long that one has seen no client;
// once the client leaves, the other waits suspend_after_seconds from the leaving, not from its own
// last sight; a replica that stops reporting (dead, its clients with it) stops counting.
func TestSuspendCountsEveryReplica(t *testing.T) {
	ctx := context.Background()
	ag := agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	sts := testenv.PostgresStores(t, testenv.PostgresDatabase(t, "suspend"), 2)
	a, b := replica(t, sts[0], ag), replica(t, sts[1], ag)
	if _, err := sts[0].CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	sb, err := a.cfg.Sandboxes.Create(ctx, "team_1", sandboxes.CreateParams{Template: "base", AgentTemplate: "base"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sts[0].CreateDatabase(ctx, store.Database{ID: "db_one", TeamID: "team_1", Name: "one", Version: "17",
		SandboxID: sb.ID, State: "running", SuspendAfterSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
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
