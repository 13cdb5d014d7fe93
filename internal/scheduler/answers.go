package scheduler

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/pandastack/pandastack/internal/store"
)

// maxAnswerBatch caps the claims one answer statement writes.
const maxAnswerBatch = 1000

// answers writes placements' answers to their claims in batches, off the create's path: a placed
// answer is queued; one flush at a time writes everything queued in one statement
// (Store.AnswerClaims), and answers queued while it runs share the next. Nothing waits for a
// timer: an answer alone is written at once, under load they group.
//
// Safe: until its answer is written a claim counts as unanswered — its slot stays taken for every
// replica's claims, which only ever makes the host look fuller, never emptier — and the answer
// written is dated when the host answered, so once written it ends exactly when a synchronous
// write would have. An answer that cannot be written leaves the claim to expire (ClaimTTL), as
// before. Answers with nothing placed (failures) are written at once instead, so a slot freed by
// a failed create is free for the next try at once.
type answers struct {
	mu      sync.Mutex
	queued  []store.ClaimAnswer
	running bool
	writes  atomic.Int64 // statements written
}

// answerClaim records a's claim answered: now when nothing was placed, else in the next batch.
func (s *Scheduler) answerClaim(a store.ClaimAnswer) {
	if !a.Placed {
		s.writeAnswers([]store.ClaimAnswer{a})
		return
	}
	s.answers.mu.Lock()
	s.answers.queued = append(s.answers.queued, a)
	start := !s.answers.running
	s.answers.running = true
	s.answers.mu.Unlock()
	if start {
		go s.flushAnswers()
	}
}

// flushAnswers writes the queued answers until none is left.
func (s *Scheduler) flushAnswers() {
	for {
		s.answers.mu.Lock()
		batch := s.answers.queued
		s.answers.queued = nil
		if len(batch) == 0 {
			s.answers.running = false
			s.answers.mu.Unlock()
			return
		}
		s.answers.mu.Unlock()
		for len(batch) > 0 {
			n := min(len(batch), maxAnswerBatch)
			s.writeAnswers(batch[:n])
			batch = batch[n:]
		}
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
