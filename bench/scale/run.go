// Command scale is the fleet bench of issue 28: real PostgreSQL, one then two control planes
// (`pandastack server` processes), N fake host agents registering and heartbeating like real
// ones, and an open-loop load of creates, gets, lists, kills and TTL changes, run through phases
// (idle, fill, churn, peak, two servers, hosts killed, a server killed). Everything is on
// loopback; nothing boots a VM.
//
//	go run ./bench/scale                       # defaults: 1,000 hosts, 100k live, 1-minute phases (~15 min)
//	go run ./bench/scale -hosts 50 -live 2000 -phase 20s
//
// It prints each phase's figures and merges them (flat keys, scale_*) into bench/results.json.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pandastack/pandastack/bench/results"
)

// Config sizes a run.
type Config struct {
	Hosts int // fake host agents
	Live  int // live sandboxes the fill reaches and the churn keeps
	Slots int // per host (default: Live × 1.5 / Hosts, at least 4: room for the peaks)

	Phase   time.Duration // length of each timed phase
	FillMax time.Duration // the fill stops here even short of Live
	Clients int           // closed-loop clients (fill, peaks)
	Rate    float64       // churn creates/s (default 70% of the fill's rate)

	CreateDelay      time.Duration // each host's create takes this long (a real restore: ~150 ms)
	Heartbeat        time.Duration // agents' heartbeat interval
	HeartbeatTimeout time.Duration // the servers' --heartbeat-timeout
	HostsKilled      int           // hosts taken away in the hosts-down phase

	Phases    []string // in order; default AllPhases
	InProcess bool     // servers in this process instead of `pandastack server` processes
	Logs      string   // directory for the servers' logs (default: a temp dir removed at the end)
	Bin       string   // pandastack binary (default: built from this tree)
	Out       io.Writer
}

// AllPhases is the default run.
var AllPhases = []string{"idle", "fill", "churn", "peak1", "two-servers", "peak2", "hosts-down", "server-killed"}

func (c *Config) defaults() {
	setDefault := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	setDefault(&c.Hosts, 1000)
	setDefault(&c.Live, 100_000)
	setDefault(&c.Slots, max(4, (c.Live*3/2+c.Hosts-1)/c.Hosts))
	setDefault(&c.Clients, 64)
	setDefault(&c.HostsKilled, min(10, c.Hosts/5))
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.Phase, time.Minute}, {&c.FillMax, 8 * time.Minute}, {&c.CreateDelay, 150 * time.Millisecond},
		{&c.Heartbeat, 5 * time.Second}, {&c.HeartbeatTimeout, 15 * time.Second}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	if len(c.Phases) == 0 {
		c.Phases = AllPhases
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
}

// Report is a run's figures (flat keys, as results.json takes them) and its audit.
type Report struct {
	Figures map[string]float64
	Audit   Audit
}

// Audit compares what the load was told with the state of record and the hosts, at the end.
type Audit struct {
	Acked        int // creates answered 201
	Lost         int // of those, not in the store
	Stuck        int // records in a state outside running/hibernated/killed/error/lost
	NotOnHost    int // recorded running or hibernated on an up host that does not have it
	NotRecorded  int // on a host but not recorded running or hibernated
	OverCommits  int // creates sent to a host with no free slot
	DupKills     int // kills of a sandbox the host no longer had
	LiveInStore  int
	LiveOnHosts  int
	RecordsTotal int
}

type run struct {
	cfg           Config
	dir           string
	logs          string
	bin           string
	db            *database
	lb            *balancer
	fleet         *fleet
	load          *load
	servers       []*server // all started, killed ones too
	apiKey        string
	clusterToken  string
	figures       map[string]float64
	fillRate      float64
	live          int                // sandboxes the churn keeps alive: Live, or what the fill reached
	killedCPU     float64            // CPU of servers that were killed, at their death
	killedRefused map[string]float64 // placement refusals of servers that were killed, just before
}

// Run runs the phases and returns the figures.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	r := &run{cfg: cfg, live: cfg.Live, logs: cfg.Logs, apiKey: "pds_" + randomString(32), clusterToken: randomString(32), figures: map[string]float64{}, killedRefused: map[string]float64{}}
	var err error
	if r.dir, err = os.MkdirTemp("", "pandastack-scale-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.dir)
	if r.logs == "" {
		r.logs = r.dir
	}
	if !cfg.InProcess {
		if r.bin = cfg.Bin; r.bin == "" {
			if r.bin, err = buildBinary(ctx, r.dir); err != nil {
				return nil, err
			}
		}
	}
	if r.db, err = startDatabase(ctx); err != nil {
		return nil, err
	}
	defer r.db.stop()
	first, err := r.startServer(ctx, "server-a")
	if err != nil {
		return nil, err
	}
	r.servers = append(r.servers, first)
	defer func() {
		for _, s := range r.servers {
			s.kill()
		}
	}()
	r.lb = newBalancer()
	r.lb.set(first)
	r.load = newLoad(r.lb, r.apiKey)
	fctx, stopFleet := context.WithCancel(ctx)
	r.fleet = startFleet(fctx, cfg, r.clusterToken, r.lb)
	defer func() { stopFleet(); r.fleet.stop() }()
	r.printf("scale bench: %d hosts × %d slots, live target %d, phases of %s, create delay %s, servers as %s\n",
		cfg.Hosts, cfg.Slots, cfg.Live, cfg.Phase, cfg.CreateDelay, map[bool]string{true: "in-process", false: "processes"}[cfg.InProcess])
	t := time.Now()
	if err := r.waitHosts(ctx, cfg.Hosts, 2*cfg.Heartbeat+30*time.Second); err != nil {
		return nil, err
	}
	r.printf("%d hosts registered in %.1fs\n", cfg.Hosts, time.Since(t).Seconds())
	r.figures["scale_hosts"], r.figures["scale_live_target"], r.figures["scale_slots_per_host"] = float64(cfg.Hosts), float64(cfg.Live), float64(cfg.Slots)
	for _, p := range cfg.Phases {
		if err := r.phase(ctx, p); err != nil {
			return nil, fmt.Errorf("phase %s: %w", p, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	audit, err := r.audit(ctx)
	if err != nil {
		return nil, err
	}
	return &Report{Figures: r.figures, Audit: audit}, nil
}

func (r *run) printf(format string, args ...any) { fmt.Fprintf(r.cfg.Out, format, args...) }

// churnRate is the open loop's create rate: the flag, else 70% of the fill's (closed-loop) rate.
func (r *run) churnRate() float64 {
	switch {
	case r.cfg.Rate > 0:
		return r.cfg.Rate
	case r.fillRate > 0:
		return 0.7 * r.fillRate
	}
	return 20
}

// churnTTL keeps r.live sandboxes alive at the churn rate (Little's law).
func (r *run) churnTTL() int64 { return max(int64(float64(r.live)/r.churnRate()), 5) }

func (r *run) phase(ctx context.Context, name string) error {
	r.printf("\n== %s\n", name)
	switch name {
	case "idle":
		return r.measure(ctx, name, func() { sleep(ctx, r.cfg.Phase) })
	case "fill":
		return r.fill(ctx)
	case "churn":
		return r.measure(ctx, name, func() { r.load.open(ctx, r.churnRate(), r.churnTTL(), r.cfg.Phase) })
	case "peak1", "peak2":
		if name == "peak2" {
			if err := r.twoServers(ctx); err != nil {
				return err
			}
		}
		// A peak's sandboxes expire within a phase after it, so the next phase starts near Live.
		ttl := func() int64 { return int64(r.cfg.Phase.Seconds()/3 + rand.Float64()*r.cfg.Phase.Seconds()/2 + 1) }
		return r.measure(ctx, name, func() {
			r.load.closed(ctx, r.cfg.Clients, r.cfg.Phase/3, func() bool { return false }, ttl)
		})
	case "two-servers":
		if err := r.twoServers(ctx); err != nil {
			return err
		}
		return r.measure(ctx, name, func() { r.load.open(ctx, r.churnRate(), r.churnTTL(), r.cfg.Phase) })
	case "hosts-down":
		return r.hostsDown(ctx)
	case "server-killed":
		return r.serverKilled(ctx)
	}
	return fmt.Errorf("unknown phase (phases: %s)", strings.Join(AllPhases, ", "))
}

// twoServers starts the second server if it is not running, and balances over both.
func (r *run) twoServers(ctx context.Context) error {
	if len(r.servers) >= 2 {
		return nil
	}
	s, err := r.startServer(ctx, "server-b")
	if err != nil {
		return err
	}
	r.servers = append(r.servers, s)
	r.lb.set(r.servers...)
	return nil
}

// fill creates back to back with Clients clients until Live are alive (or FillMax), measuring
// each tenth of the way (each 10k at the default 100k): is a create's cost flat in the live count?
func (r *run) fill(ctx context.Context) error {
	bucket := max(r.cfg.Live/10, 1)
	r.load.reset()
	start, s0 := time.Now(), r.snapshot(ctx)
	made := r.load.count
	// Fill creates live past the fill; when it ends their expiries are spread evenly over the
	// churn's window (spreadExpiries), so the churn starts at its steady state whatever the fill's
	// pace was (estimating the window from the rate so far let a slowing fill's own sandboxes expire
	// during it: 35k of 97k in a 100k run).
	fillTTL := int64(r.cfg.FillMax.Seconds()) + 3600
	ttl := func() int64 { return fillTTL }
	b, seen := r.snapshot(ctx), 0
	for lo := 0; lo < r.cfg.Live && time.Since(start) < r.cfg.FillMax && ctx.Err() == nil; lo += bucket {
		hi := min(lo+bucket, r.cfg.Live)
		r.load.closed(ctx, r.cfg.Clients, r.cfg.FillMax-time.Since(start), func() bool { return made() >= hi }, ttl)
		e := r.snapshot(ctx)
		lat := r.load.latencies("create")
		creates := float64(len(lat) - seen)
		key := fmt.Sprintf("scale_fill_b%02d_", lo/bucket+1)
		r.figures[key+"creates_per_s"] = creates / e.t.Sub(b.t).Seconds()
		r.figures[key+"server_cpu_ms_per_create"] = (e.srvCPU - b.srvCPU) / max(creates, 1)
		r.figures[key+"pg_cpu_ms_per_create"] = (e.pgCPU - b.pgCPU) / max(creates, 1)
		r.figures[key+"create_p99_ms"] = results.Pct(lat[seen:], 99)
		r.printf("  live %6d-%-6d  %7.1f creates/s  server %6.2f CPU-ms/create  pg %6.2f CPU-ms/create  p99 %6.1f ms\n",
			seen, len(lat), r.figures[key+"creates_per_s"], r.figures[key+"server_cpu_ms_per_create"],
			r.figures[key+"pg_cpu_ms_per_create"], r.figures[key+"create_p99_ms"])
		b, seen = e, len(lat)
	}
	r.live = min(r.cfg.Live, made()) // what the churn keeps when the fill stopped short
	r.fillRate = float64(made()) / time.Since(start).Seconds()
	r.phaseFigures(ctx, "fill", s0)
	return r.spreadExpiries(ctx)
}

// spreadExpiries gives every live sandbox the load made an expiry drawn evenly from the churn's
// window (the churn TTL from now): the departures of a steady state at the churn's rate. One
// statement straight to the store — the bench's setup, not load: 100k TTL calls would take
// minutes. The load's books take the same expiries (its reaper lags are measured from them).
func (r *run) spreadExpiries(ctx context.Context) error {
	now, window := time.Now(), time.Duration(r.churnTTL())*time.Second
	var ids []string
	var at []int64
	r.load.mu.Lock()
	for id, rec := range r.load.sbs {
		if !rec.ourKill {
			rec.expires = now.Add(rand.N(window)).Truncate(time.Microsecond)
			ids, at = append(ids, id), append(at, rec.expires.UnixMicro())
		}
	}
	r.load.mu.Unlock()
	_, err := r.db.db.ExecContext(ctx, `UPDATE sandboxes s SET expires_at = v.at FROM unnest($1::text[], $2::bigint[]) AS v(id, at)
		WHERE s.id = v.id AND s.state <> 'killed'`, ids, at)
	if err != nil {
		return fmt.Errorf("spreading the fill's expiries over the churn window: %w", err)
	}
	return nil
}

// hostsDown takes HostsKilled hosts away under churn and times until the servers mark them down.
func (r *run) hostsDown(ctx context.Context) error {
	return r.measure(ctx, "hosts-down", func() {
		up := r.hostsUp(ctx)
		ids := r.fleet.killHosts(r.cfg.HostsKilled)
		r.load.mu.Lock()
		for _, id := range ids {
			r.load.down[id] = true
		}
		r.load.mu.Unlock()
		t, markedDown := time.Now(), make(chan float64, 1)
		go func() {
			defer close(markedDown)
			for ctx.Err() == nil && time.Since(t) < r.cfg.Phase {
				if n := r.hostsUp(ctx); n >= 0 && n <= up-len(ids) {
					markedDown <- time.Since(t).Seconds()
					return
				}
				sleep(ctx, 250*time.Millisecond)
			}
		}()
		r.load.open(ctx, r.churnRate(), r.churnTTL(), r.cfg.Phase)
		if d, ok := <-markedDown; ok {
			r.figures["scale_hosts-down_marked_down_s"] = d
		}
		r.figures["scale_hosts-down_hosts_up_before"], r.figures["scale_hosts-down_hosts_up_after"] = float64(up), float64(r.hostsUp(ctx))
		r.printf("  hosts up: %d before, %d after\n", up, int(r.figures["scale_hosts-down_hosts_up_after"]))
	})
}

// serverKilled kills one of two servers (SIGKILL) halfway through the churn; the balancer then
// sends everything to the other.
func (r *run) serverKilled(ctx context.Context) error {
	if err := r.twoServers(ctx); err != nil {
		return err
	}
	return r.measure(ctx, "server-killed", func() {
		victim, killed := r.servers[len(r.servers)-1], make(chan struct{})
		go func() {
			defer close(killed)
			sleep(ctx, r.cfg.Phase/2)
			r.killedCPU += cpuMs(victim.pid(), false)
			for by, n := range victim.refusals(ctx) {
				r.killedRefused[by] += n
			}
			victim.kill()
			var alive []*server
			for _, s := range r.servers {
				if s != victim {
					alive = append(alive, s)
				}
			}
			r.lb.set(alive...)
			r.servers = alive
			r.printf("  killed %s at %s\n", victim.name, r.cfg.Phase/2)
		}()
		r.load.open(ctx, r.churnRate(), r.churnTTL(), r.cfg.Phase)
		<-killed
	})
}

// measure runs fn as a phase and records its figures.
func (r *run) measure(ctx context.Context, name string, fn func()) error {
	r.load.reset()
	s := r.snapshot(ctx)
	fn()
	r.phaseFigures(ctx, name, s)
	return nil
}

// snap is what a phase's figures are differences of.
type snap struct {
	t       time.Time
	srvCPU  float64 // all servers, ms
	pgCPU   float64 // ms
	xacts   float64
	over    int
	dup     int
	refused map[string]float64 // placement refusals by cause, all servers
}

func (r *run) snapshot(ctx context.Context) snap {
	s := snap{t: time.Now(), srvCPU: r.killedCPU, pgCPU: r.db.cpuMs(), xacts: r.db.xacts(ctx), over: r.fleet.overCommits()}
	s.refused = maps.Clone(r.killedRefused)
	for _, sv := range r.servers {
		s.srvCPU += cpuMs(sv.pid(), false)
		for by, n := range sv.refusals(ctx) {
			s.refused[by] += n
		}
	}
	kills, dup := r.fleet.takeKills()
	r.load.settleKills(kills)
	s.dup = dup
	return s
}

func (r *run) phaseFigures(ctx context.Context, name string, s snap) {
	e := r.snapshot(ctx)
	secs := e.t.Sub(s.t).Seconds()
	p := "scale_" + name + "_"
	f := r.figures
	r.load.mu.Lock()
	creates := float64(r.load.creates)
	f[p+"creates"], f[p+"creates_per_s"], f[p+"shed"] = creates, creates/secs, float64(r.load.shed)
	routes := slices.Sorted(func(yield func(string) bool) {
		for k := range r.load.lat {
			if !yield(k) {
				return
			}
		}
	})
	for _, rt := range routes {
		xs := r.load.lat[rt]
		f[p+rt+"_p50_ms"], f[p+rt+"_p99_ms"], f[p+rt+"_p999_ms"] = results.Pct(xs, 50), results.Pct(xs, 99), results.Pct(xs, 99.9)
		f[p+rt+"_count"] = float64(len(xs))
	}
	var errs []string
	for k, n := range r.load.errs {
		errs = append(errs, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(errs)
	lags := r.load.lags
	r.load.mu.Unlock()
	f[p+"server_cpu_pct"] = (e.srvCPU - s.srvCPU) / secs / 10
	f[p+"pg_cpu_pct"] = (e.pgCPU - s.pgCPU) / secs / 10
	if creates > 0 {
		f[p+"server_cpu_ms_per_create"] = (e.srvCPU - s.srvCPU) / creates
		f[p+"pg_cpu_ms_per_create"] = (e.pgCPU - s.pgCPU) / creates
		f[p+"pg_xacts_per_create"] = (e.xacts - s.xacts) / creates
	}
	f[p+"pg_xacts_per_s"] = (e.xacts - s.xacts) / secs
	f[p+"over_commits"], f[p+"dup_kills"] = float64(e.over-s.over), float64(e.dup-s.dup)
	f[p+"refused_replica"], f[p+"refused_store"] = e.refused["replica"]-s.refused["replica"], e.refused["store"]-s.refused["store"]
	f[p+"reaper_lag_p50_ms"], f[p+"reaper_lag_p99_ms"], f[p+"reaped"] = results.Pct(lags, 50), results.Pct(lags, 99), float64(len(lags))
	f[p+"reaper_overdue"] = float64(r.load.overdue())
	var rss float64
	for _, sv := range r.servers {
		rss = max(rss, rssMiB(sv.pid()))
	}
	f[p+"server_rss_mib"] = rss
	f[p+"live"] = float64(r.liveInStore(ctx))
	f[p+"servers"] = float64(len(r.servers))

	r.printf("  %.0fs, %d server(s): %.1f creates/s (%d), shed %d, live %d\n", secs, len(r.servers), f[p+"creates_per_s"], int(creates), int(f[p+"shed"]), int(f[p+"live"]))
	for _, rt := range routes {
		r.printf("  %-7s p50 %7.1f  p99 %7.1f  p999 %7.1f ms  (%d)\n", rt, f[p+rt+"_p50_ms"], f[p+rt+"_p99_ms"], f[p+rt+"_p999_ms"], int(f[p+rt+"_count"]))
	}
	if len(errs) > 0 {
		r.printf("  errors: %s\n", strings.Join(errs, ", "))
	}
	r.printf("  servers %.1f%% of a core (%.2f CPU-ms/create, RSS %.0f MiB)  postgres %.1f%% (%.2f CPU-ms/create, %.1f xacts/create, %.0f xacts/s)\n",
		f[p+"server_cpu_pct"], f[p+"server_cpu_ms_per_create"], rss, f[p+"pg_cpu_pct"], f[p+"pg_cpu_ms_per_create"], f[p+"pg_xacts_per_create"], f[p+"pg_xacts_per_s"])
	r.printf("  reaper: %d reaped, lag p50 %.0f p99 %.0f ms, %d overdue >2s;  over-commits %d, duplicate kills %d\n",
		len(lags), f[p+"reaper_lag_p50_ms"], f[p+"reaper_lag_p99_ms"], int(f[p+"reaper_overdue"]), int(f[p+"over_commits"]), int(f[p+"dup_kills"]))
	r.printf("  placements refused (host found full, next one tried): %d by the server's own count, %d by the store's claims\n",
		int(f[p+"refused_replica"]), int(f[p+"refused_store"]))
	if d, ok := f["scale_"+name+"_marked_down_s"]; ok {
		r.printf("  %d hosts marked down after %.1fs\n", r.cfg.HostsKilled, d)
	}
}

func (r *run) liveInStore(ctx context.Context) int {
	var n int
	r.db.db.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes WHERE state IN ('running', 'hibernated')`).Scan(&n)
	return n
}

// hostsUp is what a server's /healthz says (-1 when it does not answer).
func (r *run) hostsUp(ctx context.Context) int {
	var h struct {
		HostsUp int `json:"hosts_up"`
	}
	if !r.load.call(ctx, "healthz", "GET", "/healthz", nil, 200, &h) {
		return -1
	}
	return h.HostsUp
}

func (r *run) waitHosts(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for r.hostsUp(ctx) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d hosts registered within %s", r.hostsUp(ctx), n, timeout)
		}
		sleep(ctx, 250*time.Millisecond)
	}
	return ctx.Err()
}

// audit checks the end state after the load stopped and the last kills landed. Records and
// hosts are compared twice, a second apart, and only what disagrees both times counts: a reaper
// kill between reading the store and reading the hosts is not a disagreement.
func (r *run) audit(ctx context.Context) (Audit, error) {
	sleep(ctx, 2*time.Second)
	e := r.snapshot(ctx)
	a := Audit{OverCommits: e.over, DupKills: e.dup}
	down := map[string]bool{}
	for _, h := range r.fleet.hosts {
		down[h.agent.HostID] = h.down
	}
	var notOnHost, notRecorded map[string]bool
	for pass := 0; pass < 2; pass++ {
		if pass > 0 {
			sleep(ctx, time.Second)
		}
		recs, err := r.records(ctx)
		if err != nil {
			return Audit{}, err
		}
		onHosts := r.fleet.onHosts()
		a.RecordsTotal, a.LiveOnHosts, a.LiveInStore, a.Stuck = len(recs), len(onHosts), 0, 0
		missing, extra := map[string]bool{}, map[string]bool{}
		for id, x := range recs {
			switch x.state() {
			case "running", "hibernated":
				a.LiveInStore++
				if _, ok := onHosts[id]; !ok && !down[x.host()] && (pass == 0 || notOnHost[id]) {
					missing[id] = true
				}
			case "killed", "error", "lost":
			default:
				a.Stuck++
			}
		}
		for id := range onHosts {
			if x, ok := recs[id]; (!ok || x.state() != "running" && x.state() != "hibernated") && (pass == 0 || notRecorded[id]) {
				extra[id] = true
			}
		}
		notOnHost, notRecorded = missing, extra
		if pass == 1 {
			r.load.mu.Lock()
			a.Acked, a.Lost = len(r.load.acked), 0
			for id := range r.load.acked {
				if _, ok := recs[id]; !ok {
					a.Lost++
				}
			}
			r.load.mu.Unlock()
		}
	}
	a.NotOnHost, a.NotRecorded = len(notOnHost), len(notRecorded)
	f := r.figures
	f["scale_acked_creates"], f["scale_acked_lost"], f["scale_stuck"] = float64(a.Acked), float64(a.Lost), float64(a.Stuck)
	f["scale_recorded_not_on_host"], f["scale_on_host_not_recorded"] = float64(a.NotOnHost), float64(a.NotRecorded)
	f["scale_over_commits"], f["scale_dup_kills"] = float64(a.OverCommits), float64(a.DupKills)
	r.printf("\n== audit\n  %d creates acknowledged, %d of them not in the store; %d records (%d live; %d on hosts); %d in a transitional state\n"+
		"  %d recorded live but not on their (up) host, %d on a host but not recorded live; over-commits %d, duplicate kills %d in all\n",
		a.Acked, a.Lost, a.RecordsTotal, a.LiveInStore, a.LiveOnHosts, a.Stuck, a.NotOnHost, a.NotRecorded, a.OverCommits, a.DupKills)
	return a, nil
}

// storeRecord is a sandbox's [state, host] in the store.
type storeRecord [2]string

func (x storeRecord) state() string { return x[0] }
func (x storeRecord) host() string  { return x[1] }

// records is every sandbox in the store, read in one row (one JSON object) to keep it cheap.
func (r *run) records(ctx context.Context) (map[string]storeRecord, error) {
	var data []byte
	err := r.db.db.QueryRowContext(ctx, `SELECT coalesce(json_object_agg(id, json_build_array(state, host_id)), '{}') FROM sandboxes`).Scan(&data)
	if err != nil {
		return nil, err
	}
	recs := map[string]storeRecord{}
	return recs, json.Unmarshal(data, &recs)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func randomString(n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rand.N(len(alphabet))]
	}
	return string(b)
}
