package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// SQLiteStore opens a store in a new SQLite database under the test's temp dir, closed when the
// test ends.
func SQLiteStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// PostgresStores opens n store handles on the PostgreSQL database at url, one per server replica
// of a test, closed when the test ends.
func PostgresStores(t testing.TB, url string, n int) []*store.Store {
	t.Helper()
	var out []*store.Store
	for range n {
		st, err := store.OpenPostgres(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out = append(out, st)
	}
	return out
}

// PostgresDatabase starts a PostgreSQL server of the test's own (stopped when it ends) and returns
// the URL of a new database called name on it.
func PostgresDatabase(t testing.TB, name string) string {
	t.Helper()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	url, err := pg.NewDatabase(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}
