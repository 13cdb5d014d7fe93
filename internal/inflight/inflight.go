// Package inflight counts what runs at once per key (a function's invocations, a key's event
// streams) against a limit, in this process.
package inflight

import "sync"

// Counter is the count per key; the zero value is ready to use.
type Counter struct {
	mu sync.Mutex
	n  map[string]int64
}

// Acquire takes a place for key: false, and nothing taken, when limit are taken already.
func (c *Counter) Acquire(key string, limit int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	if c.n[key] >= limit {
		return false
	}
	c.n[key]++
	return true
}

// Release gives back a place Acquire took.
func (c *Counter) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}
