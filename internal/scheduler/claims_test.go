package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// replicas is n schedulers on one PostgreSQL, as n server replicas are.
func replicas(t *testing.T, n int, cfg Config) []*Scheduler {
	ctx := context.Background()
	u := testenv.PostgresDatabase(t, "replicas")
	var out []*Scheduler
	for range n {
		st, err := store.OpenPostgres(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c := cfg
		c.Store, c.Logger = st, slog.New(slog.NewTextHandler(io.Discard, nil))
		out = append(out, New(c))
	}
	return out
}

// TestTwoReplicasDoNotOverCommit: two replicas placing at once on the same nearly full hosts
// never send a host more creates than it has slots (the fakes refuse those: over-commits), each
// knowing only its own placements and the hosts' last reports.
func TestTwoReplicasDoNotOverCommit(t *testing.T) {
	ctx := context.Background()
	rs := replicas(t, 2, Config{})
	const hosts, slots = 3, 4
	var fakes []*agenttest.Agent
	for i := range hosts {
		a := agenttest.New(fmt.Sprintf("host-%d", i), "tok", "base")
		t.Cleanup(a.Close)
		a.SetSlots(slots)
		a.SetCreateDelay(20 * time.Millisecond) // creates overlap
		fakes = append(fakes, a)
		info, err := agentclient.New(a.URL(), "tok").Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs {
			if err := s.Register(ctx, RegistrationFromInfo(info, a.URL(), "tok")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each replica tries to fill the whole fleet; a create tries up to three hosts, as
	// sandboxes.tryHosts does.
	var made, refusedByPlacement atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 * hosts * slots {
		s := rs[i%2]
		wg.Go(func() {
			cands, err := s.Place(ctx, "base")
			if err != nil {
				refusedByPlacement.Add(1)
				return
			}
			for _, h := range cands[:min(3, len(cands))] {
				done, err := s.Reserve(h.ID, 0)
				if err != nil {
					continue
				}
				_, err = s.Client(h).CreateSandbox(ctx, agentclient.CreateRequest{ID: fmt.Sprintf("sb_%d", i), Template: "base"})
				done(err == nil)
				if err == nil {
					made.Add(1)
					return
				}
			}
			refusedByPlacement.Add(1)
		})
	}
	wg.Wait()
	over := 0
	for _, a := range fakes {
		over += a.Refused()
	}
	if over != 0 || made.Load() > hosts*slots || made.Load() == 0 {
		t.Fatalf("%d creates sent to full hosts (over-commits), %d made of %d slots, %d refused before", over, made.Load(), hosts*slots, refusedByPlacement.Load())
	}
	t.Logf("%d made of %d slots; %d refused by placement; 0 over-commits", made.Load(), hosts*slots, refusedByPlacement.Load())
}

// TestReservationExpires: a reservation whose caller never answers (it failed or panicked) ends
// after ClaimTTL, here and in the store: the slot can be taken again.
func TestReservationExpires(t *testing.T) {
	ctx := context.Background()
	clk := &settable{t: time.Now()}
	rs := replicas(t, 2, Config{ClaimTTL: 200 * time.Millisecond, Now: clk.now})
	r := reg("h1", 4096, 0, tmpl("base", true))
	r.SlotsTotal = 1
	for _, s := range rs {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs[0].Reserve("h1", 0); err != nil { // never answered
		t.Fatal(err)
	}
	if _, err := rs[1].Reserve("h1", 0); err == nil {
		t.Fatal("the other replica took the slot a reservation holds")
	}
	clk.add(time.Second) // the store's claim expired ...
	deadline := time.Now().Add(10 * time.Second)
	for { // ... and, once its timer fired, the replica's own reservation
		rs[0].mu.Lock()
		left := rs[0].pending["h1"].slots
		rs[0].mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unanswered reservation never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, s := range rs {
		done, err := s.Reserve("h1", 0)
		if err != nil {
			t.Fatalf("replica %d after the expiry: %v", i, err)
		}
		done(false)
	}
}

// TestPlacedAnswersShareAWrite: placements answered while an answer write runs are written
// together in one statement once it ends, each caller returning only then (a claim ends when it
// did with a statement of its own).
func TestPlacedAnswersShareAWrite(t *testing.T) {
	ctx := context.Background()
	clk := &settable{t: time.Now()}
	rs := replicas(t, 2, Config{Now: clk.now})
	s, other := rs[0], rs[1]
	const n = 50
	r := reg("h", 8192, 0, tmpl("base", true))
	r.SlotsTotal = n
	for _, x := range rs {
		if err := x.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	s.answers.mu.Lock()
	s.answers.running = true // an answer write in flight: what is answered now waits for it
	s.answers.mu.Unlock()
	var answered sync.WaitGroup
	var returned atomic.Int64
	for range n {
		done, err := s.Reserve("h", 0)
		if err != nil {
			t.Fatal(err)
		}
		answered.Go(func() { done(true); returned.Add(1) })
	}
	for queued := 0; queued < n && returned.Load() < n; { // every caller waits in the batch
		s.answers.mu.Lock()
		if s.answers.cur != nil {
			queued = len(s.answers.cur.rows)
		}
		s.answers.mu.Unlock()
		runtime.Gosched()
	}
	if _, err := other.Reserve("h", 0); err == nil {
		t.Fatal("the other replica took a slot whose claim's answer is not written yet")
	}
	if k := returned.Load(); k != 0 {
		t.Fatalf("%d callers returned before their answers were written", k)
	}
	s.answers.flush() // the write in flight ends: the waiting answers follow in one statement
	answered.Wait()
	if w := s.answers.writes.Load(); w != 1 {
		t.Fatalf("%d placed answers took %d statements, want 1", n, w)
	}
	clk.add(2 * reportSettle) // a report read after the answers counts the sandboxes
	r.SlotsUsed = n - 1
	if err := other.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reserve("h", 0); err != nil {
		t.Fatalf("after a report counting the answered placements: %v", err)
	}
}

// TestNoClaimsOnSQLite: on SQLite (one replica by design) a reservation writes no claim — the
// replica's own reservations are all there are — and still refuses a full host.
func TestNoClaimsOnSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	st, err := store.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	r := reg("h", 8192, 0, tmpl("base", true))
	r.SlotsTotal = 1
	if err := s.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Place(ctx, "base"); err != nil { // as a create does first
		t.Fatal(err)
	}
	done, err := s.Reserve("h", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve("h", 0); err == nil {
		t.Fatal("a full host took a second reservation")
	}
	done(true)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM host_claims`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d claims written on SQLite (%v), want none", n, err)
	}
}

// TestKillCreditsAcrossReplicas: a sandbox one replica stopped frees its slot for every replica
// at once (the store's credit: the others' host lists and claims count it), not only in the
// killer's memory until the host's next report; the slot is given once (the killer's own claim on
// it after another replica's is refused), and a report heard after the stop ends the credit.
func TestKillCreditsAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	clk := &settable{t: time.Now()}
	rs := replicas(t, 2, Config{Now: clk.now})
	killer, other := rs[0], rs[1]
	r := reg("h", 8192, 4, tmpl("base", true)) // 4 of 4 slots used
	for _, s := range rs {
		if err := s.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Place(ctx, "base"); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("a full host placed on: %v", err)
	}
	clk.add(time.Millisecond)
	killer.Freeing("h", "sb_1", 512)(true)
	for { // the credit is written in the background
		killer.credits.mu.Lock()
		idle := !killer.credits.running
		killer.credits.mu.Unlock()
		if idle {
			break
		}
		runtime.Gosched()
	}
	hs, err := other.Place(ctx, "base") // reads the host list: the slot is free there too
	if err != nil || len(hs) != 1 || hs[0].ID != "h" {
		t.Fatalf("the other replica does not see the freed slot: %v %v", ids(hs), err)
	}
	done := reserve(t, other, "h", 512)
	if _, err := killer.Place(ctx, "base"); !errdefs.Is(err, errdefs.Capacity) { // its host list has the other's claim
		t.Fatalf("the killer's placement does not see the other replica's claim: %v", err)
	}
	if _, err := killer.Reserve("h", 512); !errdefs.Is(err, errdefs.Capacity) {
		t.Fatalf("the freed slot was taken twice: %v", err)
	}
	if got := killer.Refusals(); got["replica"] != 1 { // its host list, read by the Place above, had the claim
		t.Fatalf("refusals %v, want 1 by the replica's own count", got)
	}
	done(true)
	// The host's next report counts the stop and the new sandbox: the credit has ended.
	clk.add(2 * reportSettle)
	if err := other.Register(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, s := range rs { // the killer too: the report another replica got ends its own credit
		if _, err := s.Place(ctx, "base"); !errdefs.Is(err, errdefs.Capacity) {
			t.Fatalf("placed on a host its last report says full: %v", err)
		}
	}
	if hs, err := killer.cfg.Store.ListHosts(ctx); err != nil || hs[0].SlotsFreed != 0 {
		t.Fatalf("credit left after a report heard later: %+v %v", hs, err)
	}
}
