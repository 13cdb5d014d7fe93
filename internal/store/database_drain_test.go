package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDatabaseDrainLease: one holder at a time; the holder renews and re-claims its own lease;
// another claims it once it lapses or is let go, and the old holder's renewal then fails.
func TestDatabaseDrainLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		withTeams(t, s, "team_a")
		if _, err := s.CreateDatabase(ctx, Database{ID: "db_a", TeamID: "team_a", Name: "a", Version: "17", SandboxID: "sb_a", State: "running"}); err != nil {
			t.Fatal(err)
		}
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
