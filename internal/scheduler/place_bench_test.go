package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// BenchmarkPlace measures a placement as a create makes it, with no VMs: the template's size
// (TemplateMemMiB), Place, Reserve on the first candidate that takes it (the next on a capacity
// refusal), and the reservation's end. The hosts register through Register into a real store
// (SQLite, then PostgreSQL started from Debian's packages) that also holds 0, 10k and 100k live
// sandboxes spread over them (their hosts' reports count them), and the scheduler reads its host
// list from the store every DefaultHostCacheTTL as the server does: that read, the store's slot
// claims (PostgreSQL) and the down check's deletion of ended claims (every 3 s, as Run) are in the
// figures. Besides ns/op (wall clock) it reports the process's CPU per placement (cpu-ns/op,
// getrusage: every goroutine, the garbage collector included) and, on PostgreSQL, its server's
// (pg-cpu-ns/op: the postmaster's children). Sub-benchmarks: backend/hosts=N/live=M, and
// .../parallel (b.RunParallel, GOMAXPROCS goroutines: contention on the scheduler's locks).
//
//	go test -run x -bench Place ./internal/scheduler/
//	go test -run x -bench 'Place/sqlite/hosts=1000' -benchtime 20000x ./internal/scheduler/
//
// The reservation ends with nothing placed (done(false)), which keeps the state the same from one
// placement to the next: a placement that succeeded keeps its reservation until its host's next
// report (not simulated here; on PostgreSQL its answer shares a statement with others instead of
// one of its own).
func BenchmarkPlace(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var pg *pgtest.Server
			if backend == "postgres" {
				var err error
				if pg, err = pgtest.Start(); err != nil {
					b.Fatal(err)
				}
				defer pg.Stop()
			}
			for _, hosts := range []int{10, 1000, 5000} {
				b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
					benchPlaceFleet(b, pg, hosts)
				})
			}
		})
	}
}

// placeBenchLive is the live counts measured, in increasing order (one store is filled from one
// to the next).
var placeBenchLive = []int{0, 10_000, 100_000}

func benchPlaceFleet(b *testing.B, pg *pgtest.Server, hosts int) {
	ctx := context.Background()
	var st *store.Store
	var err error
	if pg == nil {
		// On tmpfs when there is one: the setup writes a report per host and live count, each
		// synced on disk otherwise (minutes at 5,000 hosts); placement writes nothing on SQLite.
		dir := b.TempDir()
		if d, err := os.MkdirTemp("/dev/shm", "pandastack-place-"); err == nil {
			dir = d
			defer os.RemoveAll(d)
		}
		st, err = store.OpenSQLite(ctx, filepath.Join(dir, "state.db"))
	} else {
		var url string
		if url, err = pg.NewDatabase(ctx, fmt.Sprintf("place_%d", hosts)); err == nil {
			st, err = store.OpenPostgres(ctx, url)
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	// HeartbeatTimeout of an hour: no host goes stale while the benchmark runs (its hosts report
	// only when the live count changes).
	s := New(Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		HostCacheTTL: DefaultHostCacheTTL, HeartbeatTimeout: time.Hour})
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { // the down check's cadence in Run (HeartbeatTimeout/5 of the default 15 s)
		for t := time.NewTicker(3 * time.Second); ; {
			select {
			case <-bg.Done():
				t.Stop()
				return
			case <-t.C:
				s.CheckHosts(bg)
			}
		}
	})

	// Room for the largest live count and half as much again, over the fleet.
	maxLive := placeBenchLive[len(placeBenchLive)-1]
	slots := int64(maxLive*3/2/hosts + 8)
	report := func(i, used int) Registration {
		id := fmt.Sprintf("host-%05d", i)
		return Registration{HostID: id, URL: "http://127.0.0.1:1/" + id, Token: "t", Accel: "kvm",
			MemMiBTotal: slots * 1024, MemMiBFree: (slots - int64(used)) * 1024, SlotsTotal: slots, SlotsUsed: int64(used),
			Templates: []agentclient.Template{
				{Name: "base", Baked: i%2 == 0, MemoryMiB: 512, VCPUs: 1},
				{Name: "python", Baked: i%3 == 0, MemoryMiB: 1024, VCPUs: 2},
			}}
	}
	eachHost(b, hosts, func(i int) error { return s.Register(ctx, report(i, 0)) })
	if _, err := st.CreateTeam(ctx, store.Team{ID: "team-bench", Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	live := 0
	for _, target := range placeBenchLive {
		fillLive(b, st, hosts, live, target)
		live = target
		// Each host reports its share, as its next heartbeat would.
		eachHost(b, hosts, func(i int) error { return s.Heartbeat(ctx, report(i, live/hosts+btoi(i < live%hosts))) })
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			measurePlace(b, pg, func() {
				for i := 0; i < b.N; i++ {
					placeOnce(b, s)
				}
			})
		})
		b.Run(fmt.Sprintf("live=%d/parallel", live), func(b *testing.B) {
			measurePlace(b, pg, func() {
				b.RunParallel(func(p *testing.PB) {
					for p.Next() {
						placeOnce(b, s)
					}
				})
			})
		})
		// The host list's read from the store, which a placement makes once a DefaultHostCacheTTL
		// (the placements of a run above include it about once a second of the run): its cost per
		// read, a replica's each second whatever its placement rate.
		b.Run(fmt.Sprintf("live=%d/hostlist", live), func(b *testing.B) {
			measurePlace(b, pg, func() {
				for i := 0; i < b.N; i++ {
					s.hc.mu.Lock()
					s.hc.at = time.Time{}
					s.hc.mu.Unlock()
					if err := s.refreshHosts(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// eachHost runs fn for hosts 0..n-1, eight at a time.
func eachHost(b *testing.B, n int, fn func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// placeOnce is the placement of one create (sandboxes.Service's create: TemplateMemMiB, Place,
// then createOn's Reserve over the candidates in order, a capacity refusal trying the next), ended
// with nothing placed.
func placeOnce(b *testing.B, s *Scheduler) {
	ctx := context.Background()
	mem := s.TemplateMemMiB(ctx, "base")
	hosts, err := s.Place(ctx, "base")
	if err != nil {
		b.Fatal(err)
	}
	for _, h := range hosts {
		done, err := s.Reserve(h.ID, mem)
		if errdefs.Is(err, errdefs.Capacity) {
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		done(false)
		return
	}
	b.Fatalf("no candidate of %d took the reservation", len(hosts))
}

// measurePlace runs loop with the timer on and reports the CPU it took per op: this process's
// (getrusage) and, on PostgreSQL, the database server's.
func measurePlace(b *testing.B, pg *pgtest.Server, loop func()) {
	b.ReportAllocs()
	pgBefore := pgCPU(b, pg)
	b.ResetTimer()
	before := processCPU()
	loop()
	cpu := processCPU() - before
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if pg != nil {
		b.ReportMetric(float64((pgCPU(b, pg)-pgBefore).Nanoseconds())/float64(b.N), "pg-cpu-ns/op")
	}
}

// fillLive adds running sandboxes from..to-1 to st, spread over the hosts.
func fillLive(b *testing.B, st *store.Store, hosts, from, to int) {
	ctx := context.Background()
	exp := time.Now().Add(24 * time.Hour)
	for lo := from; lo < to; lo += 1000 {
		var sbs []store.Sandbox
		for i := lo; i < min(lo+1000, to); i++ {
			sbs = append(sbs, store.Sandbox{ID: fmt.Sprintf("sb_bench%07d", i), TeamID: "team-bench", Template: "base",
				State: store.StateRunning, HostID: fmt.Sprintf("host-%05d", i%hosts), ExpiresAt: exp})
		}
		if _, err := st.CreateSandboxes(ctx, sbs); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU is the CPU this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgCPU is the CPU the PostgreSQL server's processes have used: the postmaster's (its pid is the
// first line of postmaster.pid) and its children's, from /proc (0 without a server).
func pgCPU(b *testing.B, pg *pgtest.Server) time.Duration {
	if pg == nil {
		return 0
	}
	raw, err := os.ReadFile(filepath.Join(pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	master := strings.SplitN(string(raw), "\n", 2)[0]
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ... utime(14) stime(15): fields after the comm's closing paren.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		pid := strings.TrimSuffix(filepath.Base(filepath.Dir(p)), "/")
		if len(f) < 15 || pid != master && f[1] != master {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
		if pid == master { // and its children that ended (backends of closed connections)
			cu, _ := strconv.ParseInt(f[13], 10, 64)
			cs, _ := strconv.ParseInt(f[14], 10, 64)
			ticks += cu + cs
		}
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ: 100 on Linux
}
