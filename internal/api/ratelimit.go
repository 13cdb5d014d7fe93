package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
)

// RateLimit is the per-key token buckets every /v1 call with a key goes through: PerSecond
// calls a second on average, up to Burst at once; creates (sandboxes, forks, snapshots, volumes,
// templates) also take from a stricter bucket of their own. A zero PerSecond turns a bucket off.
// The buckets live in each replica's memory: N replicas allow up to N times the rate.
type RateLimit struct {
	PerSecond        float64
	Burst            int
	CreatesPerSecond float64
	CreateBurst      int
}

// creates are the routes that start work a host pays for: they take from the create bucket too.
var creates = map[string]bool{
	"POST /v1/sandboxes": true, "POST /v1/sandboxes/{id}/fork": true, "POST /v1/sandboxes/{id}/snapshots": true,
	"POST /v1/volumes": true, "POST /v1/templates": true,
	"POST /v1/functions": true, "POST /v1/functions/{id}/invoke": true, "POST /v1/schedules/{id}/trigger": true,
}

// buckets is one token bucket per key.
type buckets struct {
	rate, size float64
	now        func() time.Time
	mu         sync.Mutex
	m          map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newBuckets(rate float64, size int, now func() time.Time) *buckets {
	if rate <= 0 {
		return nil
	}
	if size < 1 {
		size = max(1, int(math.Ceil(rate)))
	}
	return &buckets{rate: rate, size: float64(size), now: now, m: map[string]*bucket{}}
}

// maxIdleBuckets bounds the map: past it, buckets that have refilled are dropped (a full bucket
// is the same as none).
const maxIdleBuckets = 10000

// take spends one token of key's bucket. It returns whether there was one, the whole tokens
// left, and how long until the next token (when refused) or until the bucket is full.
func (b *buckets) take(key string) (ok bool, left int, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	bk := b.m[key]
	if bk == nil {
		if len(b.m) >= maxIdleBuckets {
			b.dropFull(now)
		}
		bk = &bucket{tokens: b.size, at: now}
		b.m[key] = bk
	}
	bk.tokens = math.Min(b.size, bk.tokens+now.Sub(bk.at).Seconds()*b.rate)
	bk.at = now
	if bk.tokens < 1 {
		return false, 0, seconds((1 - bk.tokens) / b.rate)
	}
	bk.tokens--
	return true, int(bk.tokens), seconds((b.size - bk.tokens) / b.rate)
}

func (b *buckets) dropFull(now time.Time) {
	for k, bk := range b.m {
		if bk.tokens+now.Sub(bk.at).Seconds()*b.rate >= b.size {
			delete(b.m, k)
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ceilSeconds is d in whole seconds, rounded up (a header's unit).
func ceilSeconds(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// rateLimited refuses a call over its key's rate (429 rate_limited with Retry-After) and tells
// every answer its bucket's state in X-RateLimit-Limit, -Remaining and -Reset (seconds until
// full). A create takes from both buckets and reports its own, the stricter.
func (s *Server) rateLimited(rt route, next http.Handler) http.Handler {
	return s.limited(creates[rt.method+" "+rt.path], s.writeError, next)
}

// limited is rateLimited for a call that is a create or not, answering a refusal with writeErr.
func (s *Server) limited(isCreate bool, writeErr func(http.ResponseWriter, *http.Request, error), next http.Handler) http.Handler {
	all, create := s.limits.all, s.limits.create
	if !isCreate {
		create = nil
	}
	if all == nil && create == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := auth.FromContext(r.Context())
		key := id.KeyID
		if key == "" { // a call without a key (the E2B data plane's): its team's bucket
			key = "team:" + id.TeamID
		}
		for _, b := range []*buckets{all, create} {
			if b == nil {
				continue
			}
			ok, left, wait := b.take(key)
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.Itoa(int(b.size)))
			h.Set("X-RateLimit-Remaining", strconv.Itoa(left))
			if !ok {
				h.Set("X-RateLimit-Reset", ceilSeconds(seconds(b.size/b.rate)))
				h.Set("Retry-After", ceilSeconds(wait))
				what := "calls"
				if b == create {
					what = "creates"
				}
				writeErr(w, r, errdefs.WithCode(errdefs.Exhausted, "rate_limited",
					"rate limit: this key may make %g %s a second (bursts of %d); retry after %s s", b.rate, what, int(b.size), ceilSeconds(wait)))
				return
			}
			h.Set("X-RateLimit-Reset", ceilSeconds(wait))
		}
		next.ServeHTTP(w, r)
	})
}
