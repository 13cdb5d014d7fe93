package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func newSched(t *testing.T, cfg Config) (*Scheduler, *store.Store) {
	t.Helper()
	st := testenv.SQLiteStore(t)
	cfg.Store = st
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(cfg), st
}

// polledHost is a fake host-a (template base) that s polls, polled once.
func polledHost(t *testing.T, s *Scheduler) *agenttest.Agent {
	t.Helper()
	a := agenttest.New("host-a", "tok", "base")
	t.Cleanup(a.Close)
	s.AddStaticAgent(a.URL(), "tok")
	if err := s.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

func reg(id string, memFree, slotsUsed int64, templates ...agentclient.Template) Registration {
	return Registration{HostID: id, URL: "http://127.0.0.1:1/" + id, Token: "t", MemMiBTotal: 8192, MemMiBFree: memFree,
		SlotsTotal: 4, SlotsUsed: slotsUsed, Templates: templates}
}

func tmpl(name string, baked bool) agentclient.Template {
	return agentclient.Template{Name: name, Baked: baked, MemoryMiB: 512}
}

func ids(hs []store.Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

func TestPlacement(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{})
	if _, err := s.Place(ctx, "base"); !errdefs.Is(err, errdefs.Capacity) || err.Error() != "no host is up to run sandboxes" {
		t.Fatalf("no hosts: %v", err)
	}
	for _, r := range []Registration{
		reg("roomy-cold", 6000, 0, tmpl("base", false)),
		reg("small-baked", 2000, 0, tmpl("base", true)),
		reg("big-baked", 4000, 0, tmpl("base", true), tmpl("agent", false)),
		reg("full", 8000, 4, tmpl("base", true)),
		reg("no-mem", 100, 0, tmpl("base", true)),
	} {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Place(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	// Baked first, by free memory; then the rest; full and memory-starved hosts are out.
	if want := []string{"big-baked", "small-baked", "roomy-cold"}; !equal(ids(got), want) {
		t.Fatalf("placement %v, want %v", ids(got), want)
	}
	if got, _ := s.Place(ctx, "agent"); !equal(ids(got), []string{"big-baked"}) {
		t.Fatalf("agent placement %v", ids(got))
	}
	if _, err := s.Place(ctx, "browser"); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("unknown template: %v", err)
	}
	if s.TemplateMemMiB(ctx, "base") != 512 || s.TemplateMemMiB(ctx, "unheard-of") != DefaultTemplateMemMiB {
		t.Fatal("template memory")
	}

	// Reservations count while the host works (TestReservationsEndWhenCounted: and after).
	var dones []func(bool)
	for i := 0; i < 4; i++ {
		dones = append(dones, reserve(t, s, "big-baked", 512))
	}
	if got, _ := s.Place(ctx, "agent"); len(got) != 0 {
		t.Fatalf("reserved-full host still offered: %v", ids(got))
	}
	dones[0](false)
	dones[0](false) // idempotent
	if got, _ := s.Place(ctx, "agent"); len(got) != 1 {
		t.Fatal("a placement that failed did not free its slot")
	}
	// Catalog picked up every reported template.
	for _, n := range []string{"base", "agent"} {
		if _, err := s.cfg.Store.GetTemplate(ctx, n); err != nil {
			t.Fatalf("catalog lacks %s: %v", n, err)
		}
	}
}

func TestHeartbeatUnknownHost(t *testing.T) {
	s, _ := newSched(t, Config{})
	if err := s.Heartbeat(context.Background(), reg("h", 1, 0)); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("%v", err)
	}
	if err := s.Register(context.Background(), Registration{HostID: "h"}); err == nil {
		t.Fatal("registration without url accepted")
	}
}

// runningOn records sandbox id running on host-a (fake agent a) for a team, in both places.
func runningOn(t *testing.T, st *store.Store, a *agenttest.Agent, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team", Name: "team"}); err != nil {
		t.Fatal(err)
	}
	a.AddSandbox(id, "base")
	if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: id, TeamID: "team", Template: "base", State: store.StateRunning, HostID: "host-a"}); err != nil {
		t.Fatal(err)
	}
}

func TestRunMarksSilentHostDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, st := newSched(t, Config{HeartbeatTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond})
	a := polledHost(t, s)
	runningOn(t, st, a, "sb_1")
	go s.Run(ctx)
	// While the agent answers polls, the host stays up.
	time.Sleep(700 * time.Millisecond)
	if h, _ := st.GetHost(ctx, "host-a"); h.State != store.HostUp {
		t.Fatalf("polled host marked %s", h.State)
	}
	a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, _ := st.GetHost(ctx, "host-a")
		if h.State == store.HostDown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("silent host never marked down")
		}
		time.Sleep(50 * time.Millisecond)
	}
	sb, _ := st.GetSandbox(ctx, "sb_1")
	if sb.State != store.StateLost {
		t.Fatalf("sandbox on the down host is %s", sb.State)
	}
}

func TestReconcileKillsWhatTheStoreKilled(t *testing.T) {
	ctx := context.Background()
	s, st := newSched(t, Config{})
	a := polledHost(t, s)
	st.CreateTeam(ctx, store.Team{ID: "team", Name: "team"})
	a.AddSandbox("sb_killed", "base")
	a.AddSandbox("sb_unknown", "base") // a create in flight: must be left alone
	st.CreateSandbox(ctx, store.Sandbox{ID: "sb_killed", TeamID: "team", Template: "base", State: store.StateKilled, HostID: "host-a"})
	if err := s.Reconcile(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	if got := a.Running(); !equal(got, []string{"sb_unknown"}) {
		t.Fatalf("running after reconcile: %v", got)
	}
}

// TestReconcileKillsOrphansAfterTheGrace: a sandbox its host runs with no record (its server
// died between the host's create and the record) is killed once reconcile has seen it so for the
// grace, counted from its first sighting; a create in flight (on the host, its record written
// later, within the grace) and a recorded sandbox are never killed.
func TestReconcileKillsOrphansAfterTheGrace(t *testing.T) {
	ctx := context.Background()
	clk := &settable{t: time.Now()}
	s, st := newSched(t, Config{Now: clk.now})
	a := polledHost(t, s)
	st.CreateTeam(ctx, store.Team{ID: "team", Name: "team"})
	record := func(id string) {
		t.Helper()
		if _, err := st.CreateSandbox(ctx, store.Sandbox{ID: id, TeamID: "team", Template: "base", State: store.StateRunning,
			HostID: "host-a", CreatedAt: clk.now(), ExpiresAt: clk.now().Add(100 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	a.AddSandbox("sb_recorded", "base")
	record("sb_recorded")
	a.AddSandbox("sb_orphan", "base") // its server died before recording it
	// A create in flight on another server: the host made it, the record comes later.
	if _, err := agentclient.New(a.URL(), "tok").CreateSandbox(ctx, agentclient.CreateRequest{ID: "sb_inflight", Template: "base"}); err != nil {
		t.Fatal(err)
	}
	reconcile := func(step time.Duration, want ...string) {
		t.Helper()
		clk.add(step)
		if err := s.Reconcile(ctx, "host-a"); err != nil {
			t.Fatal(err)
		}
		if got := a.Running(); !equal(got, want) {
			t.Fatalf("running after reconcile: %v, want %v", got, want)
		}
	}
	grace := s.UnrecordedGrace()
	reconcile(0, "sb_inflight", "sb_orphan", "sb_recorded")
	reconcile(grace-time.Second, "sb_inflight", "sb_orphan", "sb_recorded")
	record("sb_inflight") // the create finishes within the grace
	reconcile(2*time.Second, "sb_inflight", "sb_recorded")
	if n := s.OrphansKilled(); n != 1 {
		t.Fatalf("orphans killed: %d", n)
	}
	a.AddSandbox("sb_late", "base") // the wait counts from the first sighting, not the host's created_at
	reconcile(time.Second, "sb_inflight", "sb_late", "sb_recorded")
	if d, ok := s.UnrecordedFor("host-a", "sb_late"); !ok || d != 0 {
		t.Fatalf("sb_late unrecorded for %v %v", d, ok)
	}
	reconcile(grace, "sb_inflight", "sb_recorded")
	reconcile(100*grace, "sb_inflight", "sb_recorded")
	if n := s.OrphansKilled(); n != 2 {
		t.Fatalf("orphans killed: %d", n)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPlacementSpreadsAcrossLookalikeHosts(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{})
	// Two agents on one machine report nearly the same free memory: the emptier one wins, and a
	// reservation on it hands the next sandbox to the other.
	s.Register(ctx, reg("a", 4000, 2, tmpl("base", true)))
	s.Register(ctx, reg("b", 3900, 0, tmpl("base", true)))
	got, _ := s.Place(ctx, "base")
	if got[0].ID != "b" {
		t.Fatalf("placement %v", ids(got))
	}
	reserve(t, s, "b", 512)
	reserve(t, s, "b", 512)
	reserve(t, s, "b", 512)
	if got, _ := s.Place(ctx, "base"); got[0].ID != "a" {
		t.Fatalf("after reservations on b: %v", ids(got))
	}
}

func TestBuiltTemplatesStayOutOfTheCatalog(t *testing.T) {
	ctx := context.Background()
	s, st := newSched(t, Config{})
	pg := agentclient.Template{Name: "postgres-17", Baked: true, MemoryMiB: 1024, Description: "PostgreSQL",
		Aliases: []string{"postgres-16"}, Metadata: map[string]string{"version": "17"}}
	built := agentclient.Template{Name: "web-0123abcd", Baked: true, MemoryMiB: 512, Built: true}
	if err := s.Register(ctx, reg("h", 4000, 0, pg, built)); err != nil {
		t.Fatal(err)
	}
	ts, err := st.ListTemplates(ctx)
	if err != nil || len(ts) != 1 || ts[0].Name != "postgres-17" || ts[0].Description != "PostgreSQL" ||
		len(ts[0].Aliases) != 1 || ts[0].Metadata["version"] != "17" {
		t.Fatalf("catalog %+v %v", ts, err)
	}
	// The host still runs it (sandboxes of a team template are placed on their host).
	h, _ := st.GetHost(ctx, "h")
	if len(h.Templates) != 2 || s.TemplateMemMiB(ctx, built.Name) != 512 {
		t.Fatalf("host %+v", h)
	}
}

// Hosts' limits: a template larger than every host allows is errdefs.Invalid (the API's 400);
// placement counts committed guest memory against each host's commit limit, not free memory.
func TestPlacementLimits(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{})
	big := agentclient.Template{Name: "big", Baked: true, VCPUs: 1, MemoryMiB: 4096}
	base := tmpl("base", true)
	small := reg("small", 8000, 0, base, big)
	small.HostLimits = HostLimits{MaxVCPUs: 2, MaxMemoryMiB: 2048, MemMiBCommitLimit: 2048}
	full := reg("full", 8000, 0, base)
	full.HostLimits = HostLimits{MaxVCPUs: 2, MaxMemoryMiB: 2048, MemMiBCommitted: 2048, MemMiBCommitLimit: 2048}
	for _, r := range []Registration{small, full} {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Place(ctx, "big"); !errdefs.Is(err, errdefs.Invalid) || !strings.Contains(err.Error(), "max_memory_mib") {
		t.Fatalf("template larger than the hosts allow: %v", err)
	}
	if err := s.CheckSize("small", "template x", 16, 0); !errdefs.Is(err, errdefs.Invalid) || !strings.Contains(err.Error(), "max_vcpus") {
		t.Fatalf("16 vCPUs on a 2-vCPU host: %v", err)
	}
	// "full" has 8000 MiB free but nothing left to commit.
	if got, err := s.Place(ctx, "base"); err != nil || !equal(ids(got), []string{"small"}) {
		t.Fatalf("placement %v %v, want [small]", ids(got), err)
	}
	for range 4 {
		reserve(t, s, "small", 512)
	}
	if _, err := s.Place(ctx, "base"); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("placement past the commit limits: %v", err)
	}
	if _, err := s.PlaceOn(ctx, "full", 1, 512); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("PlaceOn a host at its commit limit: %v", err)
	}
}

// TestPlaceHostWithoutMemoryReport: a host that reports no memory is placed on, unchecked, as
// PlaceOn does (memory is checked only where a host says what it has).
func TestPlaceHostWithoutMemoryReport(t *testing.T) {
	s, _ := newSched(t, Config{})
	ctx := context.Background()
	quiet := Registration{HostID: "h_quiet", URL: "http://127.0.0.1:1/q", Token: "t", Templates: []agentclient.Template{tmpl("base", true)}}
	if err := s.Register(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	hosts, err := s.Place(ctx, "base")
	if err != nil || len(hosts) != 1 || hosts[0].ID != "h_quiet" {
		t.Fatalf("Place: %v %v", hosts, err)
	}
}

// TestHostCache: with a host cache, placement does not read the store's host list each time;
// what this replica learns (a registration, a host it marks down) shows at once, what another
// replica writes shows within the TTL.
func TestHostCache(t *testing.T) {
	ctx := context.Background()
	var offset time.Duration
	clock := func() time.Time { return time.Now().Add(offset) }
	s, st := newSched(t, Config{HostCacheTTL: time.Hour, HeartbeatTimeout: 3 * time.Second, Now: clock})
	if err := s.Register(ctx, reg("a", 4000, 0, tmpl("base", true))); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Place(ctx, "base"); err != nil || strings.Join(ids(got), ",") != "a" {
		t.Fatalf("first placement: %v %v", ids(got), err)
	}
	// A registration through this replica joins the cached list at once.
	if err := s.Register(ctx, reg("b", 8000, 0, tmpl("base", true))); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Place(ctx, "base"); strings.Join(ids(got), ",") != "b,a" {
		t.Fatalf("after b registered: %v", ids(got))
	}
	// Another replica's write is not read until the TTL passes.
	other := New(Config{Store: st, Logger: s.cfg.Logger, Now: clock})
	if err := other.Register(ctx, reg("c", 8000, 0, tmpl("base", true))); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Place(ctx, "base"); strings.Contains(strings.Join(ids(got), ","), "c") {
		t.Fatalf("the cache read the store again before its TTL: %v", ids(got))
	}
	s.hc.mu.Lock()
	s.hc.at = time.Time{} // the TTL has passed
	s.hc.mu.Unlock()
	if got, _ := s.Place(ctx, "base"); len(got) != 3 {
		t.Fatalf("after the TTL: %v", ids(got))
	}
	// b falls silent while a and c keep reporting; the host this replica marks down leaves the
	// list at once.
	s.started = time.Now().Add(-time.Hour)
	time.Sleep(2500 * time.Millisecond)
	for _, id := range []string{"a", "c"} {
		if err := s.Register(ctx, reg(id, 8000, 0, tmpl("base", true))); err != nil {
			t.Fatal(err)
		}
	}
	offset = time.Second // b's report is now more than the timeout old; a's and c's are not
	if err := s.CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.GetHost(ctx, "b"); h.State != store.HostDown {
		t.Fatalf("b not marked down: %+v", h)
	}
	if got, _ := s.Place(ctx, "base"); strings.Join(ids(got), ",") != "a,c" {
		t.Fatalf("after b was marked down: %v", ids(got))
	}
}

// TestPlacementSamplesLargeFleets: among many fitting hosts a placement ranks a few, picked at
// random, those with the template baked first; different placements spread over the fleet.
func TestPlacementSamplesLargeFleets(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{HostCacheTTL: time.Hour})
	for i := range 60 {
		baked := i%20 == 0 // three hosts have it baked
		if err := s.Register(ctx, reg(fmt.Sprintf("h%02d", i), 6000, 0, tmpl("base", baked))); err != nil {
			t.Fatal(err)
		}
	}
	firsts := map[string]bool{}
	for range 50 {
		got, err := s.Place(ctx, "base")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != placeSample {
			t.Fatalf("%d candidates, want %d", len(got), placeSample)
		}
		for i, h := range got {
			if want := i < 3; slices.Contains(h.Baked, "base") != want {
				t.Fatalf("ranked %v: the three baked hosts must come first", ids(got))
			}
		}
		firsts[got[0].ID] = true
		seen := map[string]bool{}
		for _, h := range got[3:] {
			seen[h.ID] = true
		}
		if len(seen) != placeSample-3 {
			t.Fatalf("a host twice in %v", ids(got))
		}
	}
	if len(firsts) < 2 {
		t.Fatalf("50 placements all put %v first: no spread", firsts)
	}
}

// TestHeartbeatOfADownHost: a host this replica has heard from, marked down meanwhile (by any
// replica), comes back with its next heartbeat: the one-statement refresh refuses it and the full
// registration reconciles its sandboxes (lost → running).
func TestHeartbeatOfADownHost(t *testing.T) {
	ctx := context.Background()
	s, st := newSched(t, Config{})
	a := agenttest.New("host-a", "tok", "base")
	defer a.Close()
	info, err := agentclient.New(a.URL(), "tok").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := RegistrationFromInfo(info, a.URL(), "tok")
	if err := s.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	runningOn(t, st, a, "sb_1")
	if err := s.Heartbeat(ctx, r); err != nil { // the fast path
		t.Fatal(err)
	}
	if err := st.MarkHostDown(ctx, "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	if sb, _ := st.GetSandbox(ctx, "sb_1"); sb.State != store.StateLost {
		t.Fatalf("sandbox of a down host: %s", sb.State)
	}
	if err := s.Heartbeat(ctx, r); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.GetHost(ctx, "host-a"); h.State != store.HostUp {
		t.Fatalf("host after its heartbeat: %s", h.State)
	}
	if sb, _ := st.GetSandbox(ctx, "sb_1"); sb.State != store.StateRunning {
		t.Fatalf("sandbox after the host came back: %s, want running (reconciled)", sb.State)
	}
	if err := s.Heartbeat(ctx, Registration{HostID: "host-nope", URL: "http://x"}); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("unknown host: %v", err)
	}
}

// TestReservationsEndWhenCounted: a host's report does not end the reservations of sandboxes it
// is still making, nor of those it made just before (the report may have been read before they
// were there); the first report received reportSettle after the host answered does.
func TestReservationsEndWhenCounted(t *testing.T) {
	ctx := context.Background()
	var offset time.Duration
	clock := func() time.Time { return time.Now().Add(offset) }
	s, _ := newSched(t, Config{Now: clock})
	report := func(used int64) {
		t.Helper()
		if err := s.Heartbeat(ctx, reg("h", 8000, used, tmpl("base", true))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Register(ctx, reg("h", 8000, 0, tmpl("base", true))); err != nil {
		t.Fatal(err)
	}
	free := func() int64 {
		t.Helper()
		h, err := s.PlaceOn(ctx, "h", 1, 0)
		if err != nil {
			return 0
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		p := s.pending["h"]
		return h.SlotsTotal - p.used(&h)
	}
	wantFree := func(want int64, after string) {
		t.Helper()
		if n := free(); n != want {
			t.Fatalf("%d slots free after %s", n, after)
		}
	}
	noneLeft := func() {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.pending) != 0 || len(s.placed) != 0 {
			t.Fatalf("reservations left: %v %v", s.pending, s.placed)
		}
	}
	working := reserve(t, s, "h", 256) // the host is still making it
	made := reserve(t, s, "h", 256)
	made(true) // the host answered: it is there
	report(0)  // read before either was counted
	wantFree(2, "a report during the creates, want 2 (4 less the two being made)")
	offset += 2 * reportSettle
	report(1) // counts the one made
	wantFree(2, "a report that counts one sandbox, want 2 (one counted, one being made)")
	working(true)
	report(1) // too soon after it was made to count it
	wantFree(2, "a report right after the second create ended, want 2")
	offset += 2 * reportSettle
	report(2)
	wantFree(2, "a report counting both, want 2")
	noneLeft()

	// A report that says when it was read settles sooner: read after the host answered, it counts
	// the sandbox; read before, it does not.
	reserve(t, s, "h", 256)(true)
	offset += reportSettle / 2
	stale := reg("h", 8000, 2, tmpl("base", true))
	stale.ReadMsAgo = (reportSettle / 2).Milliseconds() + 1
	if err := s.Heartbeat(ctx, stale); err != nil {
		t.Fatal(err)
	}
	wantFree(1, "a report read before the third create ended, want 1")
	fresh := reg("h", 8000, 3, tmpl("base", true))
	fresh.ReadMsAgo = 1
	offset += reportTransit + time.Millisecond
	if err := s.Heartbeat(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	wantFree(1, "a report read after the third create ended, want 1 (counted once)")
	noneLeft()

	// A sandbox the host has just stopped frees its slot at once, until a report counts it gone.
	offset += time.Millisecond
	s.Freeing("h", "sb_1", 256)(true)
	wantFree(2, "a kill (3 used in the last report), want 2")
	offset += 2 * reportSettle
	report(2)
	wantFree(2, "a report that counts the kill, want 2 (freed once)")
	// A stop whose host reported while it was being asked for gives nothing back: that report
	// may count it already.
	offset += time.Millisecond
	stopping := s.Freeing("h", "sb_2", 256)
	offset += time.Millisecond
	report(1)
	stopping(true)
	wantFree(3, "a report during a kill, want 3 (freed once)")
	noneLeft()
}

// reserve is s.Reserve, which must succeed.
func reserve(t *testing.T, s *Scheduler, hostID string, memMiB int64) func(bool) {
	t.Helper()
	done, err := s.Reserve(hostID, memMiB)
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// TestReserveChecksRoomAgain: two placements that both picked a host's last slot cannot both
// reserve it; the second is refused (errdefs.Capacity: its create moves on to the next host).
func TestReserveChecksRoomAgain(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{HostCacheTTL: time.Hour})
	if err := s.Register(ctx, reg("h", 8000, 3, tmpl("base", true))); err != nil { // 1 of 4 slots free
		t.Fatal(err)
	}
	first, err := s.Place(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Place(ctx, "base")
	if err != nil || first[0].ID != "h" || second[0].ID != "h" {
		t.Fatalf("both placements pick h: %v %v %v", ids(first), ids(second), err)
	}
	done := reserve(t, s, "h", 256)
	if _, err := s.Reserve("h", 256); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("second reservation of h's last slot: %v", err)
	}
	done(false)
	reserve(t, s, "h", 256) // the slot is back
}

// newOffsetSched is a scheduler whose clock runs *offset ahead of the store's.
func newOffsetSched(t *testing.T, timeout time.Duration) (*Scheduler, *store.Store, *time.Duration) {
	offset := new(time.Duration)
	s, st := newSched(t, Config{HeartbeatTimeout: timeout, Now: func() time.Time { return time.Now().Add(*offset) }})
	return s, st, offset
}

// TestCheckHostsSparesHostsHeard: a host whose report this process has in hand is not marked
// down though its row looks stale (the write of its report landed late: here its row is dated
// by the store's clock, which lags this scheduler's by a minute); once it falls silent it is.
func TestCheckHostsSparesHostsHeard(t *testing.T) {
	ctx := context.Background()
	const timeout = 3 * time.Second
	s, st, offset := newOffsetSched(t, timeout)
	for _, id := range []string{"a", "b"} {
		if err := s.Register(ctx, reg(id, 4000, 0, tmpl("base", true))); err != nil {
			t.Fatal(err)
		}
	}
	*offset = time.Minute + timeout
	// a reports something new (its row is written in full, dated by the store); b is silent.
	if err := s.Heartbeat(ctx, reg("a", 3000, 1, tmpl("base", true))); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.GetHost(ctx, "a"); !h.LastHeartbeat.Before(time.Now().Add(*offset - timeout)) {
		t.Fatalf("a's row is not stale to this scheduler: %v", h.LastHeartbeat)
	}
	if err := s.CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"a": store.HostUp, "b": store.HostDown} {
		if h, _ := st.GetHost(ctx, id); h.State != want {
			t.Fatalf("%s is %s; want %s", id, h.State, want)
		}
	}
	*offset += 2 * timeout // a falls silent too
	if err := s.CheckHosts(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := st.GetHost(ctx, "a"); h.State != store.HostDown {
		t.Fatalf("a silent for longer than the timeout is %s", h.State)
	}
}

// TestCheckHostsSparesStaticAgentsAsked: a static agent that answered its last poll is not
// marked down while this process waits for its answer to the next (a poll slower than the
// timeout on a loaded machine); one whose answers stopped for two timeouts is, poll or no poll.
func TestCheckHostsSparesStaticAgentsAsked(t *testing.T) {
	ctx := context.Background()
	const timeout = 3 * time.Second
	s, st, offset := newOffsetSched(t, timeout)
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/info" {
			http.NotFound(w, r)
			return
		}
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
		json.NewEncoder(w).Encode(agentclient.Info{HostID: "slow", MemMiBTotal: 8192, MemMiBFree: 4000, SlotsTotal: 4})
	}))
	t.Cleanup(srv.Close)
	s.AddStaticAgent(srv.URL, "t")
	if err := s.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		h, _ := st.GetHost(ctx, "slow")
		return h.State
	}
	// checkWhileAsked runs CheckHosts while a poll waits for the agent's answer, then lets it answer.
	checkWhileAsked := func() string {
		hold.Store(true)
		polled := make(chan error, 1)
		go func() { polled <- s.PollStatic(ctx) }()
		<-entered
		hold.Store(false)
		if err := s.CheckHosts(ctx); err != nil {
			t.Fatal(err)
		}
		got := state()
		release <- struct{}{}
		if err := <-polled; err != nil {
			t.Fatal(err)
		}
		return got
	}
	*offset = time.Minute // its row (dated by the store) and its last answer are a minute old to this scheduler
	if got := checkWhileAsked(); got != store.HostDown {
		t.Fatalf("answered a minute ago, asked now: %s; want down", got)
	}
	*offset += time.Minute // the poll above answered; it is asked again a timeout and a half later
	if err := s.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	*offset += timeout + timeout/2
	if got := checkWhileAsked(); got != store.HostUp {
		t.Fatalf("answered %s ago, asked now: %s; want up", timeout+timeout/2, got)
	}
}

// A template's data volume is learnt from the hosts' reports (a create holds quota for its copy
// before it asks a host), and forgotten when a report no longer has it.
func TestTemplateVolumes(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{})
	withVol := tmpl("db", true)
	withVol.Volumes = []hostapi.SnapshotVolume{{Slot: 0, MountPath: "/var/lib/db", SizeMiB: 64, FS: "ext4"}}
	if err := s.Register(ctx, reg("h", 4000, 0, tmpl("base", true), withVol)); err != nil {
		t.Fatal(err)
	}
	if got := s.TemplateVolumes("db"); len(got) != 1 || got[0] != withVol.Volumes[0] {
		t.Errorf("TemplateVolumes(db) = %+v", got)
	}
	if got := s.TemplateVolumes("base"); len(got) != 0 {
		t.Errorf("TemplateVolumes(base) = %+v", got)
	}
	if err := s.Register(ctx, reg("h", 4000, 0, tmpl("db", true))); err != nil {
		t.Fatal(err)
	}
	if got := s.TemplateVolumes("db"); len(got) != 0 {
		t.Errorf("after a report without it, TemplateVolumes(db) = %+v", got)
	}
}
