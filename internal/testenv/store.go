package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pandastack/pandastack/internal/store"
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
