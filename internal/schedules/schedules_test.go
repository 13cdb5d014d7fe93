package schedules

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
	"github.com/pandastack/pandastack/internal/testenv"
)

// The engine over a real store (SQLite, and PostgreSQL for the replicas test) and the fake host
// agent (no VMs): command targets really create, exec in and kill sandboxes through the sandbox
// service. Time is an injected clock.

const token = "agent-secret"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica is one server's engine and its scheduler.
type replica struct {
	*Engine
	sched *scheduler.Scheduler
}

// newEngine builds an engine (a server replica) over st, with the fake agent ag as its host.
func newEngine(t *testing.T, st *store.Store, ag *agenttest.Agent, clk *testenv.Clock) replica {
	t.Helper()
	sched := scheduler.New(scheduler.Config{Store: st, Logger: quiet})
	sched.AddStaticAgent(ag.URL(), token)
	if err := sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc := sandboxes.New(sandboxes.Config{Store: st, Scheduler: sched, Logger: quiet, DefaultTTL: 300 * time.Second, MaxTTL: 24 * time.Hour})
	e := New(Config{ProductDeps: sandboxes.ProductDeps{Store: st, Sandboxes: svc, Templates: templates.New(st, sched, quiet), Logger: quiet}, Now: clk.Now})
	t.Cleanup(e.Close)
	return replica{e, sched}
}

type env struct {
	st    *store.Store
	ag    *agenttest.Agent
	clock *testenv.Clock
	e     replica
	team  string
}

func newEnv(t *testing.T, start time.Time) *env {
	t.Helper()
	ctx := context.Background()
	st := testenv.SQLiteStore(t)
	ag := agenttest.New("host-a", token, "base")
	t.Cleanup(ag.Close)
	team, err := st.CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	clk := testenv.NewClock(start)
	return &env{st: st, ag: ag, clock: clk, e: newEngine(t, st, ag, clk), team: team.ID}
}

func (v *env) create(t *testing.T, sp Spec) store.Schedule {
	t.Helper()
	sc, err := v.e.Create(context.Background(), v.team, sp)
	if err != nil {
		t.Fatalf("create %+v: %v", sp, err)
	}
	return sc
}

// runs returns a schedule's runs, oldest instant first.
func runs(t *testing.T, st *store.Store, id string) []store.ScheduleRun {
	t.Helper()
	rs, err := st.ListScheduleRuns(context.Background(), id, 10000)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ScheduledFor.Before(rs[j].ScheduledFor) })
	return rs
}

// tickThrough moves the clock from its time to end in steps, ticking every engine at each step
// (concurrently) and waiting for their runs; then the agent reports to each scheduler (its
// heartbeat), which frees the room of the sandboxes the runs killed.
func tickThrough(t *testing.T, clk *testenv.Clock, end time.Time, step time.Duration, engines ...replica) {
	t.Helper()
	for now := clk.Now().Add(step); !now.After(end); now = now.Add(step) {
		clk.Set(now)
		var wg sync.WaitGroup
		for _, e := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.Tick(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, e := range engines {
			e.Wait()
			if err := e.sched.PollStatic(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestParseCronErrors(t *testing.T) {
	for _, c := range []struct{ cron, tz, want string }{
		{"", "UTC", "cron is required"},
		{"* * * *", "UTC", "has 4 fields, want 5"},
		{"0 0 * * * *", "UTC", "has 6 fields"},
		{"61 * * * *", "UTC", "minute field"},
		{"0 25 * * *", "UTC", "hour field"},
		{"0 0 * 13 *", "UTC", "month field"},
		{"@every5s", "UTC", "macro"},
		{"0 * * * *", "Mars/Olympus", "not known"},
		{"0 * * * *", "../../etc/passwd", "not an IANA"},
	} {
		_, err := ParseCron(c.cron, c.tz)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCron(%q, %q) = %v, want an error containing %q", c.cron, c.tz, err, c.want)
		}
	}
	for _, ok := range []string{"@hourly", "@daily", "*/15 9-17 * * 1-5", "0 0 1 1 *"} {
		if _, err := ParseCron(ok, "Europe/Berlin"); err != nil {
			t.Errorf("ParseCron(%q): %v", ok, err)
		}
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	v := newEnv(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		sp   Spec
		kind errdefs.Kind
		want string
	}{
		{Spec{Cron: "bad", Template: "base", Cmd: "true"}, errdefs.Invalid, "fields"},
		{Spec{Cron: "@hourly", Timezone: "Nowhere/Land", Template: "base", Cmd: "true"}, errdefs.Invalid, "timezone"},
		{Spec{Cron: "@hourly", Template: "nope", Cmd: "true"}, errdefs.Invalid, "unknown template"},
		{Spec{Cron: "@hourly", Template: "base"}, errdefs.Invalid, "template and cmd"},
		{Spec{Cron: "@hourly", Template: "base", Cmd: "true", Overlap: "never"}, errdefs.Invalid, "overlap must be one of"},
		{Spec{Cron: "@hourly", Template: "base", Cmd: "true", Missed: "all"}, errdefs.Invalid, "missed must be one of"},
		{Spec{Cron: "@hourly", Template: "base", Cmd: "true", Payload: []byte(`"` + strings.Repeat("x", MaxPayloadBytes) + `"`)}, errdefs.TooLarge, "limit"},
		{Spec{Cron: "@hourly", FunctionID: "fn_x"}, errdefs.Invalid, "functions are not available"},
	} {
		_, err := v.e.Create(context.Background(), v.team, c.sp)
		if !errdefs.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Create(%+v) = %v, want %s containing %q", c.sp, err, c.kind.Code(), c.want)
		}
	}
}

// TestDST runs schedules in Europe/Berlin through a whole spring-forward day and a whole
// fall-back day on an injected clock: every local time the expression names fires once; the
// local times that do not exist follow the missed policy.
func TestDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, day := range []struct {
		name       string
		start, end time.Time // local midnight to the next local midnight
		halfHours  int       // "*/30" fires: every local half hour of the day once (and the next midnight)
	}{
		{"spring-forward", time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), time.Date(2026, 3, 30, 0, 0, 0, 0, berlin), 46},
		{"fall-back", time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), time.Date(2026, 10, 26, 0, 0, 0, 0, berlin), 48},
	} {
		t.Run(day.name, func(t *testing.T) {
			v := newEnv(t, day.start.UTC())
			half := v.create(t, Spec{Cron: "*/30 * * * *", Timezone: "Europe/Berlin", Template: "base", Cmd: "true"})
			skip := v.create(t, Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin", Template: "base", Cmd: "true"})
			once := v.create(t, Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin", Template: "base", Cmd: "true", Missed: "run_once"})
			tickThrough(t, v.clock, day.end.UTC(), 2*time.Minute, v.e)

			hr := runs(t, v.st, half.ID)
			seen := map[string]bool{}
			for _, r := range hr {
				local := r.ScheduledFor.In(berlin).Format("2006-01-02 15:04")
				if seen[local] {
					t.Errorf("local time %s fired twice", local)
				}
				seen[local] = true
				if r.Status != store.RunSucceeded || r.SandboxID == "" {
					t.Fatalf("run %+v: want succeeded in a sandbox", r)
				}
			}
			if len(hr) != day.halfHours {
				t.Errorf("*/30: %d runs, want %d", len(hr), day.halfHours)
			}
			sr, or := runs(t, v.st, skip.ID), runs(t, v.st, once.ID)
			if day.name == "spring-forward" {
				// 02:30 does not exist: skip does not run it; run_once runs it at 03:00 CEST.
				if len(sr) != 0 {
					t.Errorf("missed=skip ran %d times on the spring-forward day: %+v", len(sr), sr)
				}
				if want := time.Date(2026, 3, 29, 3, 0, 0, 0, berlin); len(or) != 1 || !or[0].ScheduledFor.Equal(want) {
					t.Errorf("missed=run_once: %+v, want one run at %s", or, want)
				}
				return
			}
			// 02:30 happens twice: it fires at its first occurrence (CEST) only.
			want := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)
			for _, rs := range [][]store.ScheduleRun{sr, or} {
				if len(rs) != 1 || !rs[0].ScheduledFor.Equal(want) {
					t.Errorf("30 2 * * * on the fall-back day: %+v, want one run at %s", rs, want)
				}
			}
		})
	}
}

// TestMissedAfterDowntime: instants older than the grace when the engine looks (the server was
// down) run once with run_once and not at all with skip.
func TestMissedAfterDowntime(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	v := newEnv(t, start)
	skip := v.create(t, Spec{Cron: "*/10 * * * *", Template: "base", Cmd: "true"})
	once := v.create(t, Spec{Cron: "*/10 * * * *", Template: "base", Cmd: "true", Missed: "run_once"})
	tickThrough(t, v.clock, start.Add(time.Hour), time.Hour, v.e) // one look after an hour down
	if rs := runs(t, v.st, skip.ID); len(rs) != 1 || !rs[0].ScheduledFor.Equal(start.Add(time.Hour)) {
		t.Errorf("skip: %+v, want only the on-time 13:00 run", rs)
	}
	if rs := runs(t, v.st, once.ID); len(rs) != 2 || !rs[0].ScheduledFor.Equal(start.Add(10*time.Minute)) {
		t.Errorf("run_once: %+v, want one catch-up run (12:10) and the on-time 13:00 run", rs)
	}
}

// TestReplicasFireOnce: two server replicas (each its own store handle, scheduler and engine)
// on one PostgreSQL database tick together; every instant runs exactly once.
func TestReplicasFireOnce(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresDatabase(t, "schedules")
	start := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	clk := testenv.NewClock(start)
	ag := agenttest.New("host-a", token, "base")
	t.Cleanup(ag.Close)
	var engines []replica
	stores := testenv.PostgresStores(t, url, 2)
	for _, st := range stores {
		engines = append(engines, newEngine(t, st, ag, clk))
	}
	if now, err := stores[0].DBNow(ctx); err != nil || now.IsZero() {
		t.Fatalf("the database's clock: %v %v", now, err)
	}
	team, err := stores[0].CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	every, err := engines[0].Create(ctx, team.ID, Spec{Cron: "* * * * *", Template: "base", Cmd: "echo hi", Overlap: "allow"})
	if err != nil {
		t.Fatal(err)
	}
	tickThrough(t, clk, start.Add(90*time.Minute), 30*time.Second, engines...)
	rs := runs(t, stores[1], every.ID)
	if len(rs) != 90 {
		t.Fatalf("%d runs over 90 minutes, want 90", len(rs))
	}
	for i, r := range rs {
		if want := start.Add(time.Duration(i+1) * time.Minute); !r.ScheduledFor.Equal(want) || r.Status != store.RunSucceeded || r.Output != "hi\n" {
			t.Fatalf("run %d: %+v, want succeeded at %s with output hi", i, r, want)
		}
	}
}

// TestOverlap: a run that is still running when the next instant comes: skip records the new
// one skipped, queue runs it after, allow runs both at once.
func TestOverlap(t *testing.T) {
	for _, policy := range []string{"skip", "queue", "allow"} {
		t.Run(policy, func(t *testing.T) {
			start := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
			v := newEnv(t, start)
			sc := v.create(t, Spec{Cron: "* * * * *", Template: "base", Cmd: "sleep 1", Overlap: policy})
			for i := 1; i <= 2; i++ { // two instants, without waiting for the first run
				v.clock.Set(start.Add(time.Duration(i) * time.Minute))
				if err := v.e.Tick(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			rs := runs(t, v.st, sc.ID)
			wantSecond := map[string]string{"skip": store.RunSkipped, "queue": store.RunQueued, "allow": store.RunRunning}[policy]
			if len(rs) != 2 || rs[0].Status != store.RunRunning || rs[1].Status != wantSecond {
				t.Fatalf("while the first runs: %+v, want running then %s", rs, wantSecond)
			}
			v.e.Wait()
			rs = runs(t, v.st, sc.ID)
			wantEnd := map[string]string{"skip": store.RunSkipped, "queue": store.RunSucceeded, "allow": store.RunSucceeded}[policy]
			if rs[0].Status != store.RunSucceeded || rs[1].Status != wantEnd {
				t.Fatalf("at the end: %+v, want succeeded then %s", rs, wantEnd)
			}
		})
	}
}

// TestPauseResumeTrigger: a paused schedule does not fire and its paused instants are not run
// after a resume; a trigger runs it now.
func TestPauseResumeTrigger(t *testing.T) {
	start := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	v := newEnv(t, start)
	ctx := context.Background()
	sc := v.create(t, Spec{Cron: "*/5 * * * *", Template: "base", Cmd: "exit 3", Missed: "run_once"})
	if _, err := v.e.SetEnabled(ctx, v.team, sc.ID, false); err != nil {
		t.Fatal(err)
	}
	tickThrough(t, v.clock, start.Add(30*time.Minute), time.Minute, v.e)
	if rs := runs(t, v.st, sc.ID); len(rs) != 0 {
		t.Fatalf("paused schedule ran: %+v", rs)
	}
	if _, err := v.e.SetEnabled(ctx, v.team, sc.ID, true); err != nil {
		t.Fatal(err)
	}
	tickThrough(t, v.clock, start.Add(35*time.Minute), time.Minute, v.e)
	rs := runs(t, v.st, sc.ID)
	if len(rs) != 1 || !rs[0].ScheduledFor.Equal(start.Add(35*time.Minute)) || rs[0].Status != store.RunFailed || rs[0].ExitCode != 3 {
		t.Fatalf("after resume: %+v, want only 00:35, failed with exit 3", rs)
	}
	run, err := v.e.Trigger(ctx, v.team, sc.ID)
	if err != nil || run.Trigger != "manual" || run.Status != store.RunRunning {
		t.Fatalf("trigger: %+v, %v", run, err)
	}
	v.e.Wait()
	if rs := runs(t, v.st, sc.ID); len(rs) != 2 {
		t.Fatalf("after trigger: %+v", rs)
	}
	if _, err := v.e.Trigger(ctx, "team_other", sc.ID); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("another team's trigger: %v, want not found", err)
	}
}

// TestAbandonedRun: a run left "running" by a replica that died is recorded failed once it is
// far past its timeout, so that overlap skip does not skip every later run.
func TestAbandonedRun(t *testing.T) {
	start := time.Now().UTC()
	v := newEnv(t, start)
	ctx := context.Background()
	sc := v.create(t, Spec{Cron: "0 0 1 1 *", Template: "base", Cmd: "true", TimeoutSeconds: 60})
	// What a replica records when it starts a run, without the replica (it "crashed").
	if _, ok, err := v.st.ClaimScheduleRun(ctx, store.ScheduleRun{ID: "srun_orphan", ScheduleID: sc.ID, TeamID: v.team,
		Trigger: "manual", ScheduledFor: start}, "skip"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if run, err := v.e.Trigger(ctx, v.team, sc.ID); err != nil || run.Status != store.RunSkipped {
		t.Fatalf("while the orphan runs: %+v %v, want skipped", run, err)
	}
	v.clock.Set(start.Add(5 * time.Minute)) // within its timeout and margin: still running
	if err := v.e.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := v.st.GetScheduleRun(ctx, "srun_orphan"); r.Status != store.RunRunning {
		t.Fatalf("expired too early: %+v", r)
	}
	v.clock.Set(start.Add(12 * time.Minute))
	if err := v.e.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := v.st.GetScheduleRun(ctx, "srun_orphan"); r.Status != store.RunFailed || !strings.Contains(r.Error, "server running it stopped") {
		t.Fatalf("orphan after its limit: %+v", r)
	}
	if run, err := v.e.Trigger(ctx, v.team, sc.ID); err != nil || run.Status != store.RunRunning {
		t.Fatalf("after: %+v %v, want running", run, err)
	}
	v.e.Wait()
}
