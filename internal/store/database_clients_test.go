package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDatabaseClients: a replica's report replaces its earlier one and goes when its clients do;
// another replica counts only the others' fresh reports; stale reports go; last_client_at only
// rises.
func TestDatabaseClients(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withDatabases(t, s, "db_a", "db_b")
		t0 := time.Now().UTC().Truncate(time.Microsecond)
		report := func(replica string, at time.Time, open map[string]int, last map[string]time.Time) {
			t.Helper()
			if err := s.ReportDatabaseClients(ctx, replica, at, open, last, at.Add(-15*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		elsewhere := func(replica string, since time.Time) map[string]int {
			t.Helper()
			got, err := s.DatabaseClientsElsewhere(ctx, replica, since)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		report("r1", t0, map[string]int{"db_a": 2, "db_b": 1}, map[string]time.Time{"db_a": t0})
		report("r2", t0, map[string]int{"db_a": 1}, map[string]time.Time{"db_a": t0.Add(-time.Hour)})
		if got := elsewhere("r2", t0.Add(-time.Second)); got["db_a"] != 2 || got["db_b"] != 1 || len(got) != 2 {
			t.Errorf("r2 sees %v, want r1's clients", got)
		}
		if got := elsewhere("r3", t0.Add(-time.Second)); got["db_a"] != 3 {
			t.Errorf("r3 sees %v, want db_a's 3 clients of r1 and r2", got)
		}
		// r1's clients of db_b leave: its row goes; a report older than since does not count.
		report("r1", t0.Add(5*time.Second), map[string]int{"db_b": 0}, map[string]time.Time{"db_b": t0.Add(5 * time.Second)})
		if got := elsewhere("r2", t0.Add(time.Second)); len(got) != 0 {
			t.Errorf("r2 sees %v, want nothing reported since t0+1s", got)
		}
		if got := elsewhere("r2", t0.Add(-time.Second)); got["db_b"] != 0 || got["db_a"] != 2 {
			t.Errorf("r2 sees %v after db_b's clients left r1", got)
		}
		// A report 20 s later expires r1's and r2's rows of t0 (stale after 15 s).
		report("r3", t0.Add(20*time.Second), nil, nil)
		if got := elsewhere("r9", time.Time{}); len(got) != 0 {
			t.Errorf("stale reports still count: %v", got)
		}
		last, err := s.DatabaseLastClients(ctx)
		if err != nil || len(last) != 2 || !last["db_a"].Equal(t0) || !last["db_b"].Equal(t0.Add(5*time.Second)) {
			t.Errorf("last clients %v, %v; want db_a at t0 (an older report does not lower it), db_b at t0+5s", last, err)
		}
	})
}

// TestCancelKeys: a shared cancel key leads to its database (and pooler), goes when deleted, and
// old ones are pruned.
func TestCancelKeys(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withClock(s)
		for _, k := range []struct {
			hash, id string
			pooler   bool
		}{{"h1", "db_a", false}, {"h1", "db_a", true}, {"h2", "db_b", false}} {
			if err := s.PutCancelKey(ctx, k.hash, k.id, k.pooler); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.CancelKeyTargets(ctx, "h1"); err != nil || len(got) != 2 || got[0] != (DatabaseTarget{"db_a", false}) || got[1] != (DatabaseTarget{"db_a", true}) {
			t.Fatalf("h1 leads to %+v, %v", got, err)
		}
		if err := s.DeleteCancelKey(ctx, "h1", "db_a", true); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.CancelKeyTargets(ctx, "h1"); len(got) != 1 || got[0].Pooler {
			t.Fatalf("after deleting the pooler's: %+v", got)
		}
		if got, _ := s.CancelKeyTargets(ctx, "nope"); len(got) != 0 {
			t.Fatalf("an unknown key leads to %+v", got)
		}
		clk.add(2 * time.Hour)
		if err := s.PutCancelKey(ctx, "h3", "db_c", false); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneCancelKeys(ctx, clk.now().Add(-time.Hour)); err != nil || n != 2 {
			t.Fatalf("pruned %d, %v; want the 2 old keys", n, err)
		}
		if got, _ := s.CancelKeyTargets(ctx, "h3"); len(got) != 1 {
			t.Fatalf("the fresh key was pruned: %+v", got)
		}
	})
}

// withDatabases makes team_a and its databases ids (running, on sandboxes sb_<id>).
func withDatabases(t *testing.T, s *Store, ids ...string) {
	t.Helper()
	withTeams(t, s, "team_a")
	for _, id := range ids {
		if _, err := s.CreateDatabase(context.Background(), Database{ID: id, TeamID: "team_a", Name: id[3:], Version: "17", SandboxID: "sb_" + id, State: "running"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDatabaseDrainLease: one holder at a time; the holder renews and re-claims its own lease;
// another claims it once it lapses or is let go, and the old holder's renewal then fails.
func TestDatabaseDrainLease(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withDatabases(t, s, "db_a")
		now := time.Now().UTC()
		claim := func(holder string, at, until time.Time, want bool) {
			t.Helper()
			if got, err := s.ClaimDatabaseDrain(ctx, "db_a", holder, at, until); err != nil || got != want {
				t.Fatalf("%s claims at %s: %v (%v), want %v", holder, at, got, err, want)
			}
		}
		claim("r1", now, now.Add(time.Minute), true)
		claim("r2", now, now.Add(time.Minute), false)
		claim("r1", now, now.Add(time.Minute), true) // its own
		if err := s.RenewDatabaseDrain(ctx, "db_a", "r1", now.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		claim("r2", now.Add(90*time.Second), now.Add(3*time.Minute), false) // renewed past this
		claim("r2", now.Add(3*time.Minute), now.Add(4*time.Minute), true)   // lapsed
		if err := s.RenewDatabaseDrain(ctx, "db_a", "r1", now.Add(5*time.Minute)); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("the old holder renewed: %v", err)
		}
		if err := s.ReleaseDatabaseDrain(ctx, "db_a", "r1"); err != nil { // not its own: nothing
			t.Fatal(err)
		}
		claim("r1", now.Add(3*time.Minute), now.Add(4*time.Minute), false)
		if err := s.ReleaseDatabaseDrain(ctx, "db_a", "r2"); err != nil {
			t.Fatal(err)
		}
		claim("r1", now, now.Add(time.Minute), true)
	})
}

// TestDatabasesWithDeadVM: the databases whose sandbox failed or was killed are listed (not those
// running or hibernated); moving one to a new VM is conditional on the VM it had.
func TestDatabasesWithDeadVM(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withDatabases(t, s, "db_a", "db_b", "db_c", "db_d")
		now := time.Now().UTC()
		for id, state := range map[string]string{"sb_db_a": StateRunning, "sb_db_b": StateError, "sb_db_c": StateKilled, "sb_db_d": StateHibernated} {
			if _, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "postgres-17", State: state, HostID: "h1",
				CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		dead := func() (ids []string) {
			t.Helper()
			list, err := s.ListDatabasesWithDeadVM(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range list {
				ids = append(ids, d.ID+"/"+d.SandboxID)
			}
			return ids
		}
		if got := dead(); len(got) != 2 || got[0] != "db_b/sb_db_b" || got[1] != "db_c/sb_db_c" {
			t.Fatalf("databases with a dead VM: %v", got)
		}
		if _, err := s.CreateSandbox(ctx, Sandbox{ID: "sb_new", TeamID: "team_a", Template: "postgres-17", State: StateRunning, HostID: "h1",
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDatabaseSandbox(ctx, "db_b", "sb_db_b", "sb_new"); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDatabaseSandbox(ctx, "db_b", "sb_db_b", "sb_other"); !errors.Is(err, ErrConflict) {
			t.Fatalf("a second move from the old VM: %v, want ErrConflict", err)
		}
		if err := s.SetDatabaseSandbox(ctx, "db_none", "sb_x", "sb_y"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("moving a missing database: %v, want ErrNotFound", err)
		}
		if got := dead(); len(got) != 1 || got[0] != "db_c/sb_db_c" {
			t.Fatalf("databases with a dead VM after a move: %v", got)
		}
	})
}
