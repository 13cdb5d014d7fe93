package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load's mix per arrival (open loop): mostly creates, with gets, TTL changes, kills and lists.
var mix = []struct {
	route  string
	weight float64
}{{"create", 0.60}, {"get", 0.20}, {"ttl", 0.10}, {"kill", 0.05}, {"list", 0.05}}

// maxInflight bounds the open loop's requests in flight; arrivals beyond it are shed (counted):
// the servers are saturated and waiting longer would turn the open loop into a closed one.
const maxInflight = 4096

// load is the load generator and its book of what it was told: the sandboxes it saw created,
// their expiries, which it killed itself.
type load struct {
	client *http.Client
	auth   string

	inflight atomic.Int64

	mu      sync.Mutex
	sbs     map[string]*record // acknowledged creates not yet seen killed
	acked   map[string]bool    // every acknowledged create
	ids     []string           // keys of sbs, for picking one at random
	pos     map[string]int     // index in ids
	down    map[string]bool    // hosts taken away
	lat     map[string][]float64
	errs    map[string]int // route + " " + status
	lags    []float64      // reaper lag of kills seen this phase, ms
	creates int            // acknowledged this phase
	shed    int
}

type record struct {
	host    string
	expires time.Time
	ourKill bool // the load killed it: not the reaper's
}

func newLoad(rt http.RoundTripper, apiKey string) *load {
	l := &load{client: &http.Client{Transport: rt, Timeout: 60 * time.Second}, auth: "Bearer " + apiKey,
		sbs: map[string]*record{}, acked: map[string]bool{}, pos: map[string]int{}, down: map[string]bool{}}
	l.reset()
	return l
}

// reset starts a phase's figures.
func (l *load) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lat, l.errs, l.lags, l.creates, l.shed = map[string][]float64{}, map[string]int{}, nil, 0, 0
}

// call sends one request and records its latency (answers with the wanted status) or its status.
func (l *load) call(ctx context.Context, route, method, path string, body any, want int, into any) bool {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(ctx, method, lbURL+path, rd)
	req.Header.Set("Authorization", l.auth)
	req.Header.Set("Content-Type", "application/json")
	t := time.Now()
	resp, err := l.client.Do(req)
	status := "error"
	if err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status = strconv.Itoa(resp.StatusCode)
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			status += " " + e.Error.Code
		}
		if resp.StatusCode == want {
			if into != nil {
				json.Unmarshal(data, into)
			}
			l.mu.Lock()
			l.lat[route] = append(l.lat[route], float64(time.Since(t).Microseconds())/1000)
			l.mu.Unlock()
			return true
		}
	}
	if ctx.Err() != nil { // the phase ended under it: neither a success nor an error
		return false
	}
	l.mu.Lock()
	l.errs[route+" "+status]++
	l.mu.Unlock()
	return false
}

type view struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	ExpiresAt time.Time `json:"expires_at"`
}

// create asks for a sandbox and books it when acknowledged; it reports whether it was.
func (l *load) create(ctx context.Context, ttl int64) bool {
	var v view
	if !l.call(ctx, "create", "POST", "/v1/sandboxes", map[string]any{"template": template, "ttl_seconds": max(ttl, 1)}, 201, &v) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.creates++
	l.acked[v.ID] = true
	l.sbs[v.ID] = &record{host: v.Host, expires: v.ExpiresAt}
	l.pos[v.ID] = len(l.ids)
	l.ids = append(l.ids, v.ID)
	return true
}

// pick is a random sandbox the load believes alive ("" if none).
func (l *load) pick() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ids) == 0 {
		return ""
	}
	return l.ids[rand.N(len(l.ids))]
}

// forget drops a sandbox from the live book (l.mu held).
func (l *load) forget(id string) {
	i, ok := l.pos[id]
	if !ok {
		return
	}
	last := l.ids[len(l.ids)-1]
	l.ids[i], l.pos[last] = last, i
	l.ids = l.ids[:len(l.ids)-1]
	delete(l.pos, id)
	delete(l.sbs, id)
}

// one sends one request of the given route.
func (l *load) one(ctx context.Context, route string, ttl int64) {
	if route == "create" || route == "list" {
		if route == "create" {
			l.create(ctx, ttl)
		} else {
			l.call(ctx, route, "GET", "/v1/sandboxes?limit=100", nil, 200, nil)
		}
		return
	}
	id := l.pick()
	if id == "" {
		return
	}
	switch route {
	case "get":
		l.call(ctx, route, "GET", "/v1/sandboxes/"+id, nil, 200, nil)
	case "kill":
		l.mu.Lock()
		if r := l.sbs[id]; r != nil {
			r.ourKill = true
		}
		l.mu.Unlock()
		if l.call(ctx, route, "DELETE", "/v1/sandboxes/"+id, nil, 204, nil) {
			l.mu.Lock()
			l.forget(id)
			l.mu.Unlock()
		}
	case "ttl":
		var v view
		// A refresh to between half and all of the churn TTL: a sandbox's remaining life is half
		// the TTL on average, so refreshes lift the live count a little.
		if l.call(ctx, route, "POST", "/v1/sandboxes/"+id+"/ttl", map[string]any{"ttl_seconds": max(ttl/2+rand.N(ttl/2+1), 1)}, 200, &v) {
			l.mu.Lock()
			if r := l.sbs[id]; r != nil {
				r.expires = v.ExpiresAt
			}
			l.mu.Unlock()
		}
	}
}

// open runs the open loop for d: creates arrive at rate per second (the other routes in
// proportion, per mix) whether or not earlier requests have been answered. Requests in flight at
// the end are waited for, not cancelled: every create the servers record is answered.
func (l *load) open(ctx context.Context, rate float64, ttl int64, d time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	total := rate / mix[0].weight
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	end := time.After(d)
	due, last := 0.0, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end:
			return
		case now := <-t.C:
			due += total * now.Sub(last).Seconds()
			last = now
		}
		for ; due >= 1; due-- {
			if l.inflight.Load() >= maxInflight {
				l.mu.Lock()
				l.shed++
				l.mu.Unlock()
				continue
			}
			route := pickRoute()
			l.inflight.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer l.inflight.Add(-1)
				l.one(ctx, route, ttl)
			}()
		}
	}
}

func pickRoute() string {
	x := rand.Float64()
	for _, m := range mix {
		if x < m.weight {
			return m.route
		}
		x -= m.weight
	}
	return mix[0].route
}

// closed runs clients that each create back to back (after a refusal, 100 ms later) for d or
// until enough() says so; ttl gives each create's TTL. Requests in flight at the end finish.
func (l *load) closed(ctx context.Context, clients int, d time.Duration, enough func() bool, ttl func() int64) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(end) && !enough() {
				if !l.create(ctx, ttl()) {
					sleep(ctx, 100*time.Millisecond) // a refused client backs off, as SDK clients do
				}
			}
		}()
	}
	wg.Wait()
}

// settleKills takes the kills the hosts saw: the reaper's (sandboxes the load did not kill, on
// hosts that are up) give its lag past their expiry.
func (l *load) settleKills(kills map[string]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, at := range kills {
		r := l.sbs[id]
		if r == nil {
			continue
		}
		if !r.ourKill && !l.down[r.host] {
			l.lags = append(l.lags, float64(at.Sub(r.expires).Milliseconds()))
		}
		l.forget(id)
	}
}

// overdue counts sandboxes past their expiry by more than 2 s that no host was told to kill.
func (l *load) overdue() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, cut := 0, time.Now().Add(-2*time.Second)
	for _, r := range l.sbs {
		if !r.ourKill && !l.down[r.host] && r.expires.Before(cut) {
			n++
		}
	}
	return n
}

// count is how many creates were acknowledged this phase.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.creates
}

// latencies is a copy of this phase's latencies of a route, in the order they were answered.
func (l *load) latencies(route string) []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lat[route])
}
