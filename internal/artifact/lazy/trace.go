package lazy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
)

// A restore reads its memory image in much the same order every time (the guest resumes where
// the snapshot stopped and touches the same kernel and agent pages first). So the first lazy
// restore of an artifact records the order in which its chunks were first read and keeps it in
// the store beside the manifest (artifact.TraceKey); every later restore, on any host, prefetches
// those chunks first, in that order, and the rest after.

// traceSettle is how long the reads must pause before a first restore's trace is saved: the
// burst of a resume and the agent's first answers, not what the guest does minutes later.
const traceSettle = 2 * time.Second

// traceMax caps how long a trace is recorded when reads never pause.
const traceMax = 30 * time.Second

// LoadTrace reads the recorded order of m's chunks; nil (and no error) when none was recorded.
// Entries that do not name a chunk of m are dropped, so a stale or hostile trace only costs
// order, never a read outside the artifact.
func LoadTrace(ctx context.Context, s blob.Store, m artifact.Manifest) ([]Touch, error) {
	rc, err := s.Get(ctx, artifact.TraceKey(m.Kind, m.Name))
	if errdefs.Is(err, errdefs.NotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var raw []Touch
	if err := json.NewDecoder(io.LimitReader(rc, 16<<20)).Decode(&raw); err != nil {
		return nil, fmt.Errorf("trace of %s/%s: %w", m.Kind, m.Name, err)
	}
	chunks := map[string]int{}
	for _, f := range m.Files {
		chunks[f.Path] = len(f.Chunks)
	}
	out := raw[:0]
	for _, t := range raw {
		if n, ok := chunks[t.Path]; ok && t.Chunk >= 0 && t.Chunk < n {
			out = append(out, t)
		}
	}
	return out, nil
}

// SaveTrace stores order as m's trace.
func SaveTrace(ctx context.Context, s blob.Store, m artifact.Manifest, order []Touch) error {
	raw, err := json.Marshal(order)
	if err != nil {
		return err
	}
	return s.Put(ctx, artifact.TraceKey(m.Kind, m.Name), bytes.NewReader(raw))
}

// PrefetchOrder is every chunk of m once: trace's first, in its order, then the others in file
// order.
func PrefetchOrder(m artifact.Manifest, trace []Touch) []Touch {
	seen := map[Touch]bool{}
	out := make([]Touch, 0, len(trace))
	add := func(t Touch) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	for _, t := range trace {
		add(t)
	}
	for _, f := range m.Files {
		for i := range f.Chunks {
			add(Touch{Path: f.Path, Chunk: i})
		}
	}
	return out
}

// RecordTrace waits until mt's reads pause for settle (or max passes, or ctx ends) and saves the
// order they came in as m's trace. Nothing is saved when nothing was read.
func RecordTrace(ctx context.Context, s blob.Store, mt *Mount, m artifact.Manifest, settle, max time.Duration) ([]Touch, error) {
	deadline := time.Now().Add(max)
	last, quietSince := 0, time.Now()
	tick := time.NewTicker(settle / 8)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		n := mt.traceLen()
		if n != last {
			last, quietSince = n, time.Now()
		}
		if n > 0 && (time.Since(quietSince) >= settle || time.Now().After(deadline)) {
			trace := mt.Trace()
			return trace, SaveTrace(ctx, s, m, trace)
		}
		if n == 0 && time.Now().After(deadline) {
			return nil, nil
		}
	}
}
