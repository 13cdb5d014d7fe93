package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// DefaultClaimAnswerBatch is how long a placed answer to a claim waits for others to share its
// write (Config.ClaimAnswerBatch).
const DefaultClaimAnswerBatch = 100 * time.Millisecond

// maxAnswerBatch caps the claims one answer statement writes.
const maxAnswerBatch = 1000

// answers writes placements' answers to their claims in batches, off the create's path: a placed
// answer is queued, and the answers of one window (ClaimAnswerBatch from the first) are written
// in one statement (Store.AnswerClaims).
//
// Safe: until its answer is written a claim counts as unanswered — its slot stays taken for every
// replica's claims, which only ever makes the host look fuller, never emptier, and only for the
// window (a report comes every few seconds) — and the answer is dated when the host answered, so
// once written the claim ends exactly when a synchronous write would have made it end. An answer
// that cannot be written leaves the claim to expire (ClaimTTL), as before. Answers with nothing
// placed (failures) are written at once, so a slot a failed create held is free for the next try.
type answers struct {
	mu     sync.Mutex
	queued []store.ClaimAnswer
	writes atomic.Int64 // statements written
	max    int          // a batch this long is written at once (maxAnswerBatch)
}

// answerClaim records a's claim answered: now when nothing was placed, else with its window.
func (s *Scheduler) answerClaim(a store.ClaimAnswer) {
	if !a.Placed {
		s.writeAnswers([]store.ClaimAnswer{a})
		return
	}
	s.answers.mu.Lock()
	s.answers.queued = append(s.answers.queued, a)
	first, full := len(s.answers.queued) == 1, len(s.answers.queued) >= max(s.answers.max, 1)
	s.answers.mu.Unlock()
	switch {
	case full:
		go s.flushAnswers()
	case first:
		time.AfterFunc(s.cfg.ClaimAnswerBatch, s.flushAnswers)
	}
}

// flushAnswers writes the queued answers (none: nothing to do).
func (s *Scheduler) flushAnswers() {
	s.answers.mu.Lock()
	batch := s.answers.queued
	s.answers.queued = nil
	s.answers.mu.Unlock()
	if len(batch) > 0 {
		s.writeAnswers(batch)
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
