package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxCode drives `sandbox code` against a scripted /code stream: code from stdin, output
// and text results printed, PNGs saved, an exception's traceback and exit status 1.
func TestSandboxCode(t *testing.T) {
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 20)...)
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb_1/code" || r.Header.Get("Accept") != "application/x-ndjson" {
			http.Error(w, "unexpected "+r.URL.Path, 400)
			return
		}
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &got)
		w.Header().Set("Content-Type", "application/x-ndjson")
		lines := []string{`{"stdout":"printed\n"}`, `{"result":{"png":"` + base64.StdEncoding.EncodeToString(png) + `","is_main_result":false}}`,
			`{"result":{"text":"42","html":"<b>42</b>","is_main_result":true}}`}
		if strings.Contains(got["code"].(string), "raise") {
			lines = append(lines, `{"error":{"name":"ValueError","value":"bad","traceback":"Traceback: ValueError: bad"}}`)
		}
		io.WriteString(w, strings.Join(append(lines, `{"end":{"execution_count":1,"duration_ms":3}}`), "\n")+"\n")
	}))
	defer srv.Close()
	t.Setenv("PANDASTACK_BASE_URL", srv.URL)
	t.Setenv("PANDASTACK_API_KEY", "pds_test")
	dir := t.TempDir()
	out, stderr, err := run(t, "plot()\n6 * 7\n", "sandbox", "code", "--save-images", dir, "--context", "c1", "sb_1", "-")
	if err != nil || out != "printed\n42\n" || !strings.Contains(stderr, "image-1.png") {
		t.Fatalf("out %q stderr %q err %v", out, stderr, err)
	}
	if got["code"] != "plot()\n6 * 7\n" || got["context_id"] != "c1" {
		t.Fatalf("request: %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "image-1.png")); err != nil || !bytes.Equal(b, png) {
		t.Fatalf("saved image: %v", err)
	}
	_, stderr, err = run(t, "", "sandbox", "code", "sb_1", "raise ValueError('bad')")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(stderr, "Traceback: ValueError: bad") {
		t.Fatalf("exception: %v %q", err, stderr)
	}
}

// TestSandboxCodeContexts drives `sandbox code-context create|list|delete` and `sandbox code
// --language` against a scripted API: the requests they send and what they print.
func TestSandboxCodeContexts(t *testing.T) {
	var calls []string
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls = append(calls, r.Method+" "+r.URL.Path)
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		bodies = append(bodies, body)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/sandboxes/sb_1/code/contexts":
			json.NewEncoder(w).Encode(map[string]string{"id": "ctx1", "language": "javascript", "cwd": body["cwd"].(string)})
		case "GET /v1/sandboxes/sb_1/code/contexts":
			io.WriteString(w, `{"contexts":[{"id":"default","language":"python","cwd":"/home/user"},{"id":"ctx1","language":"javascript","cwd":"/tmp"}]}`)
		case "DELETE /v1/sandboxes/sb_1/code/contexts/ctx1":
			w.WriteHeader(204)
		case "DELETE /v1/sandboxes/sb_1/code/contexts/nosuch":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no code context nosuch in this sandbox"}}`)
		case "POST /v1/sandboxes/sb_1/code":
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"result":{"text":"[ 2, 4 ]","is_main_result":true}}`+"\n"+`{"end":{"execution_count":1,"duration_ms":1}}`+"\n")
		default:
			http.Error(w, "unexpected", 400)
		}
	}))
	defer srv.Close()
	t.Setenv("PANDASTACK_BASE_URL", srv.URL)
	t.Setenv("PANDASTACK_API_KEY", "pds_test")

	out := mustRun(t, "", "sandbox", "code-context", "create", "sb_1", "--language", "js", "--cwd", "/tmp")
	if !strings.Contains(out, "ctx1") || !strings.Contains(out, "javascript") || bodies[0]["language"] != "js" || bodies[0]["cwd"] != "/tmp" {
		t.Fatalf("create: %q %v", out, bodies[0])
	}
	out = mustRun(t, "", "sandbox", "code-context", "list", "sb_1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(lines[0], "LANGUAGE") || !strings.Contains(lines[2], "ctx1") {
		t.Fatalf("list:\n%s", out)
	}
	var listed []map[string]string
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "code-context", "list", "--json", "sb_1")), &listed); err != nil || len(listed) != 2 || listed[1]["language"] != "javascript" {
		t.Fatalf("list --json: %v %v", listed, err)
	}
	if out := mustRun(t, "", "sandbox", "code-context", "rm", "sb_1", "ctx1"); out != "deleted ctx1\n" {
		t.Fatalf("delete: %q", out)
	}
	if _, _, err := run(t, "", "sandbox", "code-context", "delete", "sb_1", "nosuch"); err == nil || !strings.Contains(err.Error(), "no code context nosuch") {
		t.Fatalf("delete of an unknown context: %v", err)
	}
	if out := mustRun(t, "", "sandbox", "code", "--language", "js", "sb_1", "[1, 2].map((x) => x * 2)"); out != "[ 2, 4 ]\n" || bodies[len(bodies)-1]["language"] != "js" {
		t.Fatalf("code --language js: %q %v", out, bodies[len(bodies)-1])
	}
	want := []string{"POST /v1/sandboxes/sb_1/code/contexts", "GET /v1/sandboxes/sb_1/code/contexts", "GET /v1/sandboxes/sb_1/code/contexts",
		"DELETE /v1/sandboxes/sb_1/code/contexts/ctx1", "DELETE /v1/sandboxes/sb_1/code/contexts/nosuch", "POST /v1/sandboxes/sb_1/code"}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("calls: %v", calls)
	}
}
