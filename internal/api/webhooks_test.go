package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// received is one request a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint on loopback that answers fail[i] (else 200) to its i-th request.
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	fail []int
}

func newReceiver(t *testing.T, fail ...int) *receiver {
	r := &receiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.got)
		r.got = append(r.got, received{req.Header.Clone(), b})
		r.mu.Unlock()
		if n < len(r.fail) {
			w.WriteHeader(r.fail[n])
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// waitFor polls cond, moving the server's clock on (retries fall due on it), until it holds.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		e.clock.Add(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("gave up waiting for %s", what)
}

// TestWebhooks: events reach a loopback receiver (allowed as `up` allows it), signed; a 500 is
// retried with the same delivery id; deliveries are recorded; another team sees none of it.
func TestWebhooks(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Webhooks = webhooks.Policy{AllowLoopback: true}
		c.WebhookRetryBase = time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.srv.RunWebhooks(ctx)

	rcv := newReceiver(t, http.StatusInternalServerError)
	var hook v1.Webhook
	json.Unmarshal(e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": rcv.URL + "/hook", "events": []string{"sandbox.created", "sandbox.killed"}}), 201).body, &hook)
	if !strings.HasPrefix(hook.ID, "wh_") || !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("create answer %+v", hook)
	}
	got := e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID, e.admin, nil), 200).json(t)
	if _, shown := got["secret"]; shown || got["url"] != rcv.URL+"/hook" {
		t.Fatalf("GET shows %v", got)
	}
	e.clock.Add(time.Second)

	sb := e.create(e.admin, map[string]any{"template": "base"})
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.admin, nil), 204)
	// created: a 500, then its retry; killed.
	e.waitFor("three requests", func() bool {
		return len(rcv.requests()) >= 3
	})
	reqs := rcv.requests()
	var events []string
	for i, r := range reqs {
		if err := webhooks.Verify(hook.Secret, r.header.Get(webhooks.HeaderSignature), r.body, e.clock.Now(), 10*time.Minute); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var ev v1.WebhookEvent
		if err := json.Unmarshal(r.body, &ev); err != nil || ev.Sandbox == nil || ev.Sandbox.ID != sb.ID || ev.WebhookID != hook.ID ||
			ev.Type != r.header.Get(webhooks.HeaderEvent) {
			t.Fatalf("request %d: %s %v", i, r.body, err)
		}
		events = append(events, ev.Type)
	}
	// The first request failed (500); its delivery was sent again with the same id.
	byID := map[string][]string{}
	for i, r := range reqs {
		id := r.header.Get(webhooks.HeaderDelivery)
		byID[id] = append(byID[id], events[i])
	}
	retried := byID[reqs[0].header.Get(webhooks.HeaderDelivery)]
	if len(reqs) != 3 || len(byID) != 2 || len(retried) != 2 || retried[0] != retried[1] || !slices.Contains(events, "sandbox.created") || !slices.Contains(events, "sandbox.killed") {
		t.Fatalf("requests by delivery: %v", byID)
	}
	if webhooks.Verify("whsec_other", reqs[0].header.Get(webhooks.HeaderSignature), reqs[0].body, e.clock.Now(), time.Hour) == nil {
		t.Fatal("a wrong secret verifies")
	}
	if webhooks.Verify(hook.Secret, reqs[0].header.Get(webhooks.HeaderSignature), append(reqs[0].body, ' '), e.clock.Now(), time.Hour) == nil {
		t.Fatal("a changed body verifies")
	}
	var ds v1.WebhookDeliveries
	e.waitFor("two succeeded deliveries", func() bool {
		json.Unmarshal(e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID+"/deliveries", e.admin, nil), 200).body, &ds)
		n := 0
		for _, d := range ds.Deliveries {
			if d.State == "succeeded" {
				n++
			}
		}
		return n == 2
	})
	byEvent := map[string]v1.WebhookDelivery{}
	for _, d := range ds.Deliveries {
		byEvent[d.Event] = d
	}
	if c := byEvent[retried[0]]; c.Attempts != 2 || c.StatusCode != 204 || c.ID != reqs[0].header.Get(webhooks.HeaderDelivery) {
		t.Fatalf("the retried delivery %+v", c)
	}
	if len(ds.Deliveries) != 2 {
		t.Fatalf("deliveries %+v: the webhook asked for created and killed only", ds.Deliveries)
	}

	// Another team sees none of it.
	other := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID, other, nil), 404)
	e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID+"/deliveries", other, nil), 404)
	e.mustStatus(e.do("DELETE", "/v1/webhooks/"+hook.ID, other, nil), 404)
	if l := e.mustStatus(e.do("GET", "/v1/webhooks", other, nil), 200).json(t)["webhooks"].([]any); len(l) != 0 {
		t.Fatalf("another team lists %v", l)
	}
	e.mustStatus(e.do("DELETE", "/v1/webhooks/"+hook.ID, e.admin, nil), 204)
	e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID, e.admin, nil), 404)
}

// TestWebhookBadInput: URLs that are not http(s), unknown events, oversize bodies and, under the
// server's default policy, private and loopback destinations are clear 400s (413).
func TestWebhookBadInput(t *testing.T) {
	e := newEnv(t) // the zero policy: `pandastack server`'s default
	rcv := newReceiver(t)
	for _, c := range []struct {
		body   any
		status int
		msg    string
	}{
		{map[string]any{"url": "ftp://example.com/x", "events": []string{"*"}}, 400, "http"},
		{map[string]any{"url": "file:///etc/passwd", "events": []string{"*"}}, 400, "http"},
		{map[string]any{"url": "example.com/x", "events": []string{"*"}}, 400, "http"},
		{map[string]any{"url": "http://user:pw@203.0.113.9/x", "events": []string{"*"}}, 400, "credentials"},
		{map[string]any{"url": "http://203.0.113.9/x", "events": []string{"sandbox.exploded"}}, 400, "unknown event"},
		{map[string]any{"url": "http://203.0.113.9/x", "events": []string{}}, 400, "events"},
		{map[string]any{"url": "http://203.0.113.9/x"}, 400, "events"},
		{map[string]any{"url": rcv.URL, "events": []string{"*"}}, 400, "loopback"},
		{map[string]any{"url": "http://10.1.2.3/x", "events": []string{"*"}}, 400, "not a public address"},
		{map[string]any{"url": "http://169.254.169.254/latest", "events": []string{"*"}}, 400, "not a public address"},
		{map[string]any{"url": "http://[::1]:9/x", "events": []string{"*"}}, 400, "loopback"},
		{map[string]any{"url": "http://203.0.113.9/" + strings.Repeat("a", 3000), "events": []string{"*"}}, 400, "at most"},
		{`{"url": "http://203.0.113.9/x", "events": ["*"], "pad": "` + strings.Repeat("a", 20000) + `"}`, 413, ""},
		{map[string]any{"url": "http://203.0.113.9/x", "events": []string{"*"}, "extra": 1}, 400, "unknown field"},
	} {
		r := e.do("POST", "/v1/webhooks", e.admin, c.body)
		if r.status != c.status || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("%.120v: %d %s, want %d with %q", c.body, r.status, r.body, c.status, c.msg)
		}
	}
	if l := e.mustStatus(e.do("GET", "/v1/webhooks", e.admin, nil), 200).json(t)["webhooks"].([]any); len(l) != 0 {
		t.Fatalf("bad input made webhooks: %v", l)
	}
	// A public address is fine (nothing is sent to it here: no events happen).
	e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": "https://203.0.113.9/x", "events": []string{"*"}}), 201)
}

// TestWebhookTemplateBuilt: a team template's successful build is a template.built event with
// the template as built; a failed build is none.
func TestWebhookTemplateBuilt(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Webhooks = webhooks.Policy{AllowLoopback: true} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.srv.RunWebhooks(ctx)
	rcv := newReceiver(t)
	var hook v1.Webhook
	json.Unmarshal(e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": rcv.URL, "events": []string{"template.built"}}), 201).body, &hook)
	e.clock.Add(time.Second)

	e.build(e.admin, map[string]any{"name": "webhooked", "from": "base", "description": "for the event"})
	e.waitFor("a template.built delivery", func() bool { return len(rcv.requests()) >= 1 })
	r := rcv.requests()[0]
	var ev v1.WebhookEvent
	if err := json.Unmarshal(r.body, &ev); err != nil || ev.Type != "template.built" || ev.Template == nil ||
		ev.Template.Name != "webhooked" || ev.Template.Owner != v1.OwnerTeam || ev.Template.Description != "for the event" {
		t.Fatalf("template.built delivery: %s %v", r.body, err)
	}
	if err := webhooks.Verify(hook.Secret, r.header.Get(webhooks.HeaderSignature), r.body, e.clock.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	// Nothing more: a sandbox event was not asked for, the build gives one event.
	e.create(e.admin, map[string]any{"template": "base"})
	e.clock.Add(5 * time.Second)
	time.Sleep(3 * webhooks.DefaultPoll) // a few rounds of the dispatcher
	if n := len(rcv.requests()); n != 1 {
		t.Fatalf("%d requests, want the one template.built", n)
	}
}

// TestWebhookDeployments: an app deployment's states reach a webhook that asked for them, each
// once, with the deployment (its URL once it has a release); a webhook of another type gets none.
func TestWebhookDeployments(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Webhooks = webhooks.Policy{AllowLoopback: true}; c.ProxyDomain = "localtest.me" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.srv.RunWebhooks(ctx)
	rcv, other := newReceiver(t), newReceiver(t)
	var hook v1.Webhook
	json.Unmarshal(e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": rcv.URL,
		"events": []string{"deployment.created", "deployment.live", "deployment.failed"}}), 201).body, &hook)
	e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": other.URL, "events": []string{"template.built"}}), 201)
	var app v1.App
	json.Unmarshal(e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "hooked"}), 201).body, &app)
	e.clock.Add(time.Second)

	// The deployment's own record moves through its states, as a build does.
	row, err := e.st.GetApp(ctx, app.ID)
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.st.CreateDeployment(ctx, store.Deployment{ID: "dep_hooked1", AppID: app.ID, TeamID: row.TeamID, State: "queued", Source: "upload"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("deployment.created", func() bool { return len(rcv.requests()) >= 1 })
	for _, state := range []string{"building", "deploying", "live"} {
		e.clock.Add(time.Second)
		d.State = state
		if state == "deploying" {
			d.SnapshotID = "snap_release"
		}
		if d, err = e.st.UpdateDeployment(ctx, d, state == "live"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * webhooks.DefaultPoll) // building and deploying are looked at, not asked for
	}
	e.waitFor("deployment.live", func() bool { return len(rcv.requests()) >= 2 })
	e.clock.Add(5 * time.Second)
	time.Sleep(3 * webhooks.DefaultPoll)
	got := rcv.requests()
	if len(got) != 2 {
		t.Fatalf("%d deliveries, want deployment.created and deployment.live", len(got))
	}
	for i, want := range []string{"deployment.created", "deployment.live"} {
		var ev v1.WebhookEvent
		if err := json.Unmarshal(got[i].body, &ev); err != nil || ev.Type != want || got[i].header.Get(webhooks.HeaderEvent) != want ||
			ev.Deployment == nil || ev.Deployment.ID != "dep_hooked1" || ev.Deployment.AppID != app.ID || (want == "deployment.live") != (ev.Deployment.URL != "") {
			t.Fatalf("delivery %d: %s %v, want %s of dep_hooked1", i, got[i].body, err, want)
		}
		if err := webhooks.Verify(hook.Secret, got[i].header.Get(webhooks.HeaderSignature), got[i].body, e.clock.Now(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(other.requests()); n != 0 {
		t.Fatalf("the template.built webhook got %d deliveries", n)
	}
}
