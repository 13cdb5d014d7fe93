package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSchedulesAPI: create, read, pause, resume, trigger, runs and delete through the API (the
// fake agent runs the command); bad input is 400 naming the problem; another team sees 404.
func TestSchedulesAPI(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	for _, c := range []struct {
		body any
		code int
		want string
	}{
		{`{"cron": "61 * * * *", "template": "base", "cmd": "true"}`, 400, "minute field"},
		{`{"cron": "* * * *", "template": "base", "cmd": "true"}`, 400, "want 5"},
		{`{"cron": "@hourly", "timezone": "Europe/Nowhere", "template": "base", "cmd": "true"}`, 400, "timezone"},
		{`{"cron": "@hourly", "template": "base"}`, 400, "template and cmd"},
		{`{"cron": "@hourly", "template": "nope", "cmd": "true"}`, 400, "unknown template"},
		{`{"cron": "@hourly", "template": "base", "cmd": "true", "overlap": "x"}`, 400, "overlap"},
		{`{"cron": "@hourly", "template": "base", "cmd": "true", "bogus": 1}`, 400, "bogus"},
		{`{"cron": "@hourly", "function_id": "fn_nope"}`, 404, "function fn_nope not found"},
		{`{"cron": "@hourly", "function_id": "fn_nope", "cmd": "true"}`, 400, "not both"},
		{`{"cron": "@hourly", "template": "base", "cmd": "true", "payload": "` + strings.Repeat("x", 300<<10) + `"}`, 413, "limit"},
	} {
		r := e.do("POST", "/v1/schedules", a, c.body)
		if r.status != c.code || !strings.Contains(r.errMessage(), c.want) {
			t.Errorf("%.80s: %d %s, want %d naming %q", c.body, r.status, r.body, c.code, c.want)
		}
	}
	sc := e.mustStatus(e.do("POST", "/v1/schedules", a, map[string]any{"name": "nightly", "cron": "30 2 * * *",
		"timezone": "Europe/Berlin", "template": "base", "cmd": "echo hi", "missed": "run_once"}), 201).json(t)
	id := sc["id"].(string)
	if sc["enabled"] != true || sc["overlap"] != "skip" || sc["next_run_at"] == nil || sc["payload"] != nil {
		t.Fatalf("schedule %v", sc)
	}
	list := e.mustStatus(e.do("GET", "/v1/schedules", a, nil), 200).json(t)["schedules"].([]any)
	if len(list) != 1 {
		t.Fatalf("list %v", list)
	}
	if got := e.mustStatus(e.do("POST", "/v1/schedules/"+id+"/pause", a, nil), 200).json(t); got["enabled"] != false {
		t.Fatalf("paused %v", got)
	}
	e.mustStatus(e.do("POST", "/v1/schedules/"+id+"/resume", a, nil), 200)
	run := e.mustStatus(e.do("POST", "/v1/schedules/"+id+"/trigger", a, nil), 202).json(t)
	if run["trigger"] != "manual" || run["status"] != "running" {
		t.Fatalf("trigger %v", run)
	}
	e.srv.Schedules().Wait()
	runs := e.mustStatus(e.do("GET", "/v1/schedules/"+id+"/runs", a, nil), 200).json(t)["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("runs %v", runs)
	}
	r0 := runs[0].(map[string]any)
	if r0["status"] != "succeeded" || r0["output"] != "hi\n" || r0["exit_code"] != json.Number("0") && r0["exit_code"] != float64(0) {
		t.Fatalf("run %v", r0)
	}
	// The cron instant: tick the engine on the server's clock past 02:30 Berlin.
	now := e.clock.Now()
	next, _ := time.Parse(time.RFC3339, sc["next_run_at"].(string))
	e.clock.Add(next.Sub(now) + 30*time.Second)
	if err := e.srv.Schedules().Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.srv.Schedules().Wait()
	runs = e.mustStatus(e.do("GET", "/v1/schedules/"+id+"/runs", a, nil), 200).json(t)["runs"].([]any)
	if len(runs) != 2 || runs[0].(map[string]any)["trigger"] != "cron" || runs[0].(map[string]any)["scheduled_for"] != sc["next_run_at"] {
		t.Fatalf("after the instant: %v (next_run_at %v)", runs, sc["next_run_at"])
	}

	tm := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)
	b := tm["key"].(map[string]any)["key"].(string)
	for _, c := range []struct{ method, sub string }{
		{"GET", ""}, {"DELETE", ""}, {"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/trigger"}, {"GET", "/runs"},
	} {
		if r := e.do(c.method, "/v1/schedules/"+id+c.sub, b, nil); r.status != 404 {
			t.Errorf("another team's %s %s: %d %s", c.method, c.sub, r.status, r.body)
		}
	}
	if l := e.mustStatus(e.do("GET", "/v1/schedules", b, nil), 200).json(t)["schedules"].([]any); len(l) != 0 {
		t.Errorf("another team lists %v", l)
	}
	e.mustStatus(e.do("DELETE", "/v1/schedules/"+id, a, nil), 204)
	e.mustStatus(e.do("GET", "/v1/schedules/"+id, a, nil), 404)
}
