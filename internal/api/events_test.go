package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/apps"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
	"github.com/pandastack/pandastack/web"
)

// eventStream reads GET /v1/events with key; its lines arrive on the channel, closed at the end.
func (e *env) eventStream(key string) <-chan v1.Event {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.hs.URL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		e.t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	ch := make(chan v1.Event, 100)
	e.t.Cleanup(func() { res.Body.Close() })
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			var ev v1.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ch <- ev
			}
		}
	}()
	return ch
}

// nextEvent waits for the stream's next event of type typ (others skipped); it fails the test if
// the stream ends first or says nothing for a minute.
func nextEvent(t *testing.T, ch <-chan v1.Event, typ string) v1.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("the events stream ended")
			}
			if ev.Type == typ {
				return ev
			}
		case <-time.After(time.Minute):
			t.Fatalf("no %s event within a minute", typ)
		}
	}
}

// TestEvents: the stream reports the team's sandboxes as they change (create, hibernate, wake,
// kill), never another team's, and ends when its key is revoked.
func TestEvents(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	b := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	evA := e.eventStream(a)
	if ev := <-evA; ev.Type != "ready" {
		t.Fatalf("first line %+v, want ready", ev)
	}
	theirs := e.create(b, map[string]any{"template": "base"})
	mine := e.create(a, map[string]any{"template": "base"})
	want := func(state string) {
		t.Helper()
		got := *nextEvent(t, evA, "sandbox").Sandbox // (change events skipped)
		if got.ID == theirs.ID {
			t.Fatalf("team A's stream shows team B's sandbox %s", theirs.ID)
		}
		if got.ID != mine.ID || got.State != state || got.Host != "host-a" {
			t.Fatalf("event %+v, want %s %s on host-a", got, mine.ID, state)
		}
	}
	want("running")
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+mine.ID+"/hibernate", a, nil), 200)
	want("hibernated")
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+mine.ID+"/wake", a, nil), 200)
	want("running")
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+theirs.ID, b, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+mine.ID, a, nil), 204)
	want("killed")

	// Calls that change the team's other resources arrive as "change" events, another team's never.
	theirVol := e.mustStatus(e.do("POST", "/v1/volumes", b, map[string]any{"size_mib": 16}), 201).json(t)["id"].(string)
	myVol := e.mustStatus(e.do("POST", "/v1/volumes", a, map[string]any{"size_mib": 16, "name": "ev"}), 201).json(t)["id"].(string)
	for {
		c := nextEvent(t, evA, "change").Change
		if c.ResourceID == theirVol {
			t.Fatalf("team A's stream shows team B's volume %s", theirVol)
		}
		if c.Route == "/v1/volumes" && c.ResourceID == myVol {
			if c.Method != "POST" || c.Status != 201 {
				t.Fatalf("change %+v", c)
			}
			break
		}
	}

	// A deployment's changes made by no call (a build that ends, fails or is superseded) arrive
	// as "deployment" events, another team's never.
	ctx := context.Background()
	mkDep := func(key, name string) (store.App, store.Deployment) {
		t.Helper()
		id := e.mustStatus(e.do("POST", "/v1/apps", key, map[string]any{"name": name}), 201).json(t)["id"].(string)
		app, err := e.st.GetApp(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.st.CreateDeployment(ctx, store.Deployment{ID: "dep_" + name, AppID: id, TeamID: app.TeamID, State: apps.Queued, Source: "upload"})
		if err != nil {
			t.Fatal(err)
		}
		return app, d
	}
	_, theirDep := mkDep(b, "their-app")
	myApp, myDep := mkDep(a, "my-app")
	wantDep := func(state string) {
		t.Helper()
		got := *nextEvent(t, evA, "deployment").Deployment
		if got.ID == theirDep.ID {
			t.Fatalf("team A's stream shows team B's deployment %s", theirDep.ID)
		}
		if got.ID != myDep.ID || got.AppID != myApp.ID || got.State != state {
			t.Fatalf("deployment event %+v, want %s %s", got, myDep.ID, state)
		}
	}
	wantDep(apps.Queued)
	myDep.State = apps.Building
	if _, err := e.st.UpdateDeployment(ctx, myDep, false); err != nil {
		t.Fatal(err)
	}
	wantDep(apps.Building)
	theirDep.State, myDep.State, myDep.Error = apps.Failed, apps.Failed, "build failed"
	e.st.UpdateDeployment(ctx, theirDep, true)
	if _, err := e.st.UpdateDeployment(ctx, myDep, true); err != nil {
		t.Fatal(err)
	}
	wantDep(apps.Failed)

	// A revoked key's stream ends; a new one is refused.
	k := e.mustStatus(e.do("POST", "/v1/keys", a, map[string]string{"name": "console"}), 201).json(t)
	evK := e.eventStream(k["key"].(string))
	<-evK
	e.mustStatus(e.do("DELETE", "/v1/keys/"+k["id"].(string), a, nil), 204)
	for range evK {
	}
	e.mustStatus(e.do("GET", "/v1/events", k["key"].(string), nil), 401)
	e.mustStatus(e.do("GET", "/v1/events?x=1", a, nil), 400)

	// One key holds at most MaxEventStreams (evA is one of them).
	for i := 1; i < MaxEventStreams; i++ {
		e.eventStream(a)
	}
	if r := e.do("GET", "/v1/events", a, nil); r.status != 429 || !strings.Contains(r.errMessage(), "event streams") {
		t.Fatalf("stream %d: %d %s", MaxEventStreams+1, r.status, r.body)
	}
}

// TestTerminalTickets: a ticket opens one terminal of its sandbox, once, while its key is valid;
// another team cannot get one.
func TestTerminalTickets(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	b := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	sb := e.create(a, map[string]any{"template": "base"})
	other := e.create(a, map[string]any{"template": "base"})
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/pty/ticket", b, nil), 404)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/pty/ticket", "", nil), 401)
	ticket := func(key string) string {
		t.Helper()
		v := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/pty/ticket", key, nil), 201).json(t)
		tok, _ := v["ticket"].(string)
		if !strings.HasPrefix(tok, "pdt_") || v["expires_at"] == "" || tok == key {
			t.Fatalf("ticket answer %v", v)
		}
		return tok
	}
	// The ticket is checked before the terminal is (the fake host has none): past the check the
	// answer is no longer a 401.
	tok := ticket(a)
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+other.ID+"/pty?ticket="+tok, "", nil), 401) // used up on the wrong sandbox
	tok = ticket(a)
	if r := e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?ticket="+tok, "", nil); r.status == 401 {
		t.Fatalf("a fresh ticket was refused: %s", r.body)
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?ticket="+tok, "", nil), 401) // once only
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?ticket=pdt_madeup", "", nil), 401)

	// A ticket dies with its key.
	k := e.mustStatus(e.do("POST", "/v1/keys", a, map[string]string{"name": "console"}), 201).json(t)
	tok = ticket(k["key"].(string))
	e.mustStatus(e.do("DELETE", "/v1/keys/"+k["id"].(string), a, nil), 204)
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?ticket="+tok, "", nil), 401)
}

// TestConsoleRoutes: GETs outside the API are the console's (with its security headers); the
// API's paths and other methods keep their JSON 404.
func TestConsoleRoutes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Console = web.Handler() })
	for _, p := range []string{"/", "/sandboxes", "/sandboxes/sb_x/terminal"} {
		r := e.mustStatus(e.do("GET", p, "", nil), 200)
		if !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || r.header.Get("Content-Security-Policy") != web.CSP ||
			r.header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(web.CSP, "frame-ancestors 'none'") ||
			!strings.Contains(string(r.body), "<html") {
			t.Fatalf("GET %s: %d %v %.200s", p, r.status, r.header, r.body)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/v1/nope"}, {"GET", "/internal/x"}, {"POST", "/"}, {"DELETE", "/sandboxes"}} {
		if r := e.do(c.method, c.path, "", nil); r.status != 404 || r.errCode() == "" {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	e.mustStatus(e.do("GET", "/healthz", "", nil), 200)
}
