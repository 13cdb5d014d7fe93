package store

import (
	"context"
	"sync"
	"testing"
)

// TestPostgresPoolKeepsItsConnections: after a burst that uses many connections at once, the
// pool keeps them all for the next burst (none closed and dialed again: a PostgreSQL backend
// per dial).
func TestPostgresPoolKeepsItsConnections(t *testing.T) {
	ctx := context.Background()
	s, err := OpenPostgres(ctx, newPostgresDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = PostgresPoolSize / 2
	for burst := 0; burst < 2; burst++ {
		var begun, done sync.WaitGroup
		begun.Add(n)
		errs := make(chan error, n)
		for range n {
			done.Go(func() {
				tx, err := s.db.BeginTx(ctx, nil) // holds a connection until it ends
				begun.Done()
				if err != nil {
					errs <- err
					return
				}
				begun.Wait() // all n at once
				errs <- tx.Commit()
			})
		}
		done.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := s.db.Stats(); st.MaxIdleClosed != 0 || st.OpenConnections != n || st.Idle != n {
		t.Fatalf("after two bursts of %d: %d open, %d idle, %d closed for want of idle room (want %d, %d, 0)",
			n, st.OpenConnections, st.Idle, st.MaxIdleClosed, n, n)
	}
}

// TestPostgresNoJIT: the store's sessions run without JIT compilation (PostgreSQL compiles on
// every execution of a query estimated costly: 1.54 s of a 1.84 s read of the host list at 5,000
// hosts), unless the DSN asks for it.
func TestPostgresNoJIT(t *testing.T) {
	ctx := context.Background()
	dsn := newPostgresDB(t)
	for _, c := range []struct{ dsn, want string }{{dsn, "off"}, {dsn + "&jit=on", "on"}} {
		s, err := OpenPostgres(ctx, c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = s.db.QueryRowContext(ctx, `SHOW jit`).Scan(&got)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Fatalf("DSN %q: jit is %q, want %q", c.dsn, got, c.want)
		}
	}
}
