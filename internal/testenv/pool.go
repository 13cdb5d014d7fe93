package testenv

import (
	"os"
	"testing"

	"github.com/pandastack/pandastack/internal/storage"
)

// ReflinkPool is a directory where files reflink (storage.Clone): a loop-mounted XFS pool,
// detached after the test. Without root the test is skipped.
func ReflinkPool(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a loop-mounted XFS pool, where files reflink)")
	}
	pool, err := storage.Open(t.TempDir(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return pool.Dir
}
