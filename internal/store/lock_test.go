package store

import (
	"context"
	"strings"
	"testing"
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
