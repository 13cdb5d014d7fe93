package bake

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestLockCacheEntry: a cache entry's lock is held by one at a time (a second taker waits, here
// until its context ends); released, it can be taken again.
func TestLockCacheEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "built-x.lock")
	unlock, err := lockCacheEntry(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := lockCacheEntry(ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second taker while held: %v, want it to wait (until its context ends)", err)
	}
	unlock()
	again, err := lockCacheEntry(ctx, path) // free now: taken at once, even with an ended context
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
}
