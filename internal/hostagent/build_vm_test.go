package hostagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// buildEvents posts a spec to POST /v1/templates and returns the NDJSON events.
func buildEvents(t *testing.T, h *harness, spec map[string]any) (progress []string, final map[string]any) {
	t.Helper()
	data, _ := json.Marshal(spec)
	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/templates", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		return nil, e
	}
	testenv.NDJSON(t, resp.Body, func(ev map[string]any) {
		if p, ok := ev["progress"].(string); ok {
			progress = append(progress, p)
		} else {
			final = ev
		}
	})
	return progress, final
}

func (h *harness) templateNames() map[string]hostapi.Template {
	var out struct{ Templates []hostapi.Template }
	h.call("GET", "/v1/templates", nil, &out)
	m := map[string]hostapi.Template{}
	for _, t := range out.Templates {
		m[t.Name] = t
	}
	return m
}

// TestTemplateBuild builds a spec end to end: files and steps in the build VM, a service started
// before the snapshot and its ready check, env, then sandboxes restored from it; and the ways a
// build fails, each leaving nothing registered.
func TestTemplateBuild(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.PreparedTemplates = 1 })

	// base carries the runtimes the catalog promises (Bun's install script ran in the build VM).
	sb := h.create()
	r := h.exec(sb.ID, map[string]any{"cmd": "python3 --version && node --version && go version && bun --version && git --version && gcc --version | head -1"})
	if r.ExitCode != 0 {
		t.Fatalf("base runtimes: exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	t.Logf("base: %s", strings.ReplaceAll(r.Stdout, "\n", " | "))
	h.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)

	spec := map[string]any{
		"name": "web-demo", "from": "base",
		"files": []map[string]any{
			{"path": "/srv/app/index.html", "content": "hello-from-template\n"},
			{"path": "/work/notes.txt", "content": "mine", "user": "user", "mode": "0600"},
		},
		// The nonce makes this build new to the content-addressed cache.
		"steps": []string{"echo building as $(id -u) " + rand.Text() + "; id -u > /srv/app/builder-uid; cp /srv/app/index.html /srv/app/copy.html"},
		"env":   map[string]string{"GREETING": "hi-there"},
		"start": "cd /srv/app && exec python3 -m http.server 8080",
		"ready": "curl -sf http://127.0.0.1:8080/copy.html",
	}
	progress, final := buildEvents(t, h, spec)
	log := strings.Join(progress, "\n")
	if final["template"] == nil {
		t.Fatalf("build failed: %v\n%s", final, log)
	}
	for _, want := range []string{"step 1/1", "building as 0", "ready check passed", "snapshot saved"} {
		if !strings.Contains(log, want) {
			t.Errorf("build log lacks %q:\n%s", want, log)
		}
	}
	// The same spec again is a cache hit: no build VM, no bake.
	progress, final = buildEvents(t, h, spec)
	if final["template"] == nil || strings.Contains(strings.Join(progress, "\n"), "step 1/1") {
		t.Errorf("rebuilding the same spec should hit the cache: %v\n%s", final, strings.Join(progress, "\n"))
	}
	info := h.templateNames()["web-demo"]
	if !info.Baked || !info.Built || info.BakeMS <= 0 || info.SizeBytes <= 0 {
		t.Errorf("template list entry: %+v", info)
	}
	for i := 0; i < 2; i++ {
		var sb hostapi.Sandbox
		if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "web-demo"}, &sb); code != 201 {
			t.Fatalf("create from built template: %d", code)
		}
		// The service was started before the snapshot: it answers at once, no start-up.
		r := h.exec(sb.ID, map[string]any{"cmd": "curl -s http://127.0.0.1:8080/index.html; echo $GREETING; cat /srv/app/builder-uid; stat -c '%U %a' /work/notes.txt"})
		want := "hello-from-template\nhi-there\n0\nuser 600\n"
		if r.Stdout != want {
			t.Errorf("sandbox %d of the built template: got %q, want %q (stderr %q)", i, r.Stdout, want, r.Stderr)
		}
		if i == 0 {
			// In use: the template cannot be deleted.
			var e apiErr
			if code := h.call("DELETE", "/v1/templates/web-demo", nil, &e); code != 409 {
				t.Errorf("delete while used: %d %+v", code, e)
			}
		}
		h.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	}
	// The built spec survives an agent restart.
	h.stop()
	h.start()
	if got := h.templateNames()["web-demo"]; !got.Built {
		t.Errorf("after restart the built template is gone: %+v", got)
	}
	// A create prepares the template's next VMM; deleting the template ends it.
	var last hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "web-demo"}, &last); code != 201 {
		t.Fatalf("create from built template after restart: %d", code)
	}
	h.call("DELETE", "/v1/sandboxes/"+last.ID, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.agent.WaitPrepared(ctx, "web-demo"); err != nil {
		t.Fatal(err)
	}
	prepared := h.agent.PreparedVMMs()
	if len(prepared) != 1 {
		t.Fatalf("prepared VMMs after a create of web-demo: %v, want one", prepared)
	}
	if code := h.call("DELETE", "/v1/templates/web-demo", nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	for name, pid := range prepared {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(st), "qemu") {
			t.Errorf("VMM %s (pid %d) prepared for the deleted template still runs", name, pid)
		}
	}
	if left := h.agent.PreparedVMMs(); len(left) != 0 {
		t.Errorf("prepared VMMs after the template's deletion: %v", left)
	}
	if _, ok := h.templateNames()["web-demo"]; ok {
		t.Errorf("deleted template still listed")
	}
	if code := h.call("DELETE", "/v1/templates/base", nil, nil); code != 409 {
		t.Errorf("deleting a catalog template: %d, want 409", code)
	}

	failures := []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"failing-step", map[string]any{"from": "base", "steps": []string{"true", "echo about-to-fail; exit 3"}},
			[]string{"step 2/2", "exit code 3", "about-to-fail"}},
		{"never-ready", map[string]any{"from": "base", "start": "sleep 1000", "ready": "test -e /nope", "ready_timeout_seconds": 3},
			[]string{"did not pass within 3s"}},
		{"unknown-package", map[string]any{"from": "debian:trixie", "apt": []string{"pandastack-no-such-package"}},
			[]string{"pandastack-no-such-package"}},
		{"disk-too-small", map[string]any{"from": "base", "disk_mib": 1024},
			[]string{"disk_mib 1024 is too small"}},
	}
	for _, f := range failures {
		f.spec["name"] = f.name
		_, final := buildEvents(t, h, f.spec)
		e, _ := final["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if e == nil || e["code"] != "build_failed" {
			t.Errorf("%s: want a build_failed error, got %v", f.name, final)
			continue
		}
		for _, w := range f.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error lacks %q: %s", f.name, w, msg)
			}
		}
		if _, ok := h.templateNames()[f.name]; ok {
			t.Errorf("%s: a failed build left the template registered", f.name)
		}
	}
	// Bad specs are refused before anything runs.
	var e apiErr
	if code := h.call("POST", "/v1/templates", map[string]any{"name": "Bad Name", "from": "base"}, &e); code != 400 {
		t.Errorf("bad name: %d", code)
	}
	if code := h.call("POST", "/v1/templates", map[string]any{"name": "x", "from": "base", "stepz": []string{"true"}}, &e); code != 400 || !strings.Contains(e.Error.Message, "stepz") {
		t.Errorf("unknown field: %d %s", code, e.Error.Message)
	}
	if code := h.call("POST", "/v1/templates", map[string]any{"name": "base", "from": "debian:trixie"}, &e); code != 409 {
		t.Errorf("catalog name: %d", code)
	}
}
