package testenv

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for a writer (a logger, a child's output) and a reader at
// once, for tests that assert on what was written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
