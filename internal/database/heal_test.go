package database

import (
	"errors"
	"testing"
	"time"
)

// A failed heal is retried by the passes later and later, up to healBackoffMax; a success
// forgets the failures.
func TestHealBackoff(t *testing.T) {
	s := New(Config{})
	if !s.healDue("db_a") {
		t.Fatal("a database never tried is not due")
	}
	fail := errors.New("host down")
	var waits []time.Duration
	for range 8 {
		waits = append(waits, s.healTried("db_a", fail))
	}
	if waits[0] != HealInterval || waits[1] != 2*HealInterval || waits[7] != healBackoffMax {
		t.Fatalf("waits after failures: %v", waits)
	}
	if s.healDue("db_a") {
		t.Fatal("due right after a failure")
	}
	if s.healDue("db_b") != true {
		t.Fatal("another database waits for db_a's failures")
	}
	if w := s.healTried("db_a", nil); w != 0 || !s.healDue("db_a") {
		t.Fatalf("after a success: wait %v, due %v", w, s.healDue("db_a"))
	}
}
