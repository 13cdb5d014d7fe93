package api

import (
	"strings"
	"testing"
)

// TestCodeRefusals: bad code requests are 4xx before anything reaches the sandbox, and a sandbox
// whose guest has no code relay (the fake agent's guest has none) says so instead of hanging.
func TestCodeRefusals(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	base := "/v1/sandboxes/" + sb.ID + "/code"
	for _, c := range []struct {
		method, path, body string
		status             int
		code, says         string
	}{
		{"POST", base, ``, 400, "invalid_request", "code is required"},
		{"POST", base, `{"code": " "}`, 400, "invalid_request", "code is required"},
		{"POST", base, `{"code": "1+1", "language": "cobol"}`, 400, "invalid_request", "not supported"},
		{"POST", base, `{"code": "1+1", "timeout_seconds": 0}`, 400, "invalid_request", "timeout_seconds"},
		{"POST", base, `{"code": "1+1", "timeout_seconds": 1e9}`, 400, "invalid_request", "timeout_seconds"},
		{"POST", base, `{"code": "1+1", "context_id": "../x"}`, 400, "invalid_request", "context_id"},
		{"POST", base, `{"code": "1+1", "bogus": 1}`, 400, "invalid_request", "bogus"},
		{"POST", base, `{"code": "` + strings.Repeat("x", 1<<20+1) + `"}`, 413, "payload_too_large", ""},
		{"POST", base + "/contexts", `{"language": "r"}`, 400, "invalid_request", "not supported"},
		{"POST", base + "/contexts", `{"cwd": "relative"}`, 400, "invalid_request", "absolute"},
		{"POST", base + "/interrupt", `{"context_id": "a b"}`, 400, "invalid_request", "context id"},
		{"DELETE", base + "/contexts/a%20b", ``, 400, "invalid_request", "context id"},
		{"POST", "/v1/sandboxes/sb_nosuch/code", `{"code": "1"}`, 404, "not_found", ""},
		{"POST", base, `{"code": "1+1"}`, 409, "no_code_interpreter", "code-interpreter template"},
		{"GET", base + "/contexts", ``, 409, "no_code_interpreter", "code-interpreter template"},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.do(c.method, c.path, e.admin, body)
		if r.status != c.status || r.errCode() != c.code || !strings.Contains(r.errMessage(), c.says) {
			t.Errorf("%s %s %.80s: %d %s, want %d %s saying %q", c.method, c.path, c.body, r.status, r.body, c.status, c.code, c.says)
		}
	}
	// The stream answers the same error with its status (headers wait for the first event).
	r := e.do("POST", base, e.admin, `{"code": "1+1"}`, "Accept", "application/x-ndjson")
	if r.status != 409 || r.errCode() != "no_code_interpreter" {
		t.Errorf("streamed run without an interpreter: %d %s", r.status, r.body)
	}
}
