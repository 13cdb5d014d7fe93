package api

import (
	"strings"
	"testing"
	"time"
)

// TestRateLimits: each key has its own bucket; a call over it is 429 rate_limited with
// Retry-After; answers carry X-RateLimit-*; creates have a stricter bucket of their own; the
// bucket refills with time.
func TestRateLimits(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.RateLimit = RateLimit{PerSecond: 1, Burst: 3, CreatesPerSecond: 0.1, CreateBurst: 1}
	})
	other := e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]any{"name": "other"}), 201).json(t)["key"].(string)
	r := e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200)
	if r.header.Get("X-RateLimit-Limit") != "3" || r.header.Get("X-RateLimit-Remaining") != "1" || r.header.Get("X-RateLimit-Reset") != "2" {
		t.Fatalf("headers: %v", r.header)
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200)
	r = e.do("GET", "/v1/sandboxes", e.admin, nil)
	if r.status != 429 || r.errCode() != "rate_limited" || r.header.Get("Retry-After") != "1" || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("over the limit: %d %v %s", r.status, r.header, r.body)
	}
	// Another key is not affected; time refills the bucket.
	e.mustStatus(e.do("GET", "/v1/sandboxes", other, nil), 200)
	e.clock.Add(time.Second)
	e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200)

	// Creates: one, then the create bucket (0.1/s) refuses for 10 s while reads still pass.
	e.clock.Add(10 * time.Second)
	e.create(e.admin, map[string]any{"template": "base"})
	r = e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base"})
	if r.status != 429 || r.header.Get("Retry-After") != "10" || !strings.Contains(r.errMessage(), "creates") {
		t.Fatalf("second create: %d %v %s", r.status, r.header, r.body)
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200)
	e.clock.Add(10 * time.Second)
	e.create(e.admin, map[string]any{"template": "base"})
}

// TestNoRateLimitHeadersByDefault: without limits, answers are as before (no X-RateLimit-*).
func TestNoRateLimitHeadersByDefault(t *testing.T) {
	e := newEnv(t)
	if r := e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200); r.header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("headers: %v", r.header)
	}
}
