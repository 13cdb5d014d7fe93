package scheduler

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pandastack/pandastack/internal/store"
)

// maxWriteBatch caps the rows one statement of a groupWrite writes.
const maxWriteBatch = 1000

// groupWrite writes rows by group commit: one write at a time; the rows that come while it runs
// wait together for the next, one statement for all. Nothing waits for a timer: a row alone is
// written at once. Placements' answers to their claims go this way (each caller returns once its
// answer is written, as with a statement of its own, so a claim ends exactly when it did before —
// only fewer statements under concurrency), and stopped sandboxes' slot credits (nobody waits).
type groupWrite[T any] struct {
	write   func([]T) // one statement; logs its failure
	mu      sync.Mutex
	cur     *writeBatch[T] // filling while a write runs; nil: none
	running bool           // a write runs
	writes  atomic.Int64   // statements written
}

// writeBatch is the rows that share one write.
type writeBatch[T any] struct {
	rows []T
	done chan struct{} // closed once written
}

// add queues x and returns a channel closed once it is written (or its write failed).
func (g *groupWrite[T]) add(x T) <-chan struct{} {
	g.mu.Lock()
	b := g.cur
	if b == nil {
		b = &writeBatch[T]{done: make(chan struct{})}
		g.cur = b
	}
	b.rows = append(b.rows, x)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go g.flush()
	}
	return b.done
}

// flush writes the filling batch, then the one filled meanwhile, until none is left.
func (g *groupWrite[T]) flush() {
	for {
		g.mu.Lock()
		b := g.cur
		g.cur = nil
		if b == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		for rest := b.rows; len(rest) > 0; {
			n := min(len(rest), maxWriteBatch)
			g.writes.Add(1)
			g.write(rest[:n])
			rest = rest[n:]
		}
		close(b.done)
	}
}

// answerClaim records a's claim answered, returning once it is written (or failed, logged: the
// claim then expires). An answer with nothing placed is written alone at once.
func (s *Scheduler) answerClaim(a store.ClaimAnswer) {
	if !a.Placed {
		s.answers.writes.Add(1)
		s.writeAnswers([]store.ClaimAnswer{a})
		return
	}
	<-s.answers.add(a)
}

// writeAnswers writes answers in one statement, logging a failure.
func (s *Scheduler) writeAnswers(answers []store.ClaimAnswer) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	if err := s.cfg.Store.AnswerClaims(ctx, answers); err != nil {
		s.cfg.Logger.Warn("could not record placements' answers (their slots stay claimed until the claims expire)",
			"claims", len(answers), "err", err)
	}
}

// writeCredits writes stopped sandboxes' slot credits in one statement, logging a failure (their
// slots then come back with their hosts' next reports, as without credits).
func (s *Scheduler) writeCredits(credits []store.SlotCredit) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	if err := s.cfg.Store.CreditSlots(ctx, credits); err != nil {
		s.cfg.Logger.Warn("could not record stopped sandboxes' freed slots (other placements see them with the hosts' next reports)",
			"sandboxes", len(credits), "err", err)
	}
}
