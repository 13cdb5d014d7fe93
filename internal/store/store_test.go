package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// Every test here runs twice, against SQLite in a temp dir and against a real PostgreSQL that the
// suite starts itself (see pgtest). Missing PostgreSQL binaries fail the suite: run `make setup`.

var (
	pgOnce sync.Once
	pgSrv  *pgtest.Server
	pgErr  error
	dbSeq  atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pgSrv != nil {
		pgSrv.Stop()
	}
	os.Exit(code)
}

// eachBackend runs fn once per backend, each time on a fresh, migrated, empty database.
func eachBackend(t *testing.T, fn func(ctx context.Context, t *testing.T, s *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(context.Background(), t, s)
	})
	t.Run("postgres", func(t *testing.T) {
		url := newPostgresDB(t)
		s, err := OpenPostgres(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		fn(context.Background(), t, s)
	})
}

func newPostgresDB(t *testing.T) string {
	t.Helper()
	pgOnce.Do(func() { pgSrv, pgErr = pgtest.Start() })
	if pgErr != nil {
		t.Fatalf("cannot start PostgreSQL for the store suite: %v", pgErr)
	}
	url, err := pgSrv.NewDatabase(context.Background(), fmt.Sprintf("store_test_%d", dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// fakeClock pins the store's clock so timestamps are predictable. It counts in Unix
// microseconds, the store's own resolution.
type fakeClock struct{ us atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.UnixMicro(c.us.Load()).UTC() }
func (c *fakeClock) add(d time.Duration) { c.us.Add(d.Microseconds()) }

func withClock(s *Store) *fakeClock {
	c := &fakeClock{}
	c.us.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMicro())
	s.now = c.now
	return c
}

// mkTeams creates a team per id, named like its id.
func mkTeams(t *testing.T, s *Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.CreateTeam(context.Background(), Team{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
}

// withTeams pins the store's clock, then creates the teams.
func withTeams(t *testing.T, s *Store, ids ...string) *fakeClock {
	t.Helper()
	clk := withClock(s)
	mkTeams(t, s, ids...)
	return clk
}

// pageIDs turns a list method into one that returns a page's ids and the next cursor.
func pageIDs[T, F any](t *testing.T, list func(context.Context, F) ([]T, string, error), id func(T) string) func(F) ([]string, string) {
	return func(f F) ([]string, string) {
		t.Helper()
		page, next, err := list(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range page {
			out = append(out, id(v))
		}
		return out, next
	}
}

// softDeletes is what snapshots and volumes share: deletes scoped to a team that keep the row.
type softDeletes[T any] struct {
	delete    func(ctx context.Context, teamID, id string) error
	getTeam   func(ctx context.Context, teamID, id string) (T, error)
	get       func(ctx context.Context, id string) (T, error)
	deletedIn func(ctx context.Context, ids []string) (map[string]bool, error)
	count     func(ctx context.Context) (int64, error)
	marked    func(T) bool // the record says deleted, and when
}

// checkSoftDelete deletes team_a's id: another team cannot, a second delete is fine, a missing
// one is ErrNotFound; afterwards the team cannot read it, the record says deleted, the reconcile
// set names it (and not other, still live) and wantLive rows are counted.
func checkSoftDelete[T any](t *testing.T, d softDeletes[T], id, other string, wantLive int64) {
	t.Helper()
	ctx := context.Background()
	if err := d.delete(ctx, "team_b", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete another team's: %v", err)
	}
	if err := d.delete(ctx, "team_a", id); err != nil {
		t.Fatal(err)
	}
	if err := d.delete(ctx, "team_a", id); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if err := d.delete(ctx, "team_a", id+"_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	if _, err := d.getTeam(ctx, "team_a", id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted %s readable: %v", id, err)
	}
	if raw, err := d.get(ctx, id); err != nil || !d.marked(raw) {
		t.Fatalf("deleted record %+v %v", raw, err)
	}
	del, err := d.deletedIn(ctx, []string{id, other, id + "_unknown"})
	if err != nil || !reflect.DeepEqual(del, map[string]bool{id: true}) {
		t.Fatalf("deleted set %v %v", del, err)
	}
	if n, err := d.count(ctx); err != nil || n != wantLive {
		t.Fatalf("count %d %v", n, err)
	}
}

func TestMigrations(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		got, err := s.AppliedMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []int{}
		for _, m := range migrations {
			want = append(want, m.version)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("applied %v, want %v", got, want)
		}
		// Migrating again (a restart, or a second replica) is a no-op.
		if err := s.migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got2, _ := s.AppliedMigrations(ctx); !reflect.DeepEqual(got2, want) {
			t.Fatalf("after re-migrate: %v", got2)
		}
		// A database from a newer binary is refused rather than misread.
		if _, err := s.db.ExecContext(ctx, s.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`), 999, "future", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.migrate(ctx); err == nil {
			t.Fatal("migrate accepted a newer schema")
		}
	})
}

func TestConcurrentOpenMigrates(t *testing.T) {
	// Replicas starting at once must not race each other's migrations.
	url := newPostgresDB(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenPostgres(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeyScopesAndExpiry: a key's scopes and expiry are stored and read back; keys made
// without them have none.
func TestKeyScopesAndExpiry(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withClock(s)
		exp := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
		if _, _, err := s.CreateTeamWithKey(ctx, Team{ID: "team_a", Name: "alpha"},
			APIKey{ID: "key_a", Prefix: "pds_aaaa", Hash: "h1", Scopes: []string{"read", "sandboxes"}, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateKey(ctx, APIKey{ID: "key_b", TeamID: "team_a", Prefix: "pds_bbbb", Hash: "h2"}); err != nil {
			t.Fatal(err)
		}
		a, err := s.GetKey(ctx, "team_a", "key_a")
		if err != nil || strings.Join(a.Scopes, ",") != "read,sandboxes" || !a.ExpiresAt.Equal(exp) {
			t.Fatalf("scoped key: %+v %v", a, err)
		}
		if a.Expired(exp.Add(-time.Second)) || !a.Expired(exp) {
			t.Fatal("Expired is wrong")
		}
		b, err := s.GetKey(ctx, "team_a", "key_b")
		if err != nil || b.Scopes != nil || !b.ExpiresAt.IsZero() || b.Expired(exp) {
			t.Fatalf("plain key: %+v %v", b, err)
		}
	})
}

func TestTeamsAndKeys(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withClock(s)
		if n, _ := s.CountKeys(ctx); n != 0 {
			t.Fatalf("fresh store has %d keys", n)
		}
		a, ka, err := s.CreateTeamWithKey(ctx, Team{ID: "team_a", Name: "alpha"},
			APIKey{ID: "key_a", Name: "first", Prefix: "pds_aaaa", Hash: "h1", Admin: true})
		if err != nil {
			t.Fatal(err)
		}
		if ka.TeamID != a.ID || !ka.Admin || ka.CreatedAt.IsZero() {
			t.Fatalf("key %+v", ka)
		}
		// A duplicate name conflicts, and the key of the failed team is not kept.
		if _, _, err := s.CreateTeamWithKey(ctx, Team{ID: "team_x", Name: "alpha"}, APIKey{ID: "key_x", Prefix: "pds_xxxx", Hash: "hx"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate team: %v", err)
		}
		if ks, _ := s.KeysByPrefix(ctx, "pds_xxxx"); len(ks) != 0 {
			t.Fatalf("key of a failed team was stored: %+v", ks)
		}
		b, err := s.CreateTeam(ctx, Team{ID: "team_b", Name: "beta"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetTeamByName(ctx, "beta"); err != nil || got != b {
			t.Fatalf("by name: %+v %v", got, err)
		}
		if _, err := s.GetTeam(ctx, "team_nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing team: %v", err)
		}
		kb, err := s.CreateKey(ctx, APIKey{ID: "key_b", TeamID: b.ID, Prefix: "pds_aaaa", Hash: "h2"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateKey(ctx, APIKey{ID: "key_b", TeamID: b.ID, Prefix: "p", Hash: "h"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate key id: %v", err)
		}
		// Prefixes may collide; lookup returns every candidate.
		ks, err := s.KeysByPrefix(ctx, "pds_aaaa")
		if err != nil || len(ks) != 2 {
			t.Fatalf("by prefix: %+v %v", ks, err)
		}
		// Revoking is team-scoped and idempotent.
		if err := s.RevokeKey(ctx, a.ID, kb.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("revoke another team's key: %v", err)
		}
		if err := s.RevokeKey(ctx, b.ID, kb.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeKey(ctx, b.ID, kb.ID); err != nil {
			t.Fatalf("second revoke: %v", err)
		}
		got, err := s.GetKey(ctx, b.ID, kb.ID)
		if err != nil || !got.Revoked() || got.Admin {
			t.Fatalf("revoked key %+v %v", got, err)
		}
		list, err := s.ListKeys(ctx, a.ID)
		if err != nil || len(list) != 1 || list[0].ID != "key_a" || list[0].Revoked() {
			t.Fatalf("list a: %+v %v", list, err)
		}
		if n, _ := s.CountKeys(ctx); n != 2 {
			t.Fatalf("count keys %d", n)
		}
	})
}

func TestSandboxes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		mk := func(id, team string, md map[string]string) Sandbox {
			t.Helper()
			sb, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: team, Template: "base", State: StateRunning, HostID: "h1",
				Metadata: md, ExpiresAt: clk.now().Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			return sb
		}
		first := mk("sb_1", "team_a", map[string]string{"task": "x", "env": "prod"})
		clk.add(time.Second)
		mk("sb_2", "team_a", map[string]string{"task": "y", "env": "prod"})
		// Same timestamp: the id breaks the tie, so pagination never skips or repeats.
		mk("sb_3", "team_a", nil)
		mk("sb_4", "team_a", map[string]string{"task": "x"})
		mk("sb_b", "team_b", map[string]string{"task": "x"})
		if _, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_1", TeamID: "team_a", Template: "base", State: StateRunning}); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate id: %v", err)
		}

		got, err := s.GetTeamSandbox(ctx, "team_a", "sb_1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("get:\n%+v\nwant\n%+v", got, first)
		}
		if _, err := s.GetTeamSandbox(ctx, "team_b", "sb_1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("other team's sandbox: %v", err)
		}
		if sb, err := s.GetSandbox(ctx, "sb_3"); err != nil || sb.Metadata == nil || len(sb.Metadata) != 0 {
			t.Fatalf("nil metadata read back as %#v %v", sb.Metadata, err)
		}

		ids := pageIDs(t, s.ListSandboxes, func(sb Sandbox) string { return sb.ID })
		eq := func(got, want []string) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
		all, _ := ids(SandboxFilter{TeamID: "team_a"})
		eq(all, []string{"sb_4", "sb_3", "sb_2", "sb_1"})
		got1, _ := ids(SandboxFilter{TeamID: "team_a", Metadata: map[string]string{"task": "x"}})
		eq(got1, []string{"sb_4", "sb_1"})
		got2, _ := ids(SandboxFilter{TeamID: "team_a", Metadata: map[string]string{"task": "x", "env": "prod"}})
		eq(got2, []string{"sb_1"})
		got3, _ := ids(SandboxFilter{TeamID: "team_a", Metadata: map[string]string{"task": "nope"}})
		eq(got3, nil)

		// Pages of 3 then 1, then the end.
		p1, next := ids(SandboxFilter{TeamID: "team_a", Limit: 3})
		eq(p1, []string{"sb_4", "sb_3", "sb_2"})
		if next == "" {
			t.Fatal("no next cursor")
		}
		p2, next2 := ids(SandboxFilter{TeamID: "team_a", Limit: 3, Cursor: next})
		eq(p2, []string{"sb_1"})
		if next2 != "" {
			t.Fatalf("cursor after last page: %q", next2)
		}
		for _, bad := range []string{"!!", "djE6eDp5", "Zm9v"} {
			if _, _, err := s.ListSandboxes(ctx, SandboxFilter{TeamID: "team_a", Cursor: bad}); !errors.Is(err, ErrBadCursor) {
				t.Fatalf("cursor %q: %v", bad, err)
			}
		}

		// State changes, conditional on the current state.
		if ok, err := s.SetSandboxState(ctx, "sb_2", StateKilled, "", StateRunning); !ok || err != nil {
			t.Fatalf("kill: %v %v", ok, err)
		}
		if ok, _ := s.SetSandboxState(ctx, "sb_2", StateError, "boom", StateRunning); ok {
			t.Fatal("state changed from a state not in from")
		}
		running, _ := ids(SandboxFilter{TeamID: "team_a", States: []string{StateRunning}})
		eq(running, []string{"sb_4", "sb_3", "sb_1"})
		killed, _ := ids(SandboxFilter{TeamID: "team_a", States: []string{StateKilled, StateError}})
		eq(killed, []string{"sb_2"})

		// TTL: a killed sandbox's expiry is not extended; the reaper's query sees expired ones.
		if ok, _ := s.SetSandboxExpiry(ctx, "sb_2", clk.now().Add(time.Hour), 3600); ok {
			t.Fatal("extended a killed sandbox")
		}
		if ok, err := s.SetSandboxExpiry(ctx, "sb_4", clk.now().Add(time.Hour), 3600); !ok || err != nil {
			t.Fatalf("extend: %v %v", ok, err)
		}
		if sb, _ := s.GetSandbox(ctx, "sb_4"); sb.TTLSeconds != 3600 || !sb.ExpiresAt.Equal(clk.now().Add(time.Hour)) {
			t.Fatalf("extended: %+v", sb)
		}
		// 0 keeps the ttl policy, moving only the expiry.
		if ok, _ := s.SetSandboxExpiry(ctx, "sb_4", clk.now().Add(time.Hour), 0); !ok {
			t.Fatal("expiry without a ttl policy not set")
		}
		if sb, _ := s.GetSandbox(ctx, "sb_4"); sb.TTLSeconds != 3600 {
			t.Fatalf("ttl policy lost: %+v", sb)
		}
		exp, err := s.ExpiredSandboxes(ctx, clk.now().Add(2*time.Minute), 10)
		if err != nil {
			t.Fatal(err)
		}
		var expIDs []string
		for _, sb := range exp {
			expIDs = append(expIDs, sb.ID)
		}
		if len(expIDs) != 3 { // sb_1, sb_3, sb_b (sb_2 killed, sb_4 extended)
			t.Fatalf("expired %v", expIDs)
		}

		counts, err := s.CountSandboxesByState(ctx)
		if err != nil || counts[StateRunning] != 4 || counts[StateKilled] != 1 {
			t.Fatalf("counts %v %v", counts, err)
		}
		if live, err := s.CountUnkilledSandboxesByState(ctx); err != nil || len(live) != 1 || live[StateRunning] != 4 {
			t.Fatalf("counts but killed %v %v", live, err)
		}
		onHost, err := s.HostSandboxes(ctx, "h1", StateRunning)
		if err != nil || len(onHost) != 4 {
			t.Fatalf("host sandboxes %d %v", len(onHost), err)
		}
	})
}

func TestHostsAndTemplates(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a")
		h := Host{ID: "h1", URL: "http://127.0.0.1:1", Token: "t", Accel: "tcg", MemMiBTotal: 4096, MemMiBFree: 3000,
			SlotsTotal: 10, SlotsUsed: 1, Templates: []string{"base", "agent"}, Baked: []string{"base"}}
		prev, err := s.UpsertHost(ctx, h)
		if err != nil || prev != "" {
			t.Fatalf("register: %q %v", prev, err)
		}
		if _, err := s.UpsertHost(ctx, Host{ID: "h2", URL: "http://127.0.0.1:2"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetHost(ctx, "h1")
		if err != nil || got.State != HostUp || !reflect.DeepEqual(got.Baked, []string{"base"}) || len(got.Templates) != 2 || got.MemMiBFree != 3000 {
			t.Fatalf("host %+v %v", got, err)
		}
		if h2, _ := s.GetHost(ctx, "h2"); h2.Templates == nil || len(h2.Templates) != 0 {
			t.Fatalf("nil templates read back as %#v", h2.Templates)
		}
		for _, id := range []string{"sb_1", "sb_2"} {
			if _, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SetSandboxState(ctx, "sb_2", StateKilled, ""); err != nil {
			t.Fatal(err)
		}
		// h2 heartbeats later; h1 goes stale.
		clk.add(20 * time.Second)
		if _, err := s.UpsertHost(ctx, Host{ID: "h2", URL: "http://127.0.0.1:2"}); err != nil {
			t.Fatal(err)
		}
		marked, err := s.MarkStaleHostsDown(ctx, clk.now().Add(-15*time.Second))
		if err != nil || len(marked) != 1 || marked[0].ID != "h1" {
			t.Fatalf("marked %+v %v", marked, err)
		}
		sb1, _ := s.GetSandbox(ctx, "sb_1")
		sb2, _ := s.GetSandbox(ctx, "sb_2")
		if sb1.State != StateLost || sb1.Error == "" || sb2.State != StateKilled {
			t.Fatalf("after host down: %+v / %+v", sb1, sb2)
		}
		if again, _ := s.MarkStaleHostsDown(ctx, clk.now().Add(-15*time.Second)); len(again) != 0 {
			t.Fatalf("marked twice: %+v", again)
		}
		hc, _ := s.CountHostsByState(ctx)
		if hc[HostUp] != 1 || hc[HostDown] != 1 {
			t.Fatalf("host counts %v", hc)
		}
		// Coming back reports the previous state so the scheduler can reconcile.
		if prev, _ := s.UpsertHost(ctx, h); prev != HostDown {
			t.Fatalf("prev %q", prev)
		}
		if err := s.MarkHostDown(ctx, "h9", "x"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("mark unknown host: %v", err)
		}

		// Template catalog: zero sizes never erase known ones.
		if err := s.UpsertTemplate(ctx, Template{Name: "base", VCPUs: 1, MemoryMiB: 512, DiskMiB: 1024, Description: "Debian"}); err != nil {
			t.Fatal(err)
		}
		if err := s.UpsertTemplate(ctx, Template{Name: "base"}); err != nil {
			t.Fatal(err)
		}
		if err := s.UpsertTemplate(ctx, Template{Name: "agent", MemoryMiB: 1024}); err != nil {
			t.Fatal(err)
		}
		tb, err := s.GetTemplate(ctx, "base")
		if err != nil || tb.MemoryMiB != 512 || tb.VCPUs != 1 || tb.Description != "Debian" {
			t.Fatalf("template %+v %v", tb, err)
		}
		if _, err := s.GetTemplate(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing template: %v", err)
		}
		ts, err := s.ListTemplates(ctx)
		if err != nil || len(ts) != 2 || ts[0].Name != "agent" {
			t.Fatalf("templates %+v %v", ts, err)
		}
		// Aliases and metadata are kept; an empty report does not erase them.
		pg := Template{Name: "postgres-17", Aliases: []string{"postgres", "postgres-16"}, Metadata: map[string]string{"version": "17"}}
		if err := s.UpsertTemplate(ctx, pg); err != nil {
			t.Fatal(err)
		}
		if err := s.UpsertTemplate(ctx, Template{Name: "postgres-17", MemoryMiB: 1024}); err != nil {
			t.Fatal(err)
		}
		pgt, err := s.GetTemplate(ctx, "postgres-17")
		if err != nil || !reflect.DeepEqual(pgt.Aliases, pg.Aliases) || !reflect.DeepEqual(pgt.Metadata, pg.Metadata) || pgt.MemoryMiB != 1024 {
			t.Fatalf("postgres %+v %v", pgt, err)
		}
	})
}

func TestTeamTemplates(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		a := TeamTemplate{TeamID: "team_a", Name: "web", AgentName: "web-aaaaaaaa", HostID: "h1", Spec: `{"name":"web"}`,
			Description: "d", VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048, SizeBytes: 1 << 20, BakeMS: 1500}
		got, err := s.UpsertTeamTemplate(ctx, a)
		if err != nil || got.CreatedAt.IsZero() || got.AgentName != a.AgentName || got.SizeBytes != a.SizeBytes || got.BakeMS != 1500 {
			t.Fatalf("upsert %+v %v", got, err)
		}
		created := got.CreatedAt
		// Another team may use the same name (under another agent name).
		if _, err := s.UpsertTeamTemplate(ctx, TeamTemplate{TeamID: "team_b", Name: "web", AgentName: "web-bbbbbbbb", HostID: "h2", Spec: "{}"}); err != nil {
			t.Fatal(err)
		}
		// A rebuild replaces the record but keeps created_at.
		clk.add(time.Second)
		a.MemoryMiB, a.HostID = 1024, "h3"
		got, err = s.UpsertTeamTemplate(ctx, a)
		if err != nil || got.MemoryMiB != 1024 || got.HostID != "h3" || !got.CreatedAt.Equal(created) || !got.UpdatedAt.After(created) {
			t.Fatalf("rebuild %+v %v", got, err)
		}
		if _, err := s.UpsertTeamTemplate(ctx, TeamTemplate{TeamID: "team_a", Name: "other"}); err != nil {
			t.Fatal(err)
		}
		list, err := s.ListTeamTemplates(ctx, "team_a")
		if err != nil || len(list) != 2 || list[0].Name != "other" || list[1].Name != "web" {
			t.Fatalf("list %+v %v", list, err)
		}
		if b, err := s.GetTeamTemplate(ctx, "team_b", "web"); err != nil || b.AgentName != "web-bbbbbbbb" {
			t.Fatalf("team b %+v %v", b, err)
		}
		if _, err := s.GetTeamTemplate(ctx, "team_b", "other"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team's: %v", err)
		}

		// Use: sandboxes that are not killed and snapshots that are not deleted.
		if sb, sn, err := s.TemplateUse(ctx, "team_a", "web"); sb != "" || sn != "" || err != nil {
			t.Fatalf("unused: %q %q %v", sb, sn, err)
		}
		if _, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_1", TeamID: "team_a", Template: "web", State: StateRunning, HostID: "h3"}); err != nil {
			t.Fatal(err)
		}
		if sb, _, _ := s.TemplateUse(ctx, "team_a", "web"); sb != "sb_1" {
			t.Fatalf("sandbox use %q", sb)
		}
		if sb, _, _ := s.TemplateUse(ctx, "team_b", "web"); sb != "" {
			t.Fatalf("another team's sandbox counted: %q", sb)
		}
		if _, err := s.CreateSnapshot(ctx, Snapshot{ID: "snap_1", TeamID: "team_a", SandboxID: "sb_1", HostID: "h3", Template: "web"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_1", StateKilled, ""); err != nil {
			t.Fatal(err)
		}
		if sb, sn, _ := s.TemplateUse(ctx, "team_a", "web"); sb != "" || sn != "snap_1" {
			t.Fatalf("snapshot use %q %q", sb, sn)
		}
		if err := s.DeleteSnapshot(ctx, "team_a", "snap_1"); err != nil {
			t.Fatal(err)
		}
		if sb, sn, _ := s.TemplateUse(ctx, "team_a", "web"); sb != "" || sn != "" {
			t.Fatalf("after kill and delete %q %q", sb, sn)
		}

		if err := s.DeleteTeamTemplate(ctx, "team_b", "other"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete another team's: %v", err)
		}
		if err := s.DeleteTeamTemplate(ctx, "team_a", "web"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetTeamTemplate(ctx, "team_a", "web"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted: %v", err)
		}
		if _, err := s.GetTeamTemplate(ctx, "team_b", "web"); err != nil {
			t.Fatalf("team b's went with it: %v", err)
		}
	})
}

func TestConcurrentWrites(t *testing.T) {
	// Many API requests write at once; SQLite must wait for its lock rather than fail.
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		mkTeams(t, s, "team_a")
		var wg sync.WaitGroup
		errs := make(chan error, 8*20)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					id := fmt.Sprintf("sb_%d_%d", w, i)
					_, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning,
						Metadata: map[string]string{"w": fmt.Sprint(w)}})
					if err == nil {
						_, err = s.SetSandboxState(ctx, id, StateKilled, "", StateRunning)
					}
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c, _ := s.CountSandboxesByState(ctx)
		if c[StateKilled] != 160 {
			t.Fatalf("counts %v", c)
		}
	})
}

func TestOpenDSN(t *testing.T) {
	dir := t.TempDir()
	for _, dsn := range []string{filepath.Join(dir, "a.db"), "sqlite:" + filepath.Join(dir, "b.db"), "file:" + filepath.Join(dir, "sub", "c.db")} {
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if s.Dialect() != SQLite {
			t.Fatalf("%s: dialect %s", dsn, s.Dialect())
		}
		s.Close()
	}
	if _, err := Open(context.Background(), ""); err == nil {
		t.Fatal("empty DSN accepted")
	}
}

func TestForkChildrenAreAllOrNothing(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a")
		parent, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_p", TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1",
			Metadata: map[string]string{"task": "x"}, ExpiresAt: clk.now().Add(time.Minute), TTLSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		if parent.TTLSeconds != 60 || parent.ForkOf != "" {
			t.Fatalf("parent %+v", parent)
		}
		child := func(id string) Sandbox {
			return Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1",
				Metadata: parent.Metadata, ExpiresAt: clk.now().Add(time.Minute), TTLSeconds: 60, ForkOf: "sb_p"}
		}
		// One duplicate id: nothing of the batch is kept, metadata rows included.
		if _, err := s.CreateSandboxes(ctx, []Sandbox{child("sb_c1"), child("sb_p")}); !errors.Is(err, ErrConflict) {
			t.Fatalf("batch with a duplicate: %v", err)
		}
		if _, err := s.GetSandbox(ctx, "sb_c1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("half a batch recorded: %v", err)
		}
		got, err := s.CreateSandboxes(ctx, []Sandbox{child("sb_c1"), child("sb_c2")})
		if err != nil || len(got) != 2 {
			t.Fatalf("batch: %v %v", got, err)
		}
		c2, err := s.GetSandbox(ctx, "sb_c2")
		if err != nil || !reflect.DeepEqual(c2, got[1]) || c2.ForkOf != "sb_p" || c2.Metadata["task"] != "x" {
			t.Fatalf("child read back %+v (%v), want %+v", c2, err, got[1])
		}
		page, _, err := s.ListSandboxes(ctx, SandboxFilter{TeamID: "team_a", Metadata: map[string]string{"task": "x"}})
		if err != nil || len(page) != 3 {
			t.Fatalf("metadata of children not indexed: %d %v", len(page), err)
		}
		fromSnap, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_s", TeamID: "team_a", Template: "base", State: StateRunning, SnapshotID: "snap_1"})
		if err != nil {
			t.Fatal(err)
		}
		if back, _ := s.GetSandbox(ctx, "sb_s"); back.SnapshotID != "snap_1" || !reflect.DeepEqual(back, fromSnap) {
			t.Fatalf("from snapshot %+v", back)
		}
	})
}

func TestSnapshots(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		mk := func(id, team, sb string) Snapshot {
			t.Helper()
			sn, err := s.CreateSnapshot(ctx, Snapshot{ID: id, TeamID: team, SandboxID: sb, HostID: "h1", Template: "base", SizeBytes: 4096})
			if err != nil {
				t.Fatal(err)
			}
			return sn
		}
		first := mk("snap_1", "team_a", "sb_1")
		clk.add(time.Second)
		mk("snap_2", "team_a", "sb_2")
		mk("snap_3", "team_a", "sb_1")
		mk("snap_b", "team_b", "sb_b")
		if _, err := s.CreateSnapshot(ctx, Snapshot{ID: "snap_1", TeamID: "team_b", HostID: "h1", Template: "base"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate id: %v", err)
		}
		got, err := s.GetTeamSnapshot(ctx, "team_a", "snap_1")
		if err != nil || !reflect.DeepEqual(got, first) || got.CreatedAt.IsZero() || got.Deleted {
			t.Fatalf("get %+v %v, want %+v", got, err, first)
		}
		if _, err := s.GetTeamSnapshot(ctx, "team_b", "snap_1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team's snapshot: %v", err)
		}
		ids := pageIDs(t, s.ListSnapshots, func(sn Snapshot) string { return sn.ID })
		all, _ := ids(SnapshotFilter{TeamID: "team_a"})
		if !reflect.DeepEqual(all, []string{"snap_3", "snap_2", "snap_1"}) {
			t.Fatalf("list %v", all)
		}
		of1, _ := ids(SnapshotFilter{TeamID: "team_a", SandboxID: "sb_1"})
		if !reflect.DeepEqual(of1, []string{"snap_3", "snap_1"}) {
			t.Fatalf("list of sb_1 %v", of1)
		}
		p1, next := ids(SnapshotFilter{TeamID: "team_a", Limit: 2})
		p2, end := ids(SnapshotFilter{TeamID: "team_a", Limit: 2, Cursor: next})
		if !reflect.DeepEqual(append(p1, p2...), all) || next == "" || end != "" {
			t.Fatalf("pages %v %v (%q %q)", p1, p2, next, end)
		}

		// Delete: team-scoped, idempotent; a deleted snapshot is gone from reads but remembered.
		checkSoftDelete(t, softDeletes[Snapshot]{s.DeleteSnapshot, s.GetTeamSnapshot, s.GetSnapshot, s.DeletedSnapshots, s.CountSnapshots,
			func(sn Snapshot) bool { return sn.Deleted && !sn.DeletedAt.IsZero() }}, "snap_1", "snap_2", 3)
		if all, _ := ids(SnapshotFilter{TeamID: "team_a"}); !reflect.DeepEqual(all, []string{"snap_3", "snap_2"}) {
			t.Fatalf("list after delete %v", all)
		}
	})
}

func TestUpgradeFromVersion1KeepsSandboxes(t *testing.T) {
	// A database written by a binary that knew only migration 1 upgrades in place.
	run := func(t *testing.T, open func() (*Store, error)) {
		ctx := context.Background()
		all := migrations
		migrations = all[:1]
		old, err := open()
		migrations = all
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.CreateTeam(ctx, Team{ID: "team_a", Name: "a"}); err != nil {
			t.Fatal(err)
		}
		if _, err := old.exec(ctx, old.db, `INSERT INTO sandboxes (id, team_id, template, state, host_id, metadata, error, created_at, expires_at, updated_at)
			VALUES ('sb_old', 'team_a', 'base', 'running', 'h1', '{"k":"v"}', '', 1, 2, 3)`); err != nil {
			t.Fatal(err)
		}
		old.Close()
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sb, err := s.GetSandbox(ctx, "sb_old")
		if err != nil || sb.Metadata["k"] != "v" || sb.TTLSeconds != 0 || sb.ForkOf != "" || sb.SnapshotID != "" {
			t.Fatalf("after upgrade: %+v %v", sb, err)
		}
		if v, _ := s.AppliedMigrations(ctx); len(v) != len(migrations) {
			t.Fatalf("applied %v", v)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "old.db")
		run(t, func() (*Store, error) { return OpenSQLite(context.Background(), path) })
	})
	t.Run("postgres", func(t *testing.T) {
		url := newPostgresDB(t)
		run(t, func() (*Store, error) { return OpenPostgres(context.Background(), url) })
	})
}

func TestVolumes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		first, err := s.CreateVolume(ctx, Volume{ID: "vol_1", TeamID: "team_a", Name: "data", SizeMiB: 64, HostID: "h1"})
		if err != nil {
			t.Fatal(err)
		}
		clk.add(time.Second)
		for _, v := range []Volume{{ID: "vol_2", TeamID: "team_a", SizeMiB: 32, HostID: "h1"}, {ID: "vol_b", TeamID: "team_b", SizeMiB: 8, HostID: "h2"}} {
			if _, err := s.CreateVolume(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.CreateVolume(ctx, Volume{ID: "vol_1", TeamID: "team_b", SizeMiB: 1, HostID: "h1"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("duplicate id: %v", err)
		}
		got, err := s.GetTeamVolume(ctx, "team_a", "vol_1")
		if err != nil || !reflect.DeepEqual(got, first) || got.CreatedAt.IsZero() || got.Name != "data" || got.SizeMiB != 64 {
			t.Fatalf("get %+v %v, want %+v", got, err, first)
		}
		if _, err := s.GetTeamVolume(ctx, "team_b", "vol_1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team's volume: %v", err)
		}
		list, err := s.ListVolumes(ctx, "team_a")
		if err != nil || len(list) != 2 || list[0].ID != "vol_2" || list[1].ID != "vol_1" {
			t.Fatalf("list %+v %v", list, err)
		}

		// Attach: one read-write holder, or any number of read-only ones, never both.
		mk := func(id string, vols ...VolumeAttachment) error {
			t.Helper()
			_, err := s.CreateSandboxWithVolumes(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1"}, vols)
			return err
		}
		rw := func(sb, vol, p string) VolumeAttachment {
			return VolumeAttachment{SandboxID: sb, VolumeID: vol, MountPath: p}
		}
		ro := func(sb, vol, p string) VolumeAttachment {
			return VolumeAttachment{SandboxID: sb, VolumeID: vol, MountPath: p, ReadOnly: true}
		}
		if err := mk("sb_1", rw("sb_1", "vol_1", "/data"), ro("sb_1", "vol_2", "/ref")); err != nil {
			t.Fatal(err)
		}
		var inUse *VolumeInUseError
		if err := mk("sb_2", ro("sb_2", "vol_1", "/data")); !errors.As(err, &inUse) || inUse.Holder.SandboxID != "sb_1" || inUse.Holder.ReadOnly {
			t.Fatalf("read-only beside read-write: %v", err)
		}
		if _, err := s.GetSandbox(ctx, "sb_2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused sandbox recorded: %v", err)
		}
		if err := mk("sb_3", ro("sb_3", "vol_2", "/ref")); err != nil {
			t.Fatalf("second read-only: %v", err)
		}
		if err := mk("sb_4", rw("sb_4", "vol_2", "/ref")); !errors.As(err, &inUse) || inUse.Holder.SandboxID != "sb_1" || !inUse.Holder.ReadOnly {
			t.Fatalf("read-write beside read-only: %v", err)
		}
		if err := s.CheckAttach(ctx, "vol_2", true); err != nil {
			t.Fatalf("check read-only: %v", err)
		}
		if err := s.CheckAttach(ctx, "vol_1", false); !errors.As(err, &inUse) {
			t.Fatalf("check read-write: %v", err)
		}
		if err := mk("sb_5", rw("sb_5", "vol_b", "/x")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team's volume attached: %v", err)
		}
		got, _ = s.GetTeamVolume(ctx, "team_a", "vol_2")
		if want := []VolumeAttachment{ro("sb_1", "vol_2", "/ref"), ro("sb_3", "vol_2", "/ref")}; !reflect.DeepEqual(got.Attachments, want) {
			t.Fatalf("attachments %+v", got.Attachments)
		}
		if sv, err := s.SandboxVolumes(ctx, "sb_1"); err != nil || !reflect.DeepEqual(sv, []VolumeAttachment{rw("sb_1", "vol_1", "/data"), ro("sb_1", "vol_2", "/ref")}) {
			t.Fatalf("sandbox volumes %+v %v", sv, err)
		}

		// Resize and delete are refused while a sandbox holds the volume (in error too).
		if _, err := s.ResizeVolume(ctx, "team_a", "vol_1", 128); !errors.As(err, &inUse) {
			t.Fatalf("resize while attached: %v", err)
		}
		if err := s.DeleteVolume(ctx, "team_a", "vol_1"); !errors.As(err, &inUse) {
			t.Fatalf("delete while attached: %v", err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_1", StateError, "boom"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteVolume(ctx, "team_a", "vol_1"); !errors.As(err, &inUse) {
			t.Fatalf("delete while held by a failed sandbox: %v", err)
		}
		// Killed (or lost) sandboxes let go.
		if _, err := s.SetSandboxState(ctx, "sb_1", StateKilled, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_3", StateLost, "host down"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetTeamVolume(ctx, "team_a", "vol_2"); len(got.Attachments) != 0 {
			t.Fatalf("attachments after kill %+v", got.Attachments)
		}
		if _, err := s.ResizeVolume(ctx, "team_b", "vol_1", 128); !errors.Is(err, ErrNotFound) {
			t.Fatalf("resize another team's: %v", err)
		}
		v, err := s.ResizeVolume(ctx, "team_a", "vol_1", 128)
		if err != nil || v.SizeMiB != 128 {
			t.Fatalf("resize %+v %v", v, err)
		}
		if err := mk("sb_6", rw("sb_6", "vol_1", "/data")); err != nil {
			t.Fatalf("attach after kill: %v", err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_6", StateKilled, ""); err != nil {
			t.Fatal(err)
		}

		checkSoftDelete(t, softDeletes[Volume]{s.DeleteVolume, s.GetTeamVolume, s.GetVolume, s.DeletedVolumes, s.CountVolumes,
			func(v Volume) bool { return v.Deleted && !v.DeletedAt.IsZero() }}, "vol_1", "vol_2", 2)
		if err := mk("sb_7", rw("sb_7", "vol_1", "/data")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("attach deleted volume: %v", err)
		}
	})
}

func TestConcurrentReadWriteAttachesOneWins(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		mkTeams(t, s, "team_a")
		if _, err := s.CreateVolume(ctx, Volume{ID: "vol_1", TeamID: "team_a", SizeMiB: 8, HostID: "h1"}); err != nil {
			t.Fatal(err)
		}
		const n = 8
		var wg sync.WaitGroup
		var ok atomic.Int64
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("sb_%d", i)
				_, err := s.CreateSandboxWithVolumes(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1"},
					[]VolumeAttachment{{SandboxID: id, VolumeID: "vol_1", MountPath: "/data"}})
				var inUse *VolumeInUseError
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.As(err, &inUse):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d read-write attaches succeeded, want 1", ok.Load())
		}
	})
}

// TestMigrationsUnchanged: released migrations are never edited (a database records only their
// versions), however the domains' schema steps are laid out in the source.
func TestMigrationsUnchanged(t *testing.T) {
	released := []struct {
		version int
		name    string
		sum     string
	}{
		{1, "initial schema", "cf181ae98a55180883be07a172be4284fdaa730963f43c9d91f3399135447ae8"},
		{2, "snapshots, sandbox lineage and ttl policy", "10dbe497c7d6805c097fbc7e3996f014a1709af1770973c2fdc915f840a4f700"},
		{3, "volumes and their attachments", "565f88612e49dc9ebffb60f542ecae602fa0f4b23867d797cf6ae526cf1de87b"},
		{4, "team templates, catalog aliases and metadata", "adcb24eceaa4fcad58ba8bbc66aafd4513294dcc846475213b891862cd4694ae"},
		{5, "catalog template sizes and bake times", "23db207cf3a3f000e9a8e71166bd8f390f5092ec2d4a403d547fdc0da54dda0d"},
		{6, "audit log, scoped keys and team quotas", "adb94783b424342a865afe0f26936df65a7b69c04dd78bb0744e433bc5fad79a"},
		{7, "live sandboxes by expiry", "11cceaa6788c34ed900ab7d753ab916314ae1919bd888f9b0ba90cacc25e570c"},
		{8, "private sandbox ports", "7e058c8cbe46c72615dbf306e1701338f817d137851dc5c6d545dbe5a1deaf68"},
		{9, "quota holds", "40eaf27b281a0340d01649fa743741390aeb282edd10761c8551cc6d41956d7e"},
		{10, "functions and schedules", "398e7cf4b9c6e04db3e4b956261a7330e743345772e909a249150d4897c940d1"},
		{11, "async function runs' leases", "49ffbabd7f7a63e640fa5bdf3bafda10d314b554ba8cad3caaa724e891106d00"},
		{12, "sandbox changes by team", "a93433b3bab8839c97d524fbbdb83fc543155d2fb93748f1d43b29c3204a895f"},
		{13, "E2B facade's sandbox access tokens", "30652b722928297a20e20ff65b7d3376650ff1d7f33d4277ec11be34b420474e"},
		{14, "managed databases", "6938e6cd2cf728ab5e3fe81d8690544c984a7337f3f49218a27b0175d3f96848"},
		{15, "published snapshots and hibernated sandboxes, host drain", "bd8ff7a906b4e5457859e362bec97e23844359395781c7f49cdf2491b8432125"},
		{16, "apps and deployments", "c62781664178b9a71b999827ab688ca9e416e069df0f1e8acdad1f2c5d094e5d"},
		{17, "sandboxes and snapshots owned by a service", "77a2fb2478c3945fe8f4c10087664151365e9e14d5a44d5609ec0249849218b4"},
		{18, "webhooks and their deliveries", "17bff22c72d5d341a2a18119a40e1288451d0dc045f5d29ec84d585afe56d805"},
		{19, "quotas on databases, apps, functions and snapshot sizes", "39110397cff2235860c7a1b1faa5551db0c6f79b0e5217328de09bb1500a6098"},
		{20, "app deployments' leases", "ddf6c30b2f276576deb5fa8f77af9a2d69fbe127f973b9e9014761f5b717f535"},
		{21, "E2B facade's restarted code contexts", "569c499d8b80227cd3253d8a37a41bc14e813f4bcd6a7d1343a270c0df8fd30c"},
		{22, "database clients per server replica", "ff05b4a8577221d66144b593f92ca38c61b1e095eb04e6311093d7e95550130d"},
		{23, "app deployments' changes by team", "a1bcd5cf624df928e36eb49fffa54d81be4af9649b39b7051bdc2245125c6f48"},
		{24, "background processes' exits", "5043500de09ac674da9ce7929d249513260593259139c44f9d29358587593810"},
		{25, "hosts' report fingerprints", "30912b5e17a195a471c87c9b7a9c26f22685ab213028cc5abe97b55fa4ba4f74"},
		{26, "database WAL drain leases", "ce394259c5f4f6eec835fec7cae35c4ee0a8a5a60cbdf34457390df41fb24c82"},
		{27, "pruning killed sandboxes", "fcb5fff748221a5ac5378318ee345d22bda9712dbd64182a9595cc57312163db"},
	}
	if len(migrations) < len(released) {
		t.Fatalf("%d migrations, %d released", len(migrations), len(released))
	}
	for i, r := range released {
		m := migrations[i]
		sum := fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(m.stmts, "\x00"))))
		if m.version != r.version || m.name != r.name || sum != r.sum {
			t.Errorf("migration %d (%s) changed: version %d, sum %s", r.version, r.name, m.version, sum)
		}
	}
	for i, m := range migrations {
		if m.version != i+1 || len(m.stmts) == 0 {
			t.Errorf("migration at %d: version %d with %d statements", i, m.version, len(m.stmts))
		}
	}
}

// TestStateMoves: the store applies only the moves internal/sandboxstate allows — nothing leaves
// killed, with or without a from list — and refuses an unknown state.
func TestStateMoves(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		mkTeams(t, s, "team_a")
		if _, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_m", TeamID: "team_a", Template: "base", State: StateRunning,
			ExpiresAt: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		state := func() string {
			sb, err := s.GetSandbox(ctx, "sb_m")
			if err != nil {
				t.Fatal(err)
			}
			return sb.State
		}
		for _, c := range []struct {
			to   string
			from []string
			ok   bool
			want string
		}{
			{StateHibernated, nil, true, StateHibernated},
			{StateLost, []string{StateRunning}, false, StateHibernated}, // from does not match
			{StateKilled, nil, true, StateKilled},
			{StateRunning, nil, false, StateKilled}, // nothing leaves killed
			{StateRunning, []string{StateKilled}, false, StateKilled},
			{StateKilled, nil, true, StateKilled}, // staying is fine (a second kill)
		} {
			ok, err := s.SetSandboxState(ctx, "sb_m", c.to, "", c.from...)
			if err != nil || ok != c.ok || state() != c.want {
				t.Errorf("to %s from %v: ok %v err %v, state %s; want ok %v, state %s", c.to, c.from, ok, err, state(), c.ok, c.want)
			}
		}
		if _, err := s.SetSandboxState(ctx, "sb_m", "paused", ""); err == nil {
			t.Error("unknown state accepted")
		}
	})
}

// TestMoveHibernatedMovesVolumes: a hibernated sandbox moved to another host takes the volumes it
// mounts there (and no other), in the same transaction; the old host is then told to delete its
// files of them (VolumesGoneFrom: deleted, or recorded on another host), the new host is not; a
// move that loses changes nothing.
func TestMoveHibernatedMovesVolumes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withTeams(t, s, "team_a")
		for _, id := range []string{"vol_m", "vol_other", "vol_gone"} {
			if _, err := s.CreateVolume(ctx, Volume{ID: id, TeamID: "team_a", SizeMiB: 16, HostID: "h1"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeleteVolume(ctx, "team_a", "vol_gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSandboxWithVolumes(ctx, Sandbox{ID: "sb_m", TeamID: "team_a", Template: "base", State: StateHibernated, HostID: "h1"},
			[]VolumeAttachment{{SandboxID: "sb_m", VolumeID: "vol_m", MountPath: "/data"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetHibernatedImage(ctx, "sb_m", "sb_m-1"); err != nil {
			t.Fatal(err)
		}
		ids := []string{"vol_m", "vol_other", "vol_gone", "vol_unknown"}
		if gone, err := s.VolumesGoneFrom(ctx, "h1", ids); err != nil || !reflect.DeepEqual(gone, map[string]bool{"vol_gone": true}) {
			t.Fatalf("gone from h1 before the move: %v %v", gone, err)
		}
		if ok, err := s.MoveHibernated(ctx, "sb_m", "h1", "h2"); !ok || err != nil {
			t.Fatalf("move: %v %v", ok, err)
		}
		for id, host := range map[string]string{"vol_m": "h2", "vol_other": "h1"} {
			if v, err := s.GetVolume(ctx, id); err != nil || v.HostID != host {
				t.Errorf("volume %s after the move: %+v %v (want on %s)", id, v, err, host)
			}
		}
		if gone, err := s.VolumesGoneFrom(ctx, "h1", ids); err != nil || !reflect.DeepEqual(gone, map[string]bool{"vol_m": true, "vol_gone": true}) {
			t.Fatalf("gone from h1 after the move: %v %v", gone, err)
		}
		if gone, err := s.VolumesGoneFrom(ctx, "h2", []string{"vol_m"}); err != nil || len(gone) != 0 {
			t.Fatalf("gone from h2 after the move: %v %v", gone, err)
		}
		if ok, err := s.MoveHibernated(ctx, "sb_m", "h1", "h3"); ok || err != nil {
			t.Fatalf("a second move from h1: %v %v", ok, err)
		}
		if v, err := s.GetVolume(ctx, "vol_m"); err != nil || v.HostID != "h2" {
			t.Errorf("volume after a lost move: %+v %v", v, err)
		}
	})
}

// The reaper records a batch of kills in one statement: only rows that may move there change, and
// a killed row is not touched again.
func TestSetSandboxesState(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withTeams(t, s, "team_a")
		for _, id := range []string{"sb_1", "sb_2", "sb_3", "sb_4"} {
			if _, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SetSandboxState(ctx, "sb_2", StateKilled, "by hand"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.SetSandboxesState(ctx, nil, StateKilled, "ttl expired"); n != 0 || err != nil {
			t.Fatalf("no ids: %d %v", n, err)
		}
		if _, err := s.SetSandboxesState(ctx, []string{"sb_1"}, "gone", ""); err == nil {
			t.Fatal("a state that does not exist was accepted")
		}
		n, err := s.SetSandboxesState(ctx, []string{"sb_1", "sb_2", "sb_3", "sb_missing"}, StateKilled, "ttl expired")
		if n != 2 || err != nil {
			t.Fatalf("batch: %d rows changed (want 2: sb_2 was killed already) %v", n, err)
		}
		for id, want := range map[string][2]string{
			"sb_1": {StateKilled, "ttl expired"}, "sb_2": {StateKilled, "by hand"},
			"sb_3": {StateKilled, "ttl expired"}, "sb_4": {StateRunning, ""},
		} {
			sb, err := s.GetSandbox(ctx, id)
			if err != nil || sb.State != want[0] || sb.Error != want[1] {
				t.Fatalf("%s: %s %q %v, want %s %q", id, sb.State, sb.Error, err, want[0], want[1])
			}
		}
	})
}

// TestOwnedVolumes: a service's volume (a database's) is recorded with its sandbox, stays out of
// the team's list, gets and volume use, and its service deletes it once the sandbox let go.
func TestOwnedVolumes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withTeams(t, s, "team_a")
		if _, err := s.CreateVolume(ctx, Volume{ID: "vol_team", TeamID: "team_a", SizeMiB: 64, HostID: "h1"}); err != nil {
			t.Fatal(err)
		}
		owned := Volume{ID: "vol_db", TeamID: "team_a", Name: "postgres-17-abc", SizeMiB: 3072, HostID: "h1", Owner: OwnerDatabase}
		sb := Sandbox{ID: "sb_db", TeamID: "team_a", Template: "postgres-17", State: StateRunning, HostID: "h1"}
		att := VolumeAttachment{SandboxID: "sb_db", VolumeID: "vol_db", MountPath: "/var/lib/postgresql"}
		if _, err := s.CreateSandboxesWithVolumes(ctx, []Sandbox{sb}, []Volume{owned}, []VolumeAttachment{att}); err != nil {
			t.Fatal(err)
		}
		if v, err := s.GetVolume(ctx, "vol_db"); err != nil || v.Owner != OwnerDatabase || v.SizeMiB != 3072 ||
			!reflect.DeepEqual(v.Attachments, []VolumeAttachment{att}) {
			t.Fatalf("the owned volume: %+v %v", v, err)
		}
		if v, err := s.GetVolume(ctx, "vol_team"); err != nil || v.Owner != "" {
			t.Fatalf("the team's volume: %+v %v", v, err)
		}
		if _, err := s.GetTeamVolume(ctx, "team_a", "vol_db"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("the team got the database's volume: %v", err)
		}
		if list, err := s.ListVolumes(ctx, "team_a"); err != nil || len(list) != 1 || list[0].ID != "vol_team" {
			t.Fatalf("the team's list: %+v %v", list, err)
		}
		if n, mib, err := s.VolumeUse(ctx, "team_a"); err != nil || n != 1 || mib != 64 {
			t.Fatalf("volume use %d, %d MiB (%v): want the team's own only", n, mib, err)
		}
		if sv, err := s.SandboxVolumes(ctx, "sb_db"); err != nil || !reflect.DeepEqual(sv, []VolumeAttachment{att}) {
			t.Fatalf("the sandbox's volumes %+v %v", sv, err)
		}
		var inUse *VolumeInUseError
		if err := s.DeleteVolume(ctx, "team_a", "vol_db"); !errors.As(err, &inUse) {
			t.Fatalf("delete while its sandbox holds it: %v", err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_db", StateKilled, ""); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteVolume(ctx, "team_a", "vol_db"); err != nil {
			t.Fatalf("delete after the kill: %v", err)
		}
		if v, err := s.GetVolume(ctx, "vol_db"); err != nil || !v.Deleted {
			t.Fatalf("after the delete: %+v %v", v, err)
		}
	})
}

// A sandbox-owned volume is released (recorded deleted) once no sandbox that is not killed is
// attached to it: by the ids of the sandboxes just killed, or by a sweep; never a database's or
// the team's, never one a lost or hibernated sandbox holds; a pruned sandbox's volume is swept.
func TestReleaseSandboxVolumes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withTeams(t, s, "team_a")
		mk := func(sbID, state, owner string) string {
			t.Helper()
			vid := "vol_" + sbID
			sb := Sandbox{ID: sbID, TeamID: "team_a", Template: "postgres-17", State: StateRunning, HostID: "h1"}
			v := Volume{ID: vid, TeamID: "team_a", SizeMiB: 3072, HostID: "h1", Owner: owner}
			att := VolumeAttachment{SandboxID: sbID, VolumeID: vid, MountPath: "/var/lib/postgresql"}
			if _, err := s.CreateSandboxesWithVolumes(ctx, []Sandbox{sb}, []Volume{v}, []VolumeAttachment{att}); err != nil {
				t.Fatal(err)
			}
			if state != StateRunning {
				if _, err := s.SetSandboxState(ctx, sbID, state, "test"); err != nil {
					t.Fatal(err)
				}
			}
			return vid
		}
		live := mk("sb_live", StateRunning, OwnerSandbox)
		mk("sb_lost", StateLost, OwnerSandbox)
		mk("sb_hib", StateHibernated, OwnerSandbox)
		killedA := mk("sb_ka", StateKilled, OwnerSandbox)
		killedB := mk("sb_kb", StateKilled, OwnerSandbox)
		mk("sb_db", StateKilled, OwnerDatabase)
		mk("sb_team", StateKilled, "")
		ids := func(vs []Volume) (out []string) {
			for _, v := range vs {
				out = append(out, v.ID)
			}
			return out
		}
		got, err := s.ReleaseSandboxVolumes(ctx, []string{"sb_ka", "sb_live", "sb_db", "sb_team"}, 100)
		if err != nil || !reflect.DeepEqual(ids(got), []string{killedA}) {
			t.Fatalf("released for the killed ids: %v %v", ids(got), err)
		}
		if v, err := s.GetVolume(ctx, killedA); err != nil || !v.Deleted {
			t.Fatalf("released volume %+v %v", v, err)
		}
		if got, err := s.ReleaseSandboxVolumes(ctx, []string{"sb_ka"}, 100); err != nil || len(got) != 0 {
			t.Fatalf("released twice: %v %v", ids(got), err)
		}
		// A live sandbox's volume is released once its sandbox's record is pruned (a fork child
		// killed long ago, say).
		if _, err := s.exec(ctx, s.db, `DELETE FROM sandboxes WHERE id = ?`, "sb_live"); err != nil {
			t.Fatal(err)
		}
		got, err = s.ReleaseSandboxVolumes(ctx, nil, 1)
		if err != nil || len(got) != 1 {
			t.Fatalf("a sweep of one: %v %v", ids(got), err)
		}
		rest, err := s.ReleaseSandboxVolumes(ctx, nil, 100)
		if err != nil || len(rest) != 1 {
			t.Fatalf("the sweep's rest: %v %v", ids(rest), err)
		}
		if all := []string{got[0].ID, rest[0].ID}; !slices.Contains(all, live) || !slices.Contains(all, killedB) {
			t.Fatalf("swept %v, want %s and %s", all, live, killedB)
		}
		for _, id := range []string{"vol_sb_lost", "vol_sb_hib", "vol_sb_db", "vol_sb_team"} {
			if v, err := s.GetVolume(ctx, id); err != nil || v.Deleted {
				t.Fatalf("volume %s was released: %+v %v", id, v, err)
			}
		}
	})
}
