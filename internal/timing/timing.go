// Package timing measures the steps of one operation (a sandbox create: slot, disk clone, VMM
// start, QMP, migration, guest channel, agent hello, bookkeeping) and keeps a latency histogram
// per step for /metrics (Prometheus text exposition). A Trace travels in the context, so each
// package marks its own steps without knowing who measures; without a trace a mark does nothing.
package timing

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Step is one named part of an operation and how long it took.
type Step struct {
	Name string
	D    time.Duration
}

// Trace collects the steps of one operation, in order. Each mark closes the step that began at
// the previous mark (or at the trace's start). Safe for concurrent use; a nil Trace ignores marks.
type Trace struct {
	mu    sync.Mutex
	start time.Time
	last  time.Time
	steps []Step
}

// NewTrace starts a trace now.
func NewTrace() *Trace {
	now := time.Now()
	return &Trace{start: now, last: now}
}

// Mark ends the current step as name. A name marked again adds to its step.
func (t *Trace) Mark(name string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	d := now.Sub(t.last)
	t.last = now
	for i := range t.steps {
		if t.steps[i].Name == name {
			t.steps[i].D += d
			return
		}
	}
	t.steps = append(t.steps, Step{name, d})
}

// Steps returns the steps marked so far, in the order first marked.
func (t *Trace) Steps() []Step {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Step(nil), t.steps...)
}

// Total is the time from the trace's start to its last mark.
func (t *Trace) Total() time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last.Sub(t.start)
}

// LogArgs is the trace for a log line: "<step>_ms", its milliseconds (µs precision), for each
// step in order, then "total_ms".
func (t *Trace) LogArgs() []any {
	var args []any
	for _, st := range append(t.Steps(), Step{"total", t.Total()}) {
		args = append(args, st.Name+"_ms", float64(st.D.Microseconds())/1000)
	}
	return args
}

type ctxKey struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Trace) context.Context { return context.WithValue(ctx, ctxKey{}, t) }

// From returns the trace ctx carries, or nil.
func From(ctx context.Context) *Trace {
	t, _ := ctx.Value(ctxKey{}).(*Trace)
	return t
}

// Mark marks a step of the trace ctx carries (none: nothing happens).
func Mark(ctx context.Context, name string) { From(ctx).Mark(name) }

// Ensure returns ctx's trace, starting one (and a ctx carrying it) if ctx has none.
func Ensure(ctx context.Context) (context.Context, *Trace) {
	if t := From(ctx); t != nil {
		return ctx, t
	}
	t := NewTrace()
	return With(ctx, t), t
}

// Histogram is a Prometheus histogram of durations in seconds. Not safe for concurrent use on its
// own: its owner (Steps, or a metrics registry) locks.
type Histogram struct {
	bounds []float64 // upper bounds in seconds, ascending
	counts []uint64  // per bucket (not cumulative); the last is +Inf
	sum    float64
	n      uint64
}

// NewHistogram returns a histogram with the given upper bounds (seconds, ascending).
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe adds one duration of s seconds.
func (h *Histogram) Observe(s float64) {
	h.counts[sort.SearchFloat64s(h.bounds, s)]++ // first bucket with bound >= s
	h.sum += s
	h.n++
}

// Write renders the histogram's samples (not its HELP and TYPE lines) as metric name with labels
// (`k="v",…`, may be empty).
func (h *Histogram) Write(w io.Writer, name, labels string) {
	sep := ""
	if labels != "" {
		sep = ","
	}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{%s%sle=%q} %d\n", name, labels, sep, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(w, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, cum)
	if labels != "" {
		labels = "{" + labels + "}"
	}
	fmt.Fprintf(w, "%s_sum%s %s\n", name, labels, strconv.FormatFloat(h.sum, 'g', -1, 64))
	fmt.Fprintf(w, "%s_count%s %d\n", name, labels, h.n)
}

// StepBounds are the buckets of step histograms: steps take from microseconds to seconds.
var StepBounds = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 10}

// Steps keeps one histogram per operation and step: the metric `name{op="…",step="…"}`.
type Steps struct {
	name, help string
	mu         sync.Mutex
	hists      map[[2]string]*Histogram
}

// NewSteps returns an empty set of step histograms, exposed as metric name.
func NewSteps(name, help string) *Steps {
	return &Steps{name: name, help: help, hists: map[[2]string]*Histogram{}}
}

// Observe adds every step of t, and its total as step "total", under op.
func (s *Steps) Observe(op string, t *Trace) {
	steps := append(t.Steps(), Step{"total", t.Total()})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range steps {
		k := [2]string{op, st.Name}
		h := s.hists[k]
		if h == nil {
			h = NewHistogram(StepBounds)
			s.hists[k] = h
		}
		h.Observe(st.D.Seconds())
	}
}

// Write renders the histograms in the text exposition format (HELP and TYPE included).
func (s *Steps) Write(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", s.name, s.help, s.name)
	keys := make([][2]string, 0, len(s.hists))
	for k := range s.hists {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		s.hists[k].Write(w, s.name, fmt.Sprintf("op=%q,step=%q", k[0], k[1]))
	}
}
