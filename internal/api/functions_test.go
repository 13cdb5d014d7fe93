package api

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Functions without VMs: a deploy's bad input is refused before anything is baked. The
// deploys and invocations on real microVMs are in functions_e2e_test.go.

// zipBundle is a .zip of files (name → content).
func zipBundle(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarGzBundle is a .tar.gz of files; a name ending in "@" is written as a symlink.
func tarGzBundle(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if n, ok := strings.CutSuffix(name, "@"); ok {
			h = &tar.Header{Name: n, Linkname: content, Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(content))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// deployBody is a deploy's multipart body and its content type.
func deployBody(t *testing.T, spec any, bundle []byte) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if spec != nil {
		w, _ := mw.CreateFormField("spec")
		if s, ok := spec.(string); ok {
			w.Write([]byte(s))
		} else {
			json.NewEncoder(w).Encode(spec)
		}
	}
	if bundle != nil {
		w, _ := mw.CreateFormFile("bundle", "bundle")
		w.Write(bundle)
	}
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func TestDeployRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	py := map[string]any{"name": "hello", "runtime": "python3", "handler": "main.handler"}
	good := zipBundle(t, map[string]string{"main.py": "def handler(e, c):\n    return e\n"})
	for _, c := range []struct {
		name   string
		spec   any
		bundle []byte
		code   int
		want   string
	}{
		{"not an archive", py, []byte("print('hi')\n"), 400, "not a .zip or .tar.gz"},
		{"corrupt zip", py, []byte("PK\x03\x04garbage"), 400, "not a valid .zip"},
		{"handler missing", py, zipBundle(t, map[string]string{"app.py": "x = 1\n"}), 400, "needs main.py or main/__init__.py"},
		{"node handler missing", map[string]any{"name": "n", "runtime": "node", "handler": "index.handler"},
			tarGzBundle(t, map[string]string{"main.py": ""}), 400, "index.mjs or index.js or index.cjs"},
		{"path escapes", py, tarGzBundle(t, map[string]string{"main.py": "", "../evil.py": "x"}), 400, "leaves the bundle"},
		{"symlink", py, tarGzBundle(t, map[string]string{"main.py": "", "link@": "/etc/passwd"}), 400, "not a regular file"},
		{"too large", py, append([]byte("PK\x03\x04"), make([]byte, 33<<20)...), 413, "larger than"},
		{"no bundle", py, nil, 400, "part `bundle`"},
		{"no spec", nil, good, 400, "part `spec`"},
		{"spec not JSON", "{", good, 400, "spec is not valid JSON"},
		{"unknown spec field", `{"name":"a","runtime":"python3","handler":"main.handler","nope":1}`, good, 400, "nope"},
		{"bad runtime", map[string]any{"name": "a", "runtime": "ruby", "handler": "main.handler"}, good, 400, "runtime must be"},
		{"bad name", map[string]any{"name": "Bad_Name", "runtime": "python3", "handler": "main.handler"}, good, 400, "name must be"},
		{"bad handler", map[string]any{"name": "a", "runtime": "python3", "handler": "main"}, good, 400, "handler must be"},
		{"bad timeout", map[string]any{"name": "a", "runtime": "python3", "handler": "main.handler", "timeout_seconds": 901}, good, 400, "timeout_seconds"},
		{"too much memory", map[string]any{"name": "a", "runtime": "python3", "handler": "main.handler", "memory_mib": 1 << 20}, good, 400, "memory_mib"},
		{"bad env", map[string]any{"name": "a", "runtime": "python3", "handler": "main.handler", "env": map[string]string{"1X": "y"}}, good, 400, "env name"},
		{"secret in env", map[string]any{"name": "a", "runtime": "python3", "handler": "main.handler", "env": map[string]string{"K": "1"},
			"secrets": map[string]string{"K": "2"}}, good, 400, "both in env and in secrets"},
	} {
		body, ct := deployBody(t, c.spec, c.bundle)
		r := e.do("POST", "/v1/functions", e.admin, body, "Content-Type", ct)
		if r.status != c.code || !strings.Contains(r.errMessage(), c.want) {
			t.Errorf("%s: %d %.300s, want %d naming %q", c.name, r.status, r.body, c.code, c.want)
		}
	}
	if r := e.do("POST", "/v1/functions", e.admin, `{"name": "x"}`); r.status != 400 || !strings.Contains(r.errMessage(), "multipart/form-data") {
		t.Errorf("JSON deploy: %d %s", r.status, r.body)
	}
	if n := e.sandboxCount(); n != 0 {
		t.Errorf("%d sandboxes made by refused deploys", n)
	}
	list := e.mustStatus(e.do("GET", "/v1/functions", e.admin, nil), 200).json(t)["functions"].([]any)
	if len(list) != 0 {
		t.Errorf("refused deploys left functions: %v", list)
	}
	for _, p := range []string{"/v1/functions/fn_nope", "/v1/functions/fn_nope/versions", "/v1/functions/fn_nope/runs", "/v1/functions/fn_nope/runs/run_x"} {
		if r := e.do("GET", p, e.admin, nil); r.status != 404 {
			t.Errorf("GET %s: %d", p, r.status)
		}
	}
	if r := e.do("POST", "/v1/functions/fn_nope/invoke", e.admin, `{"payload": 1}`); r.status != 404 {
		t.Errorf("invoke missing: %d", r.status)
	}
	if r := e.do("POST", "/v1/functions/fn_nope/invoke", e.admin, `{"payload": "`+strings.Repeat("x", 2<<20)+`"}`); r.status != 413 {
		t.Errorf("invoke with a 2 MiB payload: %d %.200s", r.status, r.body)
	}
}

// TestHTTPTriggerRouting: <function id>.fn.<domain> goes to the trigger (a missing function is
// a JSON 404), other hosts to the API or the port proxy as before.
func TestHTTPTriggerRouting(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	for _, c := range []struct {
		host string
		code int
		want string
	}{
		{"fn_nope.fn.localhost", 404, "function fn_nope not found"},
		{"FN_NOPE.fn.localhost:8080", 404, "function fn_nope not found"},
		{"fn_nope.fn.example.com", 404, "no API route"},
	} {
		req, _ := http.NewRequest("GET", e.hs.URL+"/x", nil)
		req.Host = c.host
		res, b := testenv.Send(t, req)
		if r := (resp{res.StatusCode, res.Header, b}); r.status != c.code || !strings.Contains(r.errMessage(), c.want) {
			t.Errorf("Host %s: %d %s", c.host, r.status, r.body)
		}
	}
}

// TestOwnedHiddenFromLists: the sandboxes and snapshots the functions service makes for itself
// (store.OwnerFunction) stay out of the team's plain lists (GET /v1/sandboxes, /v1/snapshots)
// while the team's own are listed; by id they are still the team's.
func TestOwnedHiddenFromLists(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	own := e.create(e.admin, map[string]any{"template": "base"})
	team := e.record(own.ID).TeamID
	owned, err := e.srv.svc.Create(ctx, team, sandboxes.CreateParams{Template: "base", AgentTemplate: "base", Owner: store.OwnerFunction})
	if err != nil {
		t.Fatal(err)
	}
	var snaps []string // the team's, then the owned one
	for _, id := range []string{own.ID, owned.ID} {
		sn, err := e.srv.svc.Snapshot(ctx, e.record(id))
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, sn.ID)
	}
	var sp v1.SandboxPage
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/sandboxes", e.admin, nil), 200).body, &sp); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range sp.Sandboxes {
		ids = append(ids, sb.ID)
	}
	if !slices.Equal(ids, []string{own.ID}) {
		t.Errorf("GET /v1/sandboxes: %v, want only the team's own %s (not the function's %s)", ids, own.ID, owned.ID)
	}
	var np v1.SnapshotPage
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/snapshots", e.admin, nil), 200).body, &np); err != nil {
		t.Fatal(err)
	}
	ids = nil
	for _, sn := range np.Snapshots {
		ids = append(ids, sn.ID)
	}
	if !slices.Equal(ids, snaps[:1]) {
		t.Errorf("GET /v1/snapshots: %v, want only the team's own %s (not the function's %s)", ids, snaps[0], snaps[1])
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+owned.ID, e.admin, nil), 200)
	e.mustStatus(e.do("GET", "/v1/snapshots/"+snaps[1], e.admin, nil), 200)
}
