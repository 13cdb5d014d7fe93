package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLockOneHolder: of two replicas on one PostgreSQL database only one holds a lock until it
// lets go; on SQLite (one replica) the lock is always held.
func TestLockOneHolder(t *testing.T) {
	ctx := context.Background()
	url := newPostgresDB(t)
	a, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, lb := a.NewLock("reaper"), b.NewLock("reaper")
	hold := func(l *Lock) bool {
		t.Helper()
		ok, err := l.Hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !hold(la) || !hold(la) {
		t.Fatal("a cannot take a free lock, or lost it")
	}
	if hold(lb) {
		t.Fatal("b holds the lock a holds")
	}
	if !hold(b.NewLock("other")) {
		t.Fatal("another name is a different lock")
	}
	la.Release()
	if !hold(lb) || hold(la) {
		t.Fatal("the lock did not pass to b")
	}
	lb.Release()

	s := openSQLiteT(t)
	if !hold(s.NewLock("reaper")) || !hold(s.NewLock("reaper")) {
		t.Fatal("sqlite: one replica always holds its locks")
	}
}

// TestExpiredSandboxesUseLiveIndex: the reaper's query reads the partial index of live rows by
// expiry, not the whole table.
func TestExpiredSandboxesUseLiveIndex(t *testing.T) {
	s := openSQLiteT(t)
	q := `EXPLAIN QUERY PLAN SELECT ` + sandboxCols + ` FROM sandboxes WHERE state <> '` + StateKilled + `' AND expires_at <= ? ORDER BY expires_at LIMIT ?`
	rows, err := s.db.Query(q, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if p := strings.Join(plan, "; "); !strings.Contains(p, "sandboxes_live_expires") {
		t.Fatalf("plan does not use the live index: %s", p)
	}
}

func openSQLiteT(t *testing.T) *Store {
	t.Helper()
	s, err := OpenSQLite(context.Background(), t.TempDir()+"/state.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTeamLockAcrossReplicas: two replicas on one PostgreSQL database racing to hold a team's
// last quota slots, each checking holds then adding one under WithTeamLock, hand out exactly the
// limit; a lapsed hold no longer counts and a released one is gone.
func TestTeamLockAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	url := newPostgresDB(t)
	var replicas [2]*Store
	for i := range replicas {
		s, err := OpenPostgres(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		replicas[i] = s
	}
	const limit, tries = 5, 24
	var mu sync.Mutex
	granted := 0
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := replicas[i%2]
			err := s.WithTeamLock(ctx, "team_a", func() error {
				h, err := s.HeldQuota(ctx, "team_a")
				if err != nil || h.Sandboxes >= limit {
					return err
				}
				time.Sleep(time.Millisecond) // a check that takes a while widens the window
				if err := s.AddQuotaHold(ctx, fmt.Sprintf("qh_%d", i), "team_a", QuotaAmount{Sandboxes: 1}, time.Minute); err != nil {
					return err
				}
				mu.Lock()
				granted++
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if h, _ := replicas[0].HeldQuota(ctx, "team_a"); granted != limit || h.Sandboxes != limit {
		t.Fatalf("%d racing holds under a limit of %d: %d granted, %d held", tries, limit, granted, h.Sandboxes)
	}
	// Another team's lock is its own.
	if err := replicas[1].WithTeamLock(ctx, "team_b", func() error {
		return replicas[0].WithTeamLock(ctx, "team_c", func() error { return nil })
	}); err != nil {
		t.Fatal(err)
	}
	a := replicas[0]
	for i := range tries {
		if err := a.ReleaseQuotaHold(ctx, fmt.Sprintf("qh_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.AddQuotaHold(ctx, "qh_short", "team_a", QuotaAmount{VCPUs: 2}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if h, err := a.HeldQuota(ctx, "team_a"); err != nil || h != (QuotaAmount{}) {
		t.Fatalf("after release and lapse: %+v %v", h, err)
	}
}

// TestRefreshUpHost: the one-statement heartbeat writes a known, up host's report and nothing
// else: an unknown or down host is left to UpsertHost.
func TestRefreshUpHost(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		h := Host{ID: "h1", URL: "http://a", Token: "t", SlotsTotal: 4, Templates: []string{"base"}}
		if ok, err := s.RefreshUpHost(ctx, h); ok || err != nil {
			t.Fatalf("unknown host: %v %v", ok, err)
		}
		if _, err := s.UpsertHost(ctx, h); err != nil {
			t.Fatal(err)
		}
		h.SlotsUsed, h.Baked = 3, []string{"base"}
		if ok, err := s.RefreshUpHost(ctx, h); !ok || err != nil {
			t.Fatalf("up host: %v %v", ok, err)
		}
		got, err := s.GetHost(ctx, "h1")
		if err != nil || got.SlotsUsed != 3 || len(got.Baked) != 1 || got.State != HostUp {
			t.Fatalf("after refresh: %+v %v", got, err)
		}
		if err := s.MarkHostDown(ctx, "h1", "test"); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.RefreshUpHost(ctx, h); ok || err != nil {
			t.Fatalf("down host: %v %v", ok, err)
		}
		if got, _ := s.GetHost(ctx, "h1"); got.State != HostDown {
			t.Fatalf("a refresh brought a down host up: %+v", got)
		}
	})
}

// TestTouchHosts: the batched liveness write moves last_heartbeat of the up hosts whose row holds
// the same report, and leaves out (for a whole write) a down host, an unknown one, and a host
// whose row holds another report.
func TestTouchHosts(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		s.now = func() time.Time { return t0 }
		a := Host{ID: "a", URL: "http://a", SlotsTotal: 4, Templates: []string{"base"}}
		b, c := a, a
		b.ID, c.ID = "b", "c"
		for _, h := range []Host{a, b, c} {
			if _, err := s.UpsertHost(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkHostDown(ctx, "c", "test"); err != nil {
			t.Fatal(err)
		}
		stale := b
		stale.SlotsUsed = 1 // b's row holds SlotsUsed 0
		at := t0.Add(30 * time.Second)
		got, err := s.TouchHosts(ctx, at, at, time.Time{}, []HostReport{{"a", ReportHash(a)}, {"b", ReportHash(stale)}, {"c", ReportHash(c)}, {"x", ReportHash(a)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got["a"] {
			t.Fatalf("touched %v, want only a", got)
		}
		for id, want := range map[string]time.Time{"a": at, "b": t0, "c": t0} {
			if h, err := s.GetHost(ctx, id); err != nil || !h.LastHeartbeat.Equal(want) {
				t.Fatalf("host %s: last heartbeat %v (%v), want %v", id, h.LastHeartbeat, err, want)
			}
		}
		if h, _ := s.GetHost(ctx, "c"); h.State != HostDown {
			t.Fatalf("a touch brought a down host up: %+v", h)
		}
		if got, err := s.TouchHosts(ctx, at, at, time.Time{}, nil); len(got) != 0 || err != nil {
			t.Fatalf("empty batch: %v %v", got, err)
		}
	})
}

// claimer returns a func that claims a slot of hostID at t0 (for an hour) and fails t unless
// ClaimSlot answers want.
func claimer(ctx context.Context, t *testing.T, s *Store, hostID string, t0 time.Time) func(id string, want bool) {
	return func(id string, want bool) {
		t.Helper()
		if ok, err := s.ClaimSlot(ctx, id, hostID, t0, t0.Add(time.Hour)); err != nil || ok != want {
			t.Fatalf("claim %s: %v %v, want %v", id, ok, err, want)
		}
	}
}

// TestAnswerClaims: answers written together end each claim as asked — nothing placed frees the
// slot at once, placed keeps it until a report read after the answer.
func TestAnswerClaims(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		h := Host{ID: "h", URL: "http://h", SlotsTotal: 2, Templates: []string{"base"}, ReadAt: t0}
		if _, err := s.UpsertHost(ctx, h); err != nil {
			t.Fatal(err)
		}
		claim := claimer(ctx, t, s, "h", t0)
		claim("c1", true)
		claim("c2", true)
		claim("c3", false)
		answered := t0.Add(time.Second)
		if err := s.AnswerClaims(ctx, []ClaimAnswer{{ID: "c1", At: answered}, {ID: "c2", Placed: true, At: answered}}); err != nil {
			t.Fatal(err)
		}
		claim("c3", true)  // c1 placed nothing: its slot is free
		claim("c4", false) // c2's sandbox is not in a report yet
		if _, err := s.TouchHosts(ctx, t0.Add(2*time.Second), answered.Add(time.Millisecond), time.Time{}, []HostReport{{"h", ReportHash(h)}}); err != nil {
			t.Fatal(err)
		}
		claim("c4", true) // a report read after c2's answer counts its sandbox (its slots_used, here 0)
		claim("c5", false)
		if err := s.AnswerClaims(ctx, []ClaimAnswer{{ID: "c4", At: answered}}); err != nil { // alone
			t.Fatal(err)
		}
		claim("c5", true)
		if err := s.AnswerClaims(ctx, []ClaimAnswer{{ID: "c5", Placed: true, At: t0.Add(3 * time.Second)}}); err != nil {
			t.Fatal(err)
		}
		claim("c6", false) // c5's sandbox is not in a report yet
		if err := s.DropEndedClaims(ctx, t0); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM host_claims`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("claims left after the drop: %d %v, want c3 and c5", n, err)
		}
	})
}

// TestCreditSlots: a stopped sandbox's credit gives its slot back to every replica's claims and
// host lists until a report heard after the stop is written (a full one or a batched touch), once
// however often it is credited; a credit asked before the last report counts for nothing.
func TestCreditSlots(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		s.now = func() time.Time { return t0 }
		h := Host{ID: "h", URL: "http://h", SlotsTotal: 2, SlotsUsed: 2, Templates: []string{"base"}, ReadAt: t0}
		if _, err := s.UpsertHost(ctx, h); err != nil {
			t.Fatal(err)
		}
		claim := claimer(ctx, t, s, "h", t0)
		claimed := int64(0)
		freed := func(want int64) {
			t.Helper()
			hs, err := s.ListHosts(ctx)
			if err != nil || len(hs) != 1 || hs[0].SlotsFreed != want || hs[0].SlotsClaimed != claimed {
				t.Fatalf("hosts %+v %v, want %d slots freed, %d claimed", hs, err, want, claimed)
			}
		}
		credit := func(at time.Time, ids ...string) {
			t.Helper()
			var cs []SlotCredit
			for _, id := range ids {
				cs = append(cs, SlotCredit{SandboxID: id, HostID: "h", At: at, Expires: t0.Add(time.Hour)})
			}
			if err := s.CreditSlots(ctx, cs); err != nil {
				t.Fatal(err)
			}
		}
		claim("c1", false)
		freed(0)
		credit(t0.Add(time.Second), "sb1", "sb1") // a kill and the reaper's of the same sandbox
		credit(t0.Add(time.Second), "sb1")
		freed(1)
		claim("c1", true)
		claim("c2", false)
		credit(t0.Add(time.Second), "sb2")
		claimed = 1
		freed(2)
		claim("c2", true)
		claim("c3", false)
		claimed = 2
		freed(2)

		// A report heard after the stops counts them: the credits end (its slots_used, 0 here,
		// and the two unanswered claims leave no slot).
		s.now = func() time.Time { return t0.Add(2 * time.Second) }
		h.SlotsUsed = 0
		if ok, err := s.RefreshUpHost(ctx, h); !ok || err != nil {
			t.Fatal(ok, err)
		}
		freed(0)
		claim("c3", false)
		credit(t0.Add(1500*time.Millisecond), "sb3") // asked before that report was written
		freed(0)

		// A batched touch (the same report) written after a stop ends its credit too, even dated
		// earlier (its first heartbeat's arrival).
		credit(t0.Add(3*time.Second), "sb4")
		freed(1)
		s.now = func() time.Time { return t0.Add(4 * time.Second) }
		if got, err := s.TouchHosts(ctx, t0.Add(2500*time.Millisecond), t0, time.Time{}, []HostReport{{"h", ReportHash(h)}}); err != nil || !got["h"] {
			t.Fatal(got, err)
		}
		freed(0)
		if err := s.DropEndedClaims(ctx, t0); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM host_claims`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("claims left after the drop: %d %v, want c1 and c2 (no credit)", n, err)
		}
	})
}
