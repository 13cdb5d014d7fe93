// Package periodic runs background work on a ticker: the loops of the control plane (heartbeat
// checks, sweeps) and of the host agent (idle hibernation, memory pressure).
package periodic

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends (the first call after d, not at once); it returns when
// ctx ends. A call in progress is never interrupted by the ticker: calls do not overlap.
func Every(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fn()
	}
}
