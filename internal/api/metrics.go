package api

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/timing"
)

// metrics is a small hand-written Prometheus registry: request counts by status code, a create
// latency histogram, and gauges read from the store at scrape time.
type metrics struct {
	mu        sync.Mutex
	requests  map[int]uint64
	create    *timing.Histogram
	failed    map[string]uint64 // creates that failed, by error code
	reaped    uint64
	reapLag   *timing.Histogram // expiry → the reaper's kill answered
	startedAt time.Time
}

func newMetrics() *metrics {
	b := []float64{0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60}
	lag := []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}
	return &metrics{requests: map[int]uint64{}, create: timing.NewHistogram(b), reapLag: timing.NewHistogram(lag),
		failed: map[string]uint64{}, startedAt: time.Now()}
}

func (m *metrics) request(code int) {
	m.mu.Lock()
	m.requests[code]++
	m.mu.Unlock()
}

func (m *metrics) created(d time.Duration) {
	m.mu.Lock()
	m.create.Observe(d.Seconds())
	m.mu.Unlock()
}

func (m *metrics) createFailed(code string) {
	m.mu.Lock()
	m.failed[code]++
	m.mu.Unlock()
}

// reapedOne counts a sandbox the reaper killed lag after its expiry.
func (m *metrics) reapedOne(lag time.Duration) {
	m.mu.Lock()
	m.reaped++
	m.reapLag.Observe(lag.Seconds())
	m.mu.Unlock()
}

// write renders the text exposition format (version 0.0.4); orphansKilled is the scheduler's
// count (its reconcile kills them).
func (m *metrics) write(ctx context.Context, w io.Writer, st *store.Store, orphansKilled int64) error {
	sbCounts, err := st.CountSandboxesByState(ctx)
	if err != nil {
		return err
	}
	hostCounts, err := st.CountHostsByState(ctx)
	if err != nil {
		return err
	}
	snapshots, err := st.CountSnapshots(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	// head writes a metric's HELP and TYPE lines.
	head := func(name, kind, help string) { fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind) }
	head("pandastack_sandboxes", "gauge", "Sandboxes in the store by state.")
	for _, s := range store.States {
		fmt.Fprintf(w, "pandastack_sandboxes{state=%q} %d\n", s, sbCounts[s])
	}
	head("pandastack_hosts", "gauge", "Hosts by state.")
	for _, s := range []string{store.HostUp, store.HostDown} {
		fmt.Fprintf(w, "pandastack_hosts{state=%q} %d\n", s, hostCounts[s])
	}

	head("pandastack_snapshots", "gauge", "Snapshots in the store that are not deleted.")
	fmt.Fprintf(w, "pandastack_snapshots %d\n", snapshots)

	head("pandastack_sandbox_create_seconds", "histogram", "Time to answer a successful sandbox create.")
	m.create.Write(w, "pandastack_sandbox_create_seconds", "")

	head("pandastack_sandbox_create_failures_total", "counter", "Sandbox creates that failed, by error code.")
	for _, code := range slices.Sorted(maps.Keys(m.failed)) {
		fmt.Fprintf(w, "pandastack_sandbox_create_failures_total{code=%q} %d\n", code, m.failed[code])
	}

	head("pandastack_sandboxes_reaped_total", "counter", "Sandboxes killed because their TTL ran out.")
	fmt.Fprintf(w, "pandastack_sandboxes_reaped_total %d\n", m.reaped)
	head("pandastack_reaper_lag_seconds", "histogram", "From a sandbox's expiry to its host answering the reaper's kill.")
	m.reapLag.Write(w, "pandastack_reaper_lag_seconds", "")

	head("pandastack_orphan_sandboxes_killed_total", "counter", "Sandboxes this server's reconcile killed on their hosts for having no record.")
	fmt.Fprintf(w, "pandastack_orphan_sandboxes_killed_total %d\n", orphansKilled)

	head("pandastack_api_requests_total", "counter", "API requests answered, by HTTP status code.")
	for _, c := range slices.Sorted(maps.Keys(m.requests)) {
		fmt.Fprintf(w, "pandastack_api_requests_total{code=\"%d\"} %d\n", c, m.requests[c])
	}

	head("pandastack_process_start_time_seconds", "gauge", "Start time of this server, Unix seconds.")
	fmt.Fprintf(w, "pandastack_process_start_time_seconds %d\n", m.startedAt.Unix())
	return nil
}
