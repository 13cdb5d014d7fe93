package scheduler

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pandastack/pandastack/internal/store"
)

// maxAnswerBatch caps the claims one answer statement writes.
const maxAnswerBatch = 1000

// answers writes placements' answers to their claims by group commit: one write at a time; the
// placed answers that come while it runs wait together for the next, one statement for all
// (Store.AnswerClaims). Each caller still returns only once its answer is written, as with a
// statement of its own, so a claim ends exactly when it did before — only fewer statements
// under concurrency. Nothing waits for a timer: an answer alone is written at once.
type answers struct {
	mu      sync.Mutex
	cur     *answerBatch // filling while a write runs; nil: none
	running bool         // a write runs
	writes  atomic.Int64 // statements written
}

// answerBatch is the answers that share one write.
type answerBatch struct {
	answers []store.ClaimAnswer
	done    chan struct{} // closed once written
}

// answerClaim records a's claim answered, returning once it is written (or failed, logged: the
// claim then expires).
func (s *Scheduler) answerClaim(a store.ClaimAnswer) {
	if !a.Placed {
		s.writeAnswers([]store.ClaimAnswer{a})
		return
	}
	s.answers.mu.Lock()
	b := s.answers.cur
	if b == nil {
		b = &answerBatch{done: make(chan struct{})}
		s.answers.cur = b
	}
	b.answers = append(b.answers, a)
	start := !s.answers.running
	s.answers.running = true
	s.answers.mu.Unlock()
	if start {
		go s.flushAnswers()
	}
	<-b.done
}

// flushAnswers writes the filling batch, then the one filled meanwhile, until none is left.
func (s *Scheduler) flushAnswers() {
	for {
		s.answers.mu.Lock()
		b := s.answers.cur
		s.answers.cur = nil
		if b == nil {
			s.answers.running = false
			s.answers.mu.Unlock()
			return
		}
		s.answers.mu.Unlock()
		for rest := b.answers; len(rest) > 0; {
			n := min(len(rest), maxAnswerBatch)
			s.writeAnswers(rest[:n])
			rest = rest[n:]
		}
		close(b.done)
	}
}

// writeAnswers writes answers in one statement, logging a failure.
func (s *Scheduler) writeAnswers(answers []store.ClaimAnswer) {
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	s.answers.writes.Add(1)
	if err := s.cfg.Store.AnswerClaims(ctx, answers); err != nil {
		s.cfg.Logger.Warn("could not record placements' answers (their slots stay claimed until the claims expire)",
			"claims", len(answers), "err", err)
	}
}
