package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// DefaultHeartbeatBatch is how long a heartbeat that reported nothing new waits for others to
// share its write (Config.HeartbeatBatch).
const DefaultHeartbeatBatch = 100 * time.Millisecond

// maxBeatBatch caps the hosts one liveness statement writes.
const maxBeatBatch = 1000

// beatBatch is the heartbeats of one window that reported nothing new: one statement records
// them all (Store.TouchHosts), dated when the first of them arrived (no host is taken for alive
// later than it was heard).
type beatBatch struct {
	first   time.Time
	readAt  time.Time // the earliest its reports may have been read
	reports []store.HostReport
	once    sync.Once
	done    chan struct{}
	touched map[string]bool
	err     error
}

// beats batches liveness-only heartbeats (Scheduler.touch).
type beats struct {
	mu  sync.Mutex
	cur *beatBatch // filling; nil: none
	max int        // a batch this long is written at once (maxBeatBatch; tests set less)
}

// touch records that host id, whose report has fingerprint hash, was heard at arrived (read
// within read), in the batch of its window; false when the store's row did not take it (the host is down, unknown, or
// its row holds another report): the caller writes the whole report then.
func (s *Scheduler) touch(ctx context.Context, id, hash string, arrived time.Time, read readWindow) (bool, error) {
	s.beats.mu.Lock()
	b := s.beats.cur
	if b == nil {
		b = &beatBatch{first: arrived, readAt: read.after, done: make(chan struct{})}
		s.beats.cur = b
		time.AfterFunc(s.cfg.HeartbeatBatch, func() { s.flushBeats(b) })
	}
	if arrived.Before(b.first) {
		b.first = arrived
	}
	if read.after.Before(b.readAt) {
		b.readAt = read.after
	}
	b.reports = append(b.reports, store.HostReport{ID: id, Hash: hash})
	full := len(b.reports) >= max(s.beats.max, 1)
	if full {
		s.beats.cur = nil
	}
	s.beats.mu.Unlock()
	if full {
		go s.flushBeats(b)
	}
	select {
	case <-b.done:
		return b.touched[id], b.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// flushBeats writes batch b (once).
func (s *Scheduler) flushBeats(b *beatBatch) {
	b.once.Do(func() {
		s.beats.mu.Lock()
		if s.beats.cur == b {
			s.beats.cur = nil
		}
		s.beats.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.touched, b.err = s.cfg.Store.TouchHosts(ctx, b.first, b.readAt, s.cfg.Now(), b.reports)
		close(b.done)
	})
}
