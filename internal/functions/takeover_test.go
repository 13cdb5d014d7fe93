package functions

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
)

// TestTakeOver: an async run whose replica stopped (its lease passed) is taken over and attempted
// again; one whose last attempt was under way is recorded failed without running it again; one
// whose lease holds is left alone. Over a real store and the fake host agent (the fake cannot
// run the runner, so the resumed attempt fails on the platform side: what is checked is that it
// was attempted and recorded).
func TestTakeOver(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ag := agenttest.New("host-a", "tok", "base")
	t.Cleanup(ag.Close)
	sched := scheduler.New(scheduler.Config{Store: st, Logger: log})
	sched.AddStaticAgent(ag.URL(), "tok")
	if err := sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	svc := New(Config{Store: st, Logger: log, Templates: templates.New(st, sched, log),
		Sandboxes: sandboxes.New(sandboxes.Config{Store: st, Scheduler: sched, Logger: log, DefaultTTL: time.Minute, MaxTTL: time.Hour})})
	t.Cleanup(svc.Close)
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	fn, v, err := st.AddFunctionVersion(ctx, "fn_test", "f", store.FunctionVersion{TeamID: "team_1", Runtime: "python3",
		Handler: "main.handler", TimeoutSeconds: 5, MaxConcurrency: 5, State: "ready"})
	if err != nil {
		t.Fatal(err)
	}
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
	if r := get("run_last"); r.Status != RunFailed || r.Attempts != 1 || r.ErrorMessage != "the server running this invocation stopped during its last attempt" {
		t.Errorf("run lost during its last attempt: %+v", r)
	}
	if r := get("run_held"); r.Status != RunQueued || r.Attempts != 0 {
		t.Errorf("run with a live lease was touched: %+v", r)
	}
}
