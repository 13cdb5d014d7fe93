package api

import (
	"strconv"
	"strings"
	"testing"
)

// TestProcessesEdge: the public process routes over the fake agent — answers relayed in the
// wire shapes, bad input refused at the edge with a clear 4xx, another team's sandbox a 404, and
// a read-only key may read but not start or signal.
func TestProcessesEdge(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	sb := e.create(a, map[string]any{"template": "base"})
	base := "/v1/sandboxes/" + sb.ID + "/processes"

	started := e.mustStatus(e.do("POST", base, a, map[string]any{"cmd": "echo hi", "env": map[string]string{"A": "1"}}), 201).json(t)
	pid := strconv.Itoa(int(started["pid"].(float64)))
	out := e.mustStatus(e.do("GET", base+"/"+pid+"/output?offset=1&follow=1", a, nil), 200)
	if ct := out.header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("output content type %q", ct)
	}
	if want := "{\"offset\":1,\"stdout\":\"i\\n\",\"next\":3}\n{\"next\":3,\"exit_code\":0}\n"; string(out.body) != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.body, want)
	}
	list := e.mustStatus(e.do("GET", base, a, nil), 200).json(t)
	ps := list["processes"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["state"] != "exited" || ps[0].(map[string]any)["exit_code"] != float64(0) {
		t.Fatalf("list %v", list)
	}
	sleeper := strconv.Itoa(int(e.mustStatus(e.do("POST", base, a, map[string]any{"cmd": "sleep 600"}), 201).json(t)["pid"].(float64)))
	e.mustStatus(e.do("POST", base+"/"+sleeper+"/signal", a, map[string]any{"signal": "SIGTERM"}), 204)
	killed := e.mustStatus(e.do("DELETE", base+"/"+sleeper, a, nil), 200).json(t)
	if killed["state"] != "exited" || killed["signal"] != "SIGTERM" {
		t.Fatalf("kill after TERM: %v", killed)
	}

	tm := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)
	b := tm["key"].(map[string]any)["key"].(string)
	reader := e.mustStatus(e.do("POST", "/v1/keys", a, map[string]any{"name": "reader", "scopes": []string{"read"}}), 201).json(t)["key"].(string)
	e.wantRefusals([]refusal{
		{"POST", base, a, map[string]any{}, 400, "cmd"},
		{"POST", base, a, map[string]any{"cmd": "x", "argv": []string{"y"}}, 400, "not both"},
		{"POST", base, a, map[string]any{"cmd": "x", "env": map[string]string{"1A": "v"}}, 400, "env"},
		{"POST", base, a, map[string]any{"cmd": "x", "timeout_seconds": 3}, 400, "timeout_seconds"},
		{"GET", base + "/abc/output", a, nil, 400, "pid"},
		{"GET", base + "/" + pid + "/output?offset=-1", a, nil, 400, "offset"},
		{"GET", base + "/" + pid + "/output?follow=maybe", a, nil, 400, "follow"},
		{"GET", base + "/" + pid + "/output?tail=1", a, nil, 400, "tail"},
		{"GET", base + "/" + pid + "/output?offset=99", a, nil, 400, "offset"},
		{"POST", base + "/" + pid + "/signal", a, map[string]any{"signal": "SEGV"}, 400, "SEGV"},
		{"POST", base + "/999999/signal", a, map[string]any{"signal": "TERM"}, 404, "999999"},
		{"POST", base + "/" + pid + "/signal", a, map[string]any{"signal": "TERM"}, 409, "exited"},
		{"POST", base + "/" + pid + "/stdin", a, map[string]any{"data": strings.Repeat("x", 1<<20+1)}, 413, "limit"},
		{"POST", base + "/" + pid + "/stdin", a, map[string]any{"data": "x"}, 409, "stdin"},
		{"DELETE", base + "/999999", a, nil, 404, "999999"},
		{"GET", base, b, nil, 404, sb.ID},
		{"POST", base, b, map[string]any{"cmd": "echo"}, 404, sb.ID},
		{"DELETE", base + "/" + pid, b, nil, 404, sb.ID},
		{"POST", base, reader, map[string]any{"cmd": "echo"}, 403, "sandboxes"},
		{"POST", base + "/" + pid + "/signal", reader, map[string]any{"signal": "TERM"}, 403, "sandboxes"},
	})
	e.mustStatus(e.do("GET", base+"/"+pid+"/output", reader, nil), 200)
}
