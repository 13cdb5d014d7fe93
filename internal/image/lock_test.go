package image

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestLockEntry: a cache entry's lock is held by one taker at a time (flock, so across processes
// too); a waiter gives up when its context ends and gets the lock once it is let go.
func TestLockEntry(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "built-abc")
	unlock, err := LockEntry(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := LockEntry(ctx, dir); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second taker while held: %v, want the context's deadline", err)
	}
	if u, err := LockEntry(context.Background(), filepath.Join(filepath.Dir(dir), "built-other")); err != nil {
		t.Fatalf("another entry: %v", err)
	} else {
		u()
	}
	unlock()
	u, err := LockEntry(context.Background(), dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	u()
}
