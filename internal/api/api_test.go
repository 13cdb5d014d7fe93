package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
)

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "code-interpreter", "metadata": map[string]string{"task": "rollout"},
		"env": map[string]string{"GREETING": "hello"}})
	if !strings.HasPrefix(sb.ID, "sb_") || sb.State != "running" || sb.Template != "code-interpreter" || sb.Host != "host-a" ||
		sb.Metadata["task"] != "rollout" {
		t.Fatalf("created %+v", sb)
	}
	created, _ := time.Parse(time.RFC3339, sb.CreatedAt)
	expires, _ := time.Parse(time.RFC3339, sb.ExpiresAt)
	if d := expires.Sub(created); d != DefaultTTL {
		t.Fatalf("default ttl %v", d)
	}
	if !strings.HasSuffix(sb.CreatedAt, "Z") {
		t.Fatalf("timestamp not UTC: %s", sb.CreatedAt)
	}

	got := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, k, nil), 200).json(t)
	if got["id"] != sb.ID || got["state"] != "running" {
		t.Fatalf("get %v", got)
	}

	// Exec, buffered.
	ex := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", k, map[string]any{"cmd": "echo 1024", "timeout_seconds": 30}), 200).json(t)
	if ex["stdout"] != "1024\n" || ex["exit_code"] != float64(0) {
		t.Fatalf("exec %v", ex)
	}
	ex = e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", k, map[string]any{"argv": []string{"env", "GREETING"}}), 200).json(t)
	if ex["stdout"] != "hello\n" {
		t.Fatalf("create env did not reach the sandbox: %v", ex)
	}
	ex = e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", k, map[string]any{"cmd": "exit 3"}), 200).json(t)
	if ex["exit_code"] != float64(3) {
		t.Fatalf("exit code %v", ex)
	}

	// Files.
	st := e.mustStatus(e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/work/note.txt", k, "checkpoint"), 200).json(t)
	if st["size"] != float64(10) {
		t.Fatalf("write stat %v", st)
	}
	rd := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/work/note.txt", k, nil), 200)
	if string(rd.body) != "checkpoint" || rd.header.Get("Content-Length") != "10" {
		t.Fatalf("read %q %v", rd.body, rd.header)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/files/mkdir", k, map[string]string{"path": "/work/sub"}), 204)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/files/move", k, map[string]string{"from": "/work/note.txt", "to": "/work/sub/n.txt"}), 204)
	ls := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/files/list?path=/work/sub&depth=1", k, nil), 200).json(t)
	if ents := ls["entries"].([]any); len(ents) != 1 || ents[0].(map[string]any)["name"] != "n.txt" {
		t.Fatalf("list %v", ls)
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/files/stat?path=/work/sub/n.txt", k, nil), 200)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID+"/files?path=/work/sub/n.txt", k, nil), 204)
	r := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/work/sub/n.txt", k, nil), 404)
	if r.errCode() != "not_found" {
		t.Fatalf("missing file: %s", r.body)
	}

	// TTL refresh.
	e.clock.Add(100 * time.Second)
	ttl := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/ttl", k, map[string]int{"ttl_seconds": 600}), 200).json(t)
	exp, _ := time.Parse(time.RFC3339, ttl["expires_at"].(string))
	if want := e.clock.Now().Add(600 * time.Second); exp.Sub(want).Abs() > time.Second {
		t.Fatalf("ttl refresh: expires %v, want %v", exp, want)
	}

	// List, with filters.
	other := e.create(k, map[string]any{"template": "base"})
	ids := func(q string) []string {
		t.Helper()
		out, _ := e.listIDs(k, "/v1/sandboxes"+q, "sandboxes")
		return out
	}
	if got := ids(""); len(got) != 2 {
		t.Fatalf("list %v", got)
	}
	if got := ids("?metadata.task=rollout"); len(got) != 1 || got[0] != sb.ID {
		t.Fatalf("metadata filter %v", got)
	}

	// Kill: 204, idempotent; then calls conflict and the default list leaves it out.
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+other.ID, k, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+other.ID, k, nil), 204)
	if _, kills := e.agent.Counts(); kills != 1 {
		t.Fatalf("agent kills %d", kills)
	}
	r = e.mustStatus(e.do("POST", "/v1/sandboxes/"+other.ID+"/exec", k, map[string]any{"cmd": "echo x"}), 409)
	if r.errCode() != "conflict" || !strings.Contains(r.errMessage(), "killed") {
		t.Fatalf("exec on killed: %s", r.body)
	}
	if got := ids(""); len(got) != 1 || got[0] != sb.ID {
		t.Fatalf("default list shows killed: %v", got)
	}
	if got := ids("?state=killed"); len(got) != 1 || got[0] != other.ID {
		t.Fatalf("state=killed: %v", got)
	}
	if got := ids("?state=all"); len(got) != 2 {
		t.Fatalf("state=all: %v", got)
	}
	if e.mustStatus(e.do("GET", "/v1/sandboxes/"+other.ID, k, nil), 200).json(t)["state"] != "killed" {
		t.Fatal("killed sandbox not reported killed")
	}
}

func TestExecStreamsNDJSON(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	req, _ := http.NewRequest("POST", e.hs.URL+"/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"cmd": "lines 5"}`))
	req.Header.Set("Authorization", "Bearer "+e.admin)
	req.Header.Set("Accept", "application/x-ndjson")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "application/x-ndjson" || res.Header.Get("X-Request-Id") == "" {
		t.Fatalf("headers %v", res.Header)
	}
	sc := bufio.NewScanner(res.Body)
	var lines []map[string]any
	var firstAt time.Duration
	for sc.Scan() {
		if firstAt == 0 {
			firstAt = time.Since(start)
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	total := time.Since(start)
	if len(lines) != 6 || lines[0]["stdout"] != "line 1\n" || lines[5]["exit_code"] != float64(0) {
		t.Fatalf("lines %v", lines)
	}
	// The fake agent spaces lines 20 ms apart: the first must arrive well before the last.
	if firstAt > total-60*time.Millisecond {
		t.Fatalf("stream was buffered: first line after %v, all after %v", firstAt, total)
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	many := map[string]string{}
	for i := 0; i < 65; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	manyEnv := map[string]string{}
	for i := 0; i < 65; i++ {
		manyEnv[fmt.Sprintf("K%d", i)] = "v"
	}
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		msg    string
	}{
		{"unknown field", `{"template": "base", "tempalte": "x"}`, 400, "invalid_request", `unknown field "tempalte"`},
		{"ttl string", `{"template": "base", "ttl_seconds": "600"}`, 400, "invalid_request", "ttl_seconds must be an integer"},
		{"ttl float", `{"template": "base", "ttl_seconds": 1.5}`, 400, "invalid_request", "ttl_seconds must be an integer"},
		{"ttl zero", `{"template": "base", "ttl_seconds": 0}`, 400, "invalid_request", "ttl_seconds must be between 1 and 86400"},
		{"ttl negative", `{"template": "base", "ttl_seconds": -5}`, 400, "invalid_request", "ttl_seconds"},
		{"ttl too big", `{"template": "base", "ttl_seconds": 86401}`, 400, "invalid_request", "ttl_seconds must be between 1 and 86400"},
		{"ttl 23 digits", `{"template": "base", "ttl_seconds": 12345678901234567890123}`, 400, "invalid_request", "ttl_seconds is out of range: 12345678901234567890123"},
		{"template wrong type", `{"template": 7}`, 400, "invalid_request", "template must be a string"},
		{"metadata wrong type", `{"template": "base", "metadata": {"n": 1}}`, 400, "invalid_request", "must be a string"},
		{"metadata not object", `{"template": "base", "metadata": ["a"]}`, 400, "invalid_request", "metadata must be an object"},
		{"metadata too many keys", map[string]any{"template": "base", "metadata": many}, 400, "invalid_request", "at most 64"},
		{"metadata key too long", map[string]any{"template": "base", "metadata": map[string]string{strings.Repeat("k", 65): "v"}}, 400, "invalid_request", "at most 64"},
		{"metadata value too long", map[string]any{"template": "base", "metadata": map[string]string{"k": strings.Repeat("v", 513)}}, 400, "invalid_request", "at most 512"},
		{"metadata empty key", map[string]any{"template": "base", "metadata": map[string]string{"": "v"}}, 400, "invalid_request", "empty"},
		{"metadata value NUL", map[string]any{"template": "base", "metadata": map[string]string{"k": "a\x00b"}}, 400, "invalid_request", `metadata value of "k" must be valid UTF-8 without control characters`},
		{"metadata value escape", map[string]any{"template": "base", "metadata": map[string]string{"k": "\x1b[2J\x1b]0;owned\x07"}}, 400, "invalid_request", "without control characters"},
		{"metadata value newline", map[string]any{"template": "base", "metadata": map[string]string{"k": "a\nsb_fake other"}}, 400, "invalid_request", "without control characters"},
		{"metadata value C1 CSI", map[string]any{"template": "base", "metadata": map[string]string{"k": "\u009b31m"}}, 400, "invalid_request", "without control characters"},
		{"metadata value bidi", map[string]any{"template": "base", "metadata": map[string]string{"k": "gpj.\u202eexe"}}, 400, "invalid_request", "without control characters"},
		{"metadata key bidi", map[string]any{"template": "base", "metadata": map[string]string{"\u2066k": "v"}}, 400, "invalid_request", "without control characters"},
		{"env too many", map[string]any{"template": "base", "env": manyEnv}, 400, "invalid_request", "at most 64"},
		{"env bad name", map[string]any{"template": "base", "env": map[string]string{"1BAD": "v"}}, 400, "invalid_request", "not a valid variable name"},
		{"env value too long", map[string]any{"template": "base", "env": map[string]string{"A": strings.Repeat("v", 4097)}}, 400, "invalid_request", "at most 4096"},
		{"unknown template", `{"template": "nope"}`, 400, "invalid_request", `unknown template "nope"`},
		{"missing template", `{}`, 400, "invalid_request", "template is required"},
		{"empty body", ``, 400, "invalid_request", "empty"},
		{"malformed json", `{"template": `, 400, "invalid_request", "JSON"},
		{"not an object", `["base"]`, 400, "invalid_request", "JSON object"},
		{"trailing data", `{"template": "base"} {"template": "base"}`, 400, "invalid_request", "after the JSON object"},
		{"huge body", `{"template": "base", "metadata": {"k": "` + strings.Repeat("x", 2<<20) + `"}}`, 413, "payload_too_large", "limit"},
		{"missing snapshot", `{"template": "base", "snapshot_id": "snap_1"}`, 404, "not_found", "snapshot snap_1 not found"},
		{"empty snapshot_id", `{"snapshot_id": ""}`, 400, "invalid_request", "snapshot_id must not be empty"},
		{"snapshot_id wrong type", `{"snapshot_id": 5}`, 400, "invalid_request", "snapshot_id must be a string"},
		{"volumes unknown field", `{"template": "base", "volumes": [{"name": "v"}]}`, 400, "invalid_request", `unknown field "name"`},
		{"volumes not array", `{"template": "base", "volumes": {"volume_id": "vol_1"}}`, 400, "invalid_request", "volumes must be an array"},
		{"volumes missing id", `{"template": "base", "volumes": [{"mount_path": "/data"}]}`, 400, "invalid_request", "volumes[0].volume_id is required"},
		{"volumes missing path", `{"template": "base", "volumes": [{"volume_id": "vol_1"}]}`, 400, "invalid_request", "volumes[0].mount_path is required"},
		{"volumes relative path", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "data"}]}`, 400, "invalid_request", "must be absolute"},
		{"volumes root", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/"}]}`, 400, "invalid_request", "must not be /"},
		{"volumes unclean path", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/data/../x/"}]}`, 400, "invalid_request", `not normalised (use "/x")`},
		{"volumes system dir", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/usr/local/data"}]}`, 400, "invalid_request", "system directory /usr"},
		{"volumes system dir itself", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/etc"}]}`, 400, "invalid_request", "system directory /etc"},
		{"volumes path too long", map[string]any{"template": "base", "volumes": []map[string]any{{"volume_id": "vol_1", "mount_path": "/" + strings.Repeat("d", 256)}}}, 400, "invalid_request", "at most 256"},
		{"volumes read_only type", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/data", "read_only": "yes"}]}`, 400, "invalid_request", "read_only must be a boolean"},
		{"volumes volume_id type", `{"template": "base", "volumes": [{"volume_id": 7, "mount_path": "/data"}]}`, 400, "invalid_request", "volume_id must be a string"},
		{"volumes too many", map[string]any{"template": "base", "volumes": []map[string]any{
			{"volume_id": "vol_1", "mount_path": "/a"}, {"volume_id": "vol_2", "mount_path": "/b"}, {"volume_id": "vol_3", "mount_path": "/c"},
			{"volume_id": "vol_4", "mount_path": "/d"}, {"volume_id": "vol_5", "mount_path": "/e"}}}, 400, "invalid_request", "at most 4"},
		{"volumes duplicate path", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/data"}, {"volume_id": "vol_2", "mount_path": "/data"}]}`, 400, "invalid_request", "used by another volume"},
		{"volumes duplicate volume", `{"template": "base", "volumes": [{"volume_id": "vol_1", "mount_path": "/a"}, {"volume_id": "vol_1", "mount_path": "/b"}]}`, 400, "invalid_request", "listed twice"},
		{"volumes missing volume", `{"template": "base", "volumes": [{"volume_id": "vol_nope", "mount_path": "/data"}]}`, 404, "not_found", "volume vol_nope not found"},
		{"egress bad cidr", `{"template": "base", "egress": {"allow": ["10.0.0.0/33"]}}`, 400, "invalid_request", "egress.allow"},
		{"egress ipv6", `{"template": "base", "egress": {"deny": ["2001:db8::/32"]}}`, 400, "invalid_request", "IPv4"},
		{"egress unknown field", `{"template": "base", "egress": {"internet": true, "ports": [80]}}`, 400, "invalid_request", "egress"},
		{"egress wrong type", `{"template": "base", "egress": {"internet": "yes"}}`, 400, "invalid_request", "egress"},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/sandboxes", k, c.body)
		if r.status != c.status || r.errCode() != c.code || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("%s: %d %s, want %d %s containing %q", c.name, r.status, r.body, c.status, c.code, c.msg)
		}
		if r.header.Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", c.name)
		}
	}

	// Bad keys.
	created := e.mustStatus(e.do("POST", "/v1/keys", k, map[string]string{"name": "doomed"}), 201).json(t)
	revoked := created["key"].(string)
	e.mustStatus(e.do("DELETE", "/v1/keys/"+created["id"].(string), k, nil), 204)
	for name, c := range map[string]struct {
		key string
		msg string
	}{
		"no key":        {"", "missing API key"},
		"malformed key": {"pds_short", "malformed API key"},
		"unknown key":   {"pds_" + strings.Repeat("A", 32), "invalid API key"},
		"revoked key":   {revoked, "revoked"},
	} {
		r := e.do("POST", "/v1/sandboxes", c.key, `{"template": "base"}`)
		if r.status != 401 || r.errCode() != "unauthorized" || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
	if creates, _ := e.agent.Counts(); creates != 0 {
		t.Fatalf("bad input reached the host: %d creates", creates)
	}
	if n := e.sandboxCount(); n != 0 {
		t.Fatalf("bad input created %d sandboxes", n)
	}
}

func TestBadInputOtherCalls(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	sb := e.create(k, map[string]any{"template": "base"})
	p := "/v1/sandboxes/" + sb.ID
	cases := []struct {
		method, path string
		body         any
		status       int
		msg          string
	}{
		{"POST", p + "/exec", `{}`, 400, "give cmd"},
		{"POST", p + "/exec", `{"cmd": "a", "argv": ["b"]}`, 400, "not both"},
		{"POST", p + "/exec", `{"cmd": "a", "timeout_seconds": 0}`, 400, "timeout_seconds"},
		{"POST", p + "/exec", `{"cmd": "a", "timeout_seconds": "5"}`, 400, "timeout_seconds must be a number"},
		{"POST", p + "/exec", `{"cmd": "a", "shell": true}`, 400, `unknown field "shell"`},
		{"POST", p + "/ttl", `{"ttl_seconds": 0}`, 400, "ttl_seconds"},
		{"POST", p + "/ttl", `{"ttl_seconds": 999999}`, 400, "ttl_seconds"},
		{"POST", p + "/ttl", `{"ttl_seconds": 12345678901234567890123}`, 400, "ttl_seconds is out of range"},
		{"POST", p + "/ttl", `{}`, 400, "required"},
		{"GET", "/v1/sandboxes?limit=0", nil, 400, "limit"},
		{"GET", "/v1/sandboxes?limit=abc", nil, 400, "limit"},
		{"GET", "/v1/sandboxes?state=sleeping", nil, 400, "state"},
		{"GET", "/v1/sandboxes?colour=red", nil, 400, "unknown query parameter"},
		{"GET", "/v1/sandboxes?cursor=%21%21", nil, 400, "cursor"},
		{"GET", p + "/files", nil, 400, "path is required"},
		{"GET", p + "/files/list?path=/&depth=99", nil, 400, "depth"},
		{"PUT", p + "/files?path=/a&mode=999", "x", 400, "mode"},
		{"POST", p + "/files/mkdir", `{"path": "/a", "parents": true}`, 400, "unknown field"},
		{"POST", p + "/files/move", `{"from": "/a"}`, 400, "required"},
		{"POST", "/v1/keys", `{"admin": "yes"}`, 400, "admin must be a boolean"},
		{"POST", "/v1/teams", `{"name": "bad name!"}`, 400, "name"},
		{"GET", "/v1/nothing", nil, 404, "no API route"},
		{"PATCH", p, nil, 404, "no API route"},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, k, c.body)
		if r.status != c.status || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("%s %s %v: %d %s, want %d containing %q", c.method, c.path, c.body, r.status, r.body, c.status, c.msg)
		}
	}
	// TTL was not changed by the rejected refreshes.
	if got := e.mustStatus(e.do("GET", p, k, nil), 200).json(t)["expires_at"]; got != sb.ExpiresAt {
		t.Fatalf("expires_at moved: %v -> %v", sb.ExpiresAt, got)
	}
}

func TestTeamIsolation(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	tm := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)
	b := tm["key"].(map[string]any)["key"].(string)
	if tm["key"].(map[string]any)["admin"] != false || tm["team"].(map[string]any)["name"] != "beta" {
		t.Fatalf("team answer %v", tm)
	}
	e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 409)

	sbA := e.create(a, map[string]any{"template": "base", "metadata": map[string]string{"owner": "a"}})
	missing := "sb_doesnotexist0000000"
	for _, c := range []struct {
		method, sub string
		body        any
	}{
		{"GET", "", nil},
		{"DELETE", "", nil},
		{"POST", "/exec", `{"cmd": "echo hi"}`},
		{"POST", "/ttl", `{"ttl_seconds": 60}`},
		{"GET", "/files?path=/etc/hostname", nil},
		{"PUT", "/files?path=/tmp/x", "data"},
		{"GET", "/files/list?path=/", nil},
		{"POST", "/files/mkdir", `{"path": "/x"}`},
	} {
		theirs := e.do(c.method, "/v1/sandboxes/"+sbA.ID+c.sub, b, c.body)
		absent := e.do(c.method, "/v1/sandboxes/"+missing+c.sub, b, c.body)
		if theirs.status != 404 || absent.status != 404 || theirs.errCode() != absent.errCode() ||
			strings.ReplaceAll(theirs.errMessage(), sbA.ID, "ID") != strings.ReplaceAll(absent.errMessage(), missing, "ID") {
			t.Errorf("%s %s: another team's sandbox answered %d %s; a missing one %d %s", c.method, c.sub,
				theirs.status, theirs.body, absent.status, absent.body)
		}
	}
	var l struct{ Sandboxes []SandboxView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes?state=all", b, nil), 200).body, &l)
	if len(l.Sandboxes) != 0 {
		t.Fatalf("team B lists team A's sandboxes: %v", l.Sandboxes)
	}
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes?metadata.owner=a", b, nil), 200).body, &l)
	if len(l.Sandboxes) != 0 {
		t.Fatalf("metadata filter crosses teams: %v", l.Sandboxes)
	}
	// Still alive for its owner.
	if e.mustStatus(e.do("GET", "/v1/sandboxes/"+sbA.ID, a, nil), 200).json(t)["state"] != "running" {
		t.Fatal("team B's kill reached team A's sandbox")
	}

	// Keys are team-scoped too, and B is not an admin.
	var keysA struct{ Keys []KeyView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/keys", a, nil), 200).body, &keysA)
	e.mustStatus(e.do("DELETE", "/v1/keys/"+keysA.Keys[0].ID, b, nil), 404)
	e.mustStatus(e.do("POST", "/v1/teams", b, map[string]string{"name": "gamma"}), 403)
	e.mustStatus(e.do("POST", "/v1/keys", b, map[string]any{"admin": true}), 403)
	var keysB struct{ Keys []KeyView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/keys", b, nil), 200).body, &keysB)
	if len(keysB.Keys) != 1 || keysB.Keys[0].Key != "" {
		t.Fatalf("team B keys %+v", keysB.Keys)
	}
}

func TestKeys(t *testing.T) {
	e := newEnv(t)
	r := e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]string{"name": "ci"}), 201).json(t)
	secret := r["key"].(string)
	if !strings.HasPrefix(secret, "pds_") || len(secret) != 36 || r["admin"] != false {
		t.Fatalf("key answer %v", r)
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes", secret, nil), 200)
	// The new key can mint keys for its team, not admin ones.
	e.mustStatus(e.do("POST", "/v1/keys", secret, nil), 201)
	var l struct{ Keys []KeyView }
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/keys", e.admin, nil), 200).body, &l)
	if len(l.Keys) != 3 {
		t.Fatalf("keys %+v", l.Keys)
	}
	for _, k := range l.Keys {
		if k.Key != "" || !strings.HasPrefix(k.Prefix, "pds_") || strings.Contains(string(e.do("GET", "/v1/keys", e.admin, nil).body), secret) {
			t.Fatalf("list leaks a secret: %+v", k)
		}
	}
	// A non-admin cannot revoke the admin key.
	var adminID string
	for _, k := range l.Keys {
		if k.Admin {
			adminID = k.ID
		}
	}
	e.mustStatus(e.do("DELETE", "/v1/keys/"+adminID, secret, nil), 403)
	e.mustStatus(e.do("DELETE", "/v1/keys/"+r["id"].(string), e.admin, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/keys/key_nope", e.admin, nil), 404)
	rr := e.mustStatus(e.do("GET", "/v1/sandboxes", secret, nil), 401)
	if !strings.Contains(rr.errMessage(), "revoked") {
		t.Fatalf("revoked: %s", rr.body)
	}
}

func TestCapacityAndPlacement(t *testing.T) {
	e := newEnv(t)
	e.agent.SetSlots(1)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.create(e.admin, map[string]any{"template": "base"})
	r := e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`)
	e.wantErr(r, 503, "capacity", "")

	// A second host with room takes the next sandboxes; placement spreads by free memory.
	b := e.newHost("host-b", "base")
	e.join(b)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	if sb.Host != "host-b" {
		t.Fatalf("placed on %s", sb.Host)
	}
	// code-interpreter only exists on host-a, which is full.
	r = e.do("POST", "/v1/sandboxes", e.admin, `{"template": "code-interpreter"}`)
	e.wantErr(r, 503, "capacity", "")
	if n := e.sandboxCount(); n != 2 {
		t.Fatalf("%d sandboxes after capacity errors", n)
	}
}

func TestHostErrorsAndRequestIDs(t *testing.T) {
	e := newEnv(t)
	e.agent.FailCreates(&agentclient.Error{Status: 500, Code: "internal", Message: "bake exploded"})
	r := e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`, "X-Request-Id", "my-trace-1")
	if r.status != 500 || r.errCode() != "internal" || r.header.Get("X-Request-Id") != "my-trace-1" ||
		!strings.Contains(r.errMessage(), "my-trace-1") || strings.Contains(string(r.body), "goroutine") {
		t.Fatalf("host failure: %d %v %s", r.status, r.header, r.body)
	}
	// A host that says "full" sends the caller a capacity error after trying the others.
	e.agent.FailCreates(&agentclient.Error{Status: 503, Code: "capacity", Message: "no free slot"})
	e.wantErr(e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`), 503, "capacity", "")
	e.agent.FailCreates(nil)
	if n := e.sandboxCount(); n != 0 {
		t.Fatalf("failed creates recorded %d sandboxes", n)
	}
	// A bad request id is replaced.
	r = e.do("GET", "/healthz", "", nil, "X-Request-Id", "bad id with spaces")
	if id := r.header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") || r.status != 200 {
		t.Fatalf("healthz %d %v", r.status, r.header)
	}
}

func TestReaper(t *testing.T) {
	e := newEnv(t)
	short := e.create(e.admin, map[string]any{"template": "base", "ttl_seconds": 5})
	long := e.create(e.admin, map[string]any{"template": "base", "ttl_seconds": 60})
	if n, err := e.srv.ReapOnce(context.Background()); n != 0 || err != nil {
		t.Fatalf("reaped early: %d %v", n, err)
	}
	e.clock.Add(6 * time.Second)
	if n, err := e.srv.ReapOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("reaped %d %v", n, err)
	}
	if st := e.mustStatus(e.do("GET", "/v1/sandboxes/"+short.ID, e.admin, nil), 200).json(t)["state"]; st != "killed" {
		t.Fatalf("expired sandbox is %v", st)
	}
	if got := e.agent.Running(); len(got) != 1 || got[0] != long.ID {
		t.Fatalf("agent still runs %v", got)
	}
	r := e.do("POST", "/v1/sandboxes/"+short.ID+"/exec", e.admin, `{"cmd": "echo hi"}`)
	if r.status != 409 || !strings.Contains(r.errMessage(), "ttl expired") {
		t.Fatalf("exec on reaped: %d %s", r.status, r.body)
	}
	// Refreshing the TTL keeps a sandbox past its first expiry.
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+long.ID+"/ttl", e.admin, `{"ttl_seconds": 600}`), 200)
	e.clock.Add(120 * time.Second)
	if n, _ := e.srv.ReapOnce(context.Background()); n != 0 {
		t.Fatal("reaped a refreshed sandbox")
	}
	if !strings.Contains(e.metricsText(), "pandastack_sandboxes_reaped_total 1") {
		t.Fatal("reap not counted")
	}
}

func (e *env) metricsText() string {
	e.t.Helper()
	return string(e.mustStatus(e.do("GET", "/metrics", "", nil), 200).body)
}

func TestHostDownMarksSandboxesLost(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	// A minute passes without heartbeats, but this scheduler has only just started: its heartbeat
	// view is not trustworthy yet, so nothing is marked.
	fresh := scheduler.New(scheduler.Config{Store: e.st, Logger: quietLogger(), HeartbeatTimeout: 10 * time.Second,
		Now: func() time.Time { return time.Now().Add(time.Minute) }})
	if err := fresh.CheckHosts(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, _ := e.st.GetHost(context.Background(), "host-a")
	if h.State != store.HostUp {
		t.Fatal("marked down during the start-up grace")
	}
	// One that has run for an hour marks the silent host down.
	afterGrace := scheduler.New(scheduler.Config{Store: e.st, Logger: quietLogger(), HeartbeatTimeout: 10 * time.Second,
		Now: clockFrom(time.Now().Add(-time.Hour), time.Now().Add(time.Minute))})
	if err := afterGrace.CheckHosts(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, _ = e.st.GetHost(context.Background(), "host-a")
	if h.State != store.HostDown {
		t.Fatalf("host is %s", h.State)
	}
	got := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200).json(t)
	if got["state"] != "lost" || !strings.Contains(got["error"].(string), "heartbeat") {
		t.Fatalf("sandbox on a down host: %v", got)
	}
	r := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", e.admin, `{"cmd": "echo hi"}`)
	if r.status != 409 || !strings.Contains(r.errMessage(), "lost") {
		t.Fatalf("exec on lost: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`); r.status != 503 {
		t.Fatalf("create with every host down: %d %s", r.status, r.body)
	}
	// The host comes back still running the VM: reconcile makes the sandbox running again.
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200).json(t)["state"]; st != "running" {
		t.Fatalf("after the host came back: %v", st)
	}
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", e.admin, `{"cmd": "echo hi"}`), 200)
}

// clockFrom returns a clock that answers first once (the scheduler's start), then rest.
func clockFrom(first time.Time, rest time.Time) func() time.Time {
	called := false
	return func() time.Time {
		if !called {
			called = true
			return first
		}
		return rest
	}
}

func TestUploadLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUploadBytes = 1024 })
	sb := e.create(e.admin, map[string]any{"template": "base"})
	p := "/v1/sandboxes/" + sb.ID + "/files?path=/tmp/f"
	e.mustStatus(e.do("PUT", p, e.admin, strings.Repeat("a", 1024)), 200)
	r := e.do("PUT", p, e.admin, strings.Repeat("a", 1025))
	e.wantErr(r, 413, "payload_too_large", "")
	// Chunked (no Content-Length): cut while streaming.
	r = e.do("PUT", p, e.admin, io.MultiReader(strings.NewReader(strings.Repeat("b", 1000)), strings.NewReader(strings.Repeat("b", 1000))))
	e.wantErr(r, 413, "payload_too_large", "")
	if got := e.mustStatus(e.do("GET", p, e.admin, nil), 200).body; len(got) != 1024 || got[0] != 'a' {
		t.Fatalf("file changed by a rejected upload: %d bytes", len(got))
	}
}

func TestRestartKeepsKeysAndSandboxes(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base", "metadata": map[string]string{"k": "v"}})
	e.stop()
	e.start()
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200).json(t)
	if got["state"] != "running" || got["metadata"].(map[string]any)["k"] != "v" {
		t.Fatalf("after restart: %v", got)
	}
	ex := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", e.admin, `{"cmd": "echo still here"}`), 200).json(t)
	if ex["stdout"] != "still here\n" {
		t.Fatalf("exec after restart: %v", ex)
	}
}

func TestReconcileMarksMissingSandboxesLost(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, map[string]any{"template": "base"})
	// The host lost the VM behind our back (e.g. the agent restarted without it).
	e.agent.Close()
	b := agenttest.New("host-a", agentToken, "base")
	defer b.Close()
	// Reconcile reads the host's URL from the store: re-register host-a at the new address.
	if err := e.sched.Register(context.Background(), scheduler.Registration{HostID: "host-a", URL: b.URL(), Token: agentToken,
		SlotsTotal: 8, MemMiBTotal: 8192, MemMiBFree: 8192, Templates: []agentclient.Template{{Name: "base", Baked: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	got := e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200).json(t)
	if got["state"] != "lost" {
		t.Fatalf("sandbox the host no longer has: %v", got)
	}
}

func TestInternalHostAPI(t *testing.T) {
	e := newEnv(t)
	reg := `{"host_id": "host-z", "url": "http://127.0.0.1:9", "token": "t", "slots_total": 4, "templates": [{"name": "base", "baked": true}]}`
	if r := e.do("POST", scheduler.RegisterPath, "wrong", reg); r.status != 401 {
		t.Fatalf("wrong cluster token: %d %s", r.status, r.body)
	}
	if r := e.do("POST", scheduler.HeartbeatPath, clusterToken, reg); r.status != 404 {
		t.Fatalf("heartbeat before register: %d %s", r.status, r.body)
	}
	e.mustStatus(e.do("POST", scheduler.RegisterPath, clusterToken, reg), 200)
	e.mustStatus(e.do("POST", scheduler.HeartbeatPath, clusterToken, reg), 200)
	h, err := e.st.GetHost(context.Background(), "host-z")
	if err != nil || h.State != store.HostUp || h.SlotsTotal != 4 {
		t.Fatalf("registered host %+v %v", h, err)
	}

	// The agent-side registrar, end to end over HTTP.
	b := agenttest.New("host-r", agentToken, "agent")
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- scheduler.RunRegistrar(ctx, scheduler.RegistrarConfig{ServerURL: e.hs.URL, ClusterToken: clusterToken,
			AgentURL: b.URL(), AgentToken: agentToken, Interval: 50 * time.Millisecond, Logger: quietLogger()})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if h, err := e.st.GetHost(context.Background(), "host-r"); err == nil && h.State == store.HostUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("registrar never registered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	// Its templates joined the catalog, and a sandbox of one lands on it.
	sb := e.create(e.admin, map[string]any{"template": "agent"})
	if sb.Host != "host-r" {
		t.Fatalf("placed on %s", sb.Host)
	}
	tl := e.mustStatus(e.do("GET", "/v1/templates/agent", e.admin, nil), 200).json(t)
	if tl["available"] != true || tl["baked"] != true {
		t.Fatalf("template %v", tl)
	}
	e.mustStatus(e.do("GET", "/v1/templates/nope", e.admin, nil), 404)
}

// TestMetrics: counters are this server's and move with each call; the store's gauges are read
// at most every storeGaugesEvery, whatever the number of scrapes, and leave killed rows out.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	a := e.create(e.admin, map[string]any{"template": "base"})
	e.do("GET", "/v1/sandboxes/sb_missing", e.admin, nil)
	want := func(m string, lines ...string) {
		t.Helper()
		for _, l := range lines {
			if !strings.Contains(m, l+"\n") {
				t.Errorf("metrics lack %q:\n%s", l, m)
			}
		}
	}
	want(e.metricsText(),
		`pandastack_sandboxes{state="running"} 1`,
		`pandastack_hosts{state="up"} 1`,
		`pandastack_sandbox_create_seconds_count 1`,
		`pandastack_sandbox_create_seconds_bucket{le="+Inf"} 1`,
		`pandastack_sandbox_kills_total 0`,
		`pandastack_placement_refusals_total{by="replica"} 0`,
		`pandastack_api_requests_total{code="201"} 1`,
		`pandastack_api_requests_total{code="404"} 1`,
		`# TYPE pandastack_sandbox_create_seconds histogram`,
	)
	// A second create: the counters move at once, the gauges are the read of a moment ago.
	e.create(e.admin, map[string]any{"template": "base"})
	want(e.metricsText(), `pandastack_sandbox_create_seconds_count 2`, `pandastack_sandboxes{state="running"} 1`)
	e.clock.Add(storeGaugesEvery)
	want(e.metricsText(), `pandastack_sandboxes{state="running"} 2`,
		fmt.Sprintf("pandastack_store_gauges_read_time_seconds %d", e.clock.Now().Unix()))
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+a.ID, e.admin, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+a.ID, e.admin, nil), 204) // killed already: not counted again
	want(e.metricsText(), `pandastack_sandbox_kills_total 1`, `pandastack_sandboxes{state="running"} 2`,
		`pandastack_api_requests_total{code="204"} 2`)
	e.clock.Add(storeGaugesEvery)
	m := e.metricsText()
	want(m, `pandastack_sandboxes{state="running"} 1`, `pandastack_sandbox_kills_total 1`)
	if strings.Contains(m, `state="killed"`) {
		t.Errorf("killed rows counted:\n%s", m)
	}
}

// TestCreateOnSilentHostIs503: a create whose hosts all fail to answer is a capacity answer
// (503, retry later), not an internal error.
func TestCreateOnSilentHostIs503(t *testing.T) {
	e := newEnv(t)
	e.agent.Close() // still up in the store, heard from just now
	r := e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`)
	e.wantErr(r, 503, "capacity", "")
	if n := e.sandboxCount(); n != 0 {
		t.Fatalf("%d sandboxes recorded", n)
	}
}
