package scheduler

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/store"
)

// hostCache is the host list placement reads: the store's hosts as last read (every
// HostCacheTTL), patched in place by what this replica learns (registrations, heartbeats, hosts
// it marks down), indexed by template. A placement probes a few hosts of its template's index at
// random instead of reading every host, so its cost does not grow with the fleet; a heartbeat
// replaces one entry instead of copying the list.
type hostCache struct {
	mu     sync.RWMutex
	hosts  []*store.Host          // an entry is never changed, only replaced (readers may hold it)
	pos    map[string]int         // host id → index in hosts
	byTmpl map[string]*tmplHosts  // template → the hosts that have it
	at     time.Time              // when the store was last read
	loaded bool                   // read at least once
	during map[string]*store.Host // patches made while a refresh reads the store (nil: none runs)

	refreshMu sync.Mutex // one store read at a time

	probes atomic.Int64 // hosts looked at by placements (tests: the cost of a placement)
}

// tmplHosts is the index of one template: the hosts that have it baked, and the others that have it.
type tmplHosts struct{ baked, plain []int }

// install replaces the list with one read from the store (mu held), then applies again the
// patches made while it was being read (the store may have answered before they were written).
// The caller settles this replica's reservations against the rows' reports (refreshHosts).
func (c *hostCache) install(list []store.Host) {
	c.hosts, c.pos = make([]*store.Host, len(list)), make(map[string]int, len(list))
	for i := range list {
		c.hosts[i], c.pos[list[i].ID] = &list[i], i
	}
	for _, h := range c.during {
		c.patch(*h)
	}
	c.during = nil
	c.reindex()
}

// reindex rebuilds the template index (mu held).
func (c *hostCache) reindex() {
	c.byTmpl = map[string]*tmplHosts{}
	for i, h := range c.hosts {
		c.index(i, h)
	}
}

// index adds host i to the template index (mu held).
func (c *hostCache) index(i int, h *store.Host) {
	for _, t := range h.Templates {
		th := c.byTmpl[t]
		if th == nil {
			th = &tmplHosts{}
			c.byTmpl[t] = th
		}
		if slices.Contains(h.Baked, t) {
			th.baked = append(th.baked, i)
		} else {
			th.plain = append(th.plain, i)
		}
	}
}

// patch puts h in the list (mu held): a new host is added, a known one replaced (keeping when it
// registered). The index is rebuilt only when the host's templates changed.
func (c *hostCache) patch(h store.Host) {
	if c.during != nil {
		c.during[h.ID] = &h
	}
	if c.pos == nil {
		return // the first read is under way: its install applies h
	}
	i, ok := c.pos[h.ID]
	if !ok {
		c.hosts = append(c.hosts, &h)
		c.pos[h.ID] = len(c.hosts) - 1
		c.index(len(c.hosts)-1, &h)
		return
	}
	old := c.hosts[i]
	h.RegisteredAt = old.RegisteredAt
	c.hosts[i] = &h
	if !slices.Equal(old.Templates, h.Templates) || !slices.Equal(old.Baked, h.Baked) {
		c.reindex()
	}
}

// refreshHosts reads the store's host list into the cache when it is older than HostCacheTTL
// (always, with no TTL). While one caller reads, the others place from the list they have.
func (s *Scheduler) refreshHosts(ctx context.Context) error {
	c, ttl := &s.hc, s.cfg.HostCacheTTL
	c.mu.RLock()
	loaded, fresh := c.loaded, c.loaded && ttl > 0 && time.Since(c.at) < ttl
	c.mu.RUnlock()
	if fresh {
		return nil
	}
	if loaded && ttl > 0 {
		if !c.refreshMu.TryLock() {
			return nil // another placement is reading the store: the list it replaces will do
		}
	} else {
		c.refreshMu.Lock()
	}
	defer c.refreshMu.Unlock()
	c.mu.Lock()
	if c.loaded && ttl > 0 && time.Since(c.at) < ttl { // read meanwhile
		c.mu.Unlock()
		return nil
	}
	c.during = map[string]*store.Host{}
	c.mu.Unlock()
	list, err := s.cfg.Store.ListHosts(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.during = nil
		return err
	}
	c.install(list)
	c.at, c.loaded = time.Now(), true
	// A report another replica wrote counts this replica's placements and stops as one it got
	// itself would: they end with it (else a stop's credit would count on top of a report that
	// counts the sandbox gone, until this replica's own next report of the host).
	s.mu.Lock()
	for _, h := range list {
		if !h.HeardAt.IsZero() {
			s.settleLocked(h.ID, readWindow{after: h.ReadAt, by: h.HeardAt})
		}
	}
	s.mu.Unlock()
	return nil
}

// Host returns host id as placement sees it: from the cached list (at most HostCacheTTL older
// than the store, and patched with what this replica wrote), or from the store when the list has
// not got it or there is no TTL. Calls that go to a host (kills) read it here rather than the
// store once each.
func (s *Scheduler) Host(ctx context.Context, id string) (store.Host, error) {
	if s.cfg.HostCacheTTL > 0 && s.refreshHosts(ctx) == nil {
		s.hc.mu.RLock()
		i, ok := s.hc.pos[id]
		var h store.Host
		if ok {
			h = *s.hc.hosts[i]
		}
		s.hc.mu.RUnlock()
		if ok {
			return h, nil
		}
	}
	return s.cfg.Store.GetHost(ctx, id)
}

// noteHosts puts what this process just wrote of hosts into the cached list.
func (s *Scheduler) noteHosts(hs ...store.Host) {
	s.hc.mu.Lock()
	defer s.hc.mu.Unlock()
	s.noteHostsLocked(hs...)
}

// noteHostsLocked is noteHosts with s.hc.mu held.
func (s *Scheduler) noteHostsLocked(hs ...store.Host) {
	c := &s.hc
	if !c.loaded && c.during == nil {
		return // the first placement reads it all
	}
	for _, h := range hs {
		c.patch(h)
	}
}

const (
	// scanAll: a template's list of at most this many hosts is looked at whole.
	scanAll = 64
	// maxProbes: hosts looked at, at random, in a longer list before it is scanned whole (the
	// fleet is then nearly full: few fit).
	maxProbes = 64
)

// pick returns up to n of the hosts at idx that fit (fit reports whether host i does, and ranks
// it), chosen at random; sampled reports whether more fit than were returned (or may have).
// A long list is probed at random; only when the probes find fewer than n does it scan the whole
// list (a reservoir sample), so a nearly full fleet still finds its last free hosts. c.mu held.
func (c *hostCache) pick(idx []int, n int, fit func(h *store.Host) (hostRank, bool)) (out []hostRank, sampled bool) {
	if n <= 0 {
		return nil, len(idx) > 0
	}
	if len(idx) > scanAll {
		var tried []int
		for p := 0; p < maxProbes && len(out) < n; p++ {
			i := idx[rand.N(len(idx))]
			if slices.Contains(tried, i) {
				continue
			}
			tried = append(tried, i)
			c.probes.Add(1)
			if r, ok := fit(c.hosts[i]); ok {
				out = append(out, r)
			}
		}
		if len(out) == n {
			return out, true
		}
		out = out[:0]
	}
	fits := 0
	for _, i := range idx {
		c.probes.Add(1)
		r, ok := fit(c.hosts[i])
		if !ok {
			continue
		}
		fits++
		if len(out) < n {
			out = append(out, r)
		} else if j := rand.N(fits); j < n {
			out[j] = r
		}
	}
	return out, fits > n
}
