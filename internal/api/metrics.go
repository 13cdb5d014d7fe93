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

// storeGaugesEvery is how often at most /metrics reads its gauges from the store: scrapes in
// between (of any number of scrapers) answer the last read's figures.
const storeGaugesEvery = 10 * time.Second

// metrics is a small hand-written Prometheus registry. Two kinds of figures, documented as such
// (docs/control-plane.md): counters and histograms are this replica's own (what it answered,
// created, killed, reaped: sum them over the replicas), kept in memory; gauges are the store's
// (the whole fleet's: every replica reports the same), read by one cheap indexed query set at
// most every storeGaugesEvery, whatever the number of scrapes.
type metrics struct {
	mu        sync.Mutex
	requests  map[int]uint64
	create    *timing.Histogram
	failed    map[string]uint64 // creates that failed, by error code
	kills     uint64            // sandboxes killed by an API call
	reaped    uint64
	reapLag   *timing.Histogram // expiry → the reaper's kill answered
	startedAt time.Time

	gaugesMu sync.Mutex // held while the store is read: concurrent scrapes share one read
	gauges   storeGauges
}

// storeGauges are the gauges /metrics reads from the store, and when.
type storeGauges struct {
	at        time.Time // zero: never read
	sandboxes map[string]int64
	hosts     map[string]int64
	snapshots int64
}

func newMetrics() *metrics {
	b := []float64{0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60}
	lag := []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}
	return &metrics{requests: map[int]uint64{}, create: timing.NewHistogram(b), reapLag: timing.NewHistogram(lag),
		failed: map[string]uint64{}, startedAt: time.Now()}
}

// storeGauges returns the store's gauges as read at most storeGaugesEvery before now (reading
// them again when older).
func (m *metrics) storeGauges(ctx context.Context, st *store.Store, now time.Time) (storeGauges, error) {
	m.gaugesMu.Lock()
	defer m.gaugesMu.Unlock()
	if g := m.gauges; !g.at.IsZero() && now.Sub(g.at) < storeGaugesEvery && !now.Before(g.at) {
		return g, nil
	}
	var g storeGauges
	var err error
	if g.sandboxes, err = st.CountUnkilledSandboxesByState(ctx); err != nil {
		return g, err
	}
	if g.hosts, err = st.CountHostsByState(ctx); err != nil {
		return g, err
	}
	if g.snapshots, err = st.CountSnapshots(ctx); err != nil {
		return g, err
	}
	g.at = now
	m.gauges = g
	return g, nil
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

// killed counts a sandbox killed by an API call.
func (m *metrics) killed() {
	m.mu.Lock()
	m.kills++
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
// count (its reconcile kills them), refusals its placements' refusals by cause.
func (m *metrics) write(ctx context.Context, w io.Writer, st *store.Store, now time.Time, orphansKilled int64, refusals map[string]int64) error {
	g, err := m.storeGauges(ctx, st, now)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()

	// head writes a metric's HELP and TYPE lines.
	head := func(name, kind, help string) { fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind) }
	head("pandastack_sandboxes", "gauge", "Sandboxes in the store by state, killed ones left out (the fleet's, read at most every 10 s).")
	for _, s := range store.States {
		if s != store.StateKilled {
			fmt.Fprintf(w, "pandastack_sandboxes{state=%q} %d\n", s, g.sandboxes[s])
		}
	}
	head("pandastack_hosts", "gauge", "Hosts by state (the fleet's, read at most every 10 s).")
	for _, s := range []string{store.HostUp, store.HostDown} {
		fmt.Fprintf(w, "pandastack_hosts{state=%q} %d\n", s, g.hosts[s])
	}
	head("pandastack_store_gauges_read_time_seconds", "gauge", "When this server last read the store's gauges, Unix seconds.")
	fmt.Fprintf(w, "pandastack_store_gauges_read_time_seconds %d\n", g.at.Unix())

	head("pandastack_snapshots", "gauge", "Snapshots in the store that are not deleted (the fleet's, read at most every 10 s).")
	fmt.Fprintf(w, "pandastack_snapshots %d\n", g.snapshots)

	head("pandastack_sandbox_create_seconds", "histogram", "Time to answer a successful sandbox create.")
	m.create.Write(w, "pandastack_sandbox_create_seconds", "")

	head("pandastack_sandbox_create_failures_total", "counter", "Sandbox creates that failed, by error code.")
	for _, code := range slices.Sorted(maps.Keys(m.failed)) {
		fmt.Fprintf(w, "pandastack_sandbox_create_failures_total{code=%q} %d\n", code, m.failed[code])
	}

	head("pandastack_sandbox_kills_total", "counter", "Sandboxes this server killed by an API call.")
	fmt.Fprintf(w, "pandastack_sandbox_kills_total %d\n", m.kills)

	head("pandastack_sandboxes_reaped_total", "counter", "Sandboxes this server killed because their TTL ran out.")
	fmt.Fprintf(w, "pandastack_sandboxes_reaped_total %d\n", m.reaped)
	head("pandastack_reaper_lag_seconds", "histogram", "From a sandbox's expiry to its host answering the reaper's kill.")
	m.reapLag.Write(w, "pandastack_reaper_lag_seconds", "")

	head("pandastack_orphan_sandboxes_killed_total", "counter", "Sandboxes this server's reconcile killed on their hosts for having no record.")
	fmt.Fprintf(w, "pandastack_orphan_sandboxes_killed_total %d\n", orphansKilled)

	head("pandastack_placement_refusals_total", "counter", "Hosts this server's placements chose and then found full, by who counted them full.")
	for _, by := range slices.Sorted(maps.Keys(refusals)) {
		fmt.Fprintf(w, "pandastack_placement_refusals_total{by=%q} %d\n", by, refusals[by])
	}

	head("pandastack_api_requests_total", "counter", "API requests answered, by HTTP status code.")
	for _, c := range slices.Sorted(maps.Keys(m.requests)) {
		fmt.Fprintf(w, "pandastack_api_requests_total{code=\"%d\"} %d\n", c, m.requests[c])
	}

	head("pandastack_process_start_time_seconds", "gauge", "Start time of this server, Unix seconds.")
	fmt.Fprintf(w, "pandastack_process_start_time_seconds %d\n", m.startedAt.Unix())
	return nil
}
