package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// fleetOf puts n up hosts that have template "base" into s's host cache, as a read of the store
// would; baked(i) says whether host i has it baked, full(i) whether its slots are all used.
func fleetOf(s *Scheduler, n int, baked, full func(i int) bool) {
	list := make([]store.Host, n)
	now := time.Now()
	for i := range list {
		h := store.Host{ID: fmt.Sprintf("h%05d", i), URL: "http://127.0.0.1:1", State: store.HostUp, MemMiBTotal: 8192,
			MemMiBFree: 8000, SlotsTotal: 4, Templates: []string{"base"}, LastHeartbeat: now}
		if baked(i) {
			h.Baked = []string{"base"}
		}
		if full(i) {
			h.SlotsUsed = 4
		}
		list[i] = h
	}
	s.hc.mu.Lock()
	s.hc.install(list)
	s.hc.at, s.hc.loaded = now, true
	s.hc.mu.Unlock()
}

func never(int) bool  { return false }
func always(int) bool { return true }

// TestPlacementCostIndependentOfFleet: a placement looks at the same few hosts whether the fleet
// has 1,000 or 20,000 (it probes at random), and still returns placeSample hosts that fit,
// spread over the fleet.
func TestPlacementCostIndependentOfFleet(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1000, 20000} {
		s, _ := newSched(t, Config{HostCacheTTL: time.Hour})
		fleetOf(s, n, func(i int) bool { return i%2 == 0 }, func(i int) bool { return i%4 == 2 })
		firsts := map[string]bool{}
		const placements = 100
		before := s.hc.probes.Load()
		for range placements {
			got, err := s.Place(ctx, "base")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != placeSample {
				t.Fatalf("%d hosts: %d candidates, want %d", n, len(got), placeSample)
			}
			for _, h := range got {
				if !slices.Contains(h.Baked, "base") || h.SlotsUsed == h.SlotsTotal {
					t.Fatalf("%d hosts: %s ranked (baked %v, %d of %d slots used): every candidate must be baked and have room",
						n, h.ID, h.Baked, h.SlotsUsed, h.SlotsTotal)
				}
			}
			firsts[got[0].ID] = true
		}
		if per := float64(s.hc.probes.Load()-before) / placements; per > maxProbes {
			t.Fatalf("%d hosts: %.1f hosts looked at per placement (at most %d)", n, per, maxProbes)
		}
		if len(firsts) < placements/2 {
			t.Fatalf("%d hosts: %d placements put only %d distinct hosts first", n, placements, len(firsts))
		}
	}
}

// TestPlacementFindsRareHosts: in a large fleet the few hosts that have a template baked still
// come first, and when nearly every host is full the last ones with room are still found.
func TestPlacementFindsRareHosts(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{HostCacheTTL: time.Hour})
	fleetOf(s, 10000, func(i int) bool { return i%4000 == 7 }, never) // 3 baked
	got, err := s.Place(ctx, "base")
	if err != nil || len(got) != placeSample {
		t.Fatalf("placement %v %v", ids(got), err)
	}
	for i, h := range got {
		if want := i < 3; slices.Contains(h.Baked, "base") != want {
			t.Fatalf("ranked %v: the three baked hosts must come first", ids(got))
		}
	}

	fleetOf(s, 10000, never, func(i int) bool { return i != 1234 && i != 8765 }) // 2 with room
	got, err = s.Place(ctx, "base")
	if gotIDs := slices.Sorted(slices.Values(ids(got))); err != nil || !slices.Equal(gotIDs, []string{"h01234", "h08765"}) {
		t.Fatalf("nearly full fleet: %v %v (want the two hosts with room)", ids(got), err)
	}
	fleetOf(s, 10000, never, always)
	if _, err := s.Place(ctx, "base"); err == nil || err.Error() != `no host has room for a "base" sandbox (256 MiB): all are full` {
		t.Fatalf("full fleet: %v", err)
	}
}

// TestHeartbeatPatchesOneHost: a heartbeat replaces its host's entry in the cached list (the
// others are the same entries), and a host's new template joins the index.
func TestHeartbeatPatchesOneHost(t *testing.T) {
	ctx := context.Background()
	s, _ := newSched(t, Config{HostCacheTTL: time.Hour})
	for _, id := range []string{"a", "b"} {
		if err := s.Register(ctx, reg(id, 4000, 0, tmpl("base", true))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Place(ctx, "base"); err != nil { // reads the store: the cache is loaded
		t.Fatal(err)
	}
	s.hc.mu.RLock()
	a, b := s.hc.hosts[s.hc.pos["a"]], s.hc.hosts[s.hc.pos["b"]]
	s.hc.mu.RUnlock()
	if err := s.Heartbeat(ctx, reg("b", 3000, 1, tmpl("base", true), tmpl("py", false))); err != nil {
		t.Fatal(err)
	}
	s.hc.mu.RLock()
	a2, b2 := s.hc.hosts[s.hc.pos["a"]], s.hc.hosts[s.hc.pos["b"]]
	s.hc.mu.RUnlock()
	if a2 != a || b2 == b || b2.MemMiBFree != 3000 || b2.SlotsUsed != 1 || b.MemMiBFree != 4000 {
		t.Fatalf("after b's heartbeat: a %p→%p, b %+v → %+v", a, a2, *b, *b2)
	}
	if got, err := s.Place(ctx, "py"); err != nil || !slices.Equal(ids(got), []string{"b"}) {
		t.Fatalf("b's new template: %v %v", ids(got), err)
	}
}

// TestPatchDuringFirstRead: a host written while the first read of the store is under way (a
// heartbeat reaching a replica whose first placement is reading) is kept for that read's list,
// not put into a list that does not exist yet (it panicked: a nil map).
func TestPatchDuringFirstRead(t *testing.T) {
	var c hostCache
	c.during = map[string]*store.Host{} // as refreshHosts sets it before its first read
	c.patch(store.Host{ID: "b", State: store.HostUp, MemMiBFree: 3000, Templates: []string{"base"}})
	c.install([]store.Host{{ID: "a", State: store.HostUp, Templates: []string{"base"}}, {ID: "b", State: store.HostUp, MemMiBFree: 4000}})
	c.loaded = true
	if len(c.hosts) != 2 || c.hosts[c.pos["b"]].MemMiBFree != 3000 || len(c.byTmpl["base"].plain) != 2 {
		t.Fatalf("after the first read: %d hosts, b %+v, index %+v", len(c.hosts), *c.hosts[c.pos["b"]], c.byTmpl["base"])
	}
}
