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
