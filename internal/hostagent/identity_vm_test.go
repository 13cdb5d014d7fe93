package hostagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// setIdentity rewrites the "identity" of a JSON record: version "" removes it (a record written
// before identities were), any other replaces the recorded VMM version.
func setIdentity(t *testing.T, path, version string) {
	t.Helper()
	var m map[string]any
	if err := layout.ReadJSON(path, &m); err != nil {
		t.Fatal(err)
	}
	if version == "" {
		delete(m, "identity")
	} else {
		m["identity"].(map[string]any)["version"] = version
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recordedVersion is the VMM version a JSON record holds ("" if none).
func recordedVersion(t *testing.T, path string) string {
	t.Helper()
	var r struct{ Identity struct{ Version string } }
	if err := layout.ReadJSON(path, &r); err != nil {
		t.Fatal(err)
	}
	return r.Identity.Version
}

// TestVMMIdentity: template bakes, snapshots and hibernated sandboxes record the VMM identity;
// a restore under another one is refused with a 409 naming both, a template baked under another
// is re-baked, and records without an identity (older agents) are taken as the current VMM's.
func TestVMMIdentity(t *testing.T) {
	h := newHarness(t, ownBakes) // it checks a re-bake
	cur := h.agent.rt.Identity()
	if cur.VMM != "qemu" || cur.Version == "" || cur.Machine != "microvm" || cur.CPU == "" || cur.Accel == "" {
		t.Fatalf("driver identity incomplete: %+v", cur)
	}
	sb := h.create().ID
	tmplFiles, _ := filepath.Glob(filepath.Join(h.agent.templatesDir(), "base-*", "template.json"))
	if len(tmplFiles) != 1 {
		t.Fatalf("template records: %v", tmplFiles)
	}
	tmplFile := tmplFiles[0]
	if v := recordedVersion(t, tmplFile); v != cur.Version {
		t.Fatalf("template.json identity version %q, want %q", v, cur.Version)
	}
	var snap hostapi.Snapshot
	if code := h.call("POST", "/v1/sandboxes/"+sb+"/snapshots", nil, &snap); code != 201 {
		t.Fatalf("snapshot: %d", code)
	}
	snapFile := filepath.Join(h.agent.snapshotsDir(), snap.ID, "snapshot.json")
	if snap.Identity != cur || recordedVersion(t, snapFile) != cur.Version {
		t.Fatalf("snapshot identity %+v, want %+v", snap.Identity, cur)
	}

	// A snapshot saved under another QEMU is refused, and nothing is started.
	const other = "0.0.1 (another build)"
	setIdentity(t, snapFile, other)
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &e); code != 409 || e.Error.Code != "vmm_mismatch" ||
		!strings.Contains(e.Error.Message, other) || !strings.Contains(e.Error.Message, cur.Version) {
		t.Fatalf("restore of a snapshot from another VMM: %d %+v", code, e)
	}
	if n := len(h.agent.List()); n != 1 {
		t.Fatalf("%d sandboxes after a refused restore, want 1", n)
	}
	// A snapshot without an identity is taken as this VMM's (and gets it written).
	setIdentity(t, snapFile, "")
	var restored hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &restored); code != 201 {
		t.Fatalf("restore of a snapshot without identity: %d", code)
	}
	if v := recordedVersion(t, snapFile); v != cur.Version {
		t.Fatalf("legacy snapshot.json got identity version %q, want %q", v, cur.Version)
	}
	h.call("DELETE", "/v1/sandboxes/"+restored.ID, nil, nil)

	// Hibernation: the sandbox record carries the identity of its memory snapshot.
	if code := h.call("POST", "/v1/sandboxes/"+sb+"/hibernate", nil, nil); code != 200 {
		t.Fatalf("hibernate: %d", code)
	}
	sbFile := filepath.Join(h.agent.sandboxesDir(), sb, "sandbox.json")
	if v := recordedVersion(t, sbFile); v != cur.Version {
		t.Fatalf("hibernated sandbox.json identity version %q, want %q", v, cur.Version)
	}
	var before hostapi.Template
	layout.ReadJSON(tmplFile, &before)
	// Edited while the agent runs (a stopped agent with no VMM unmounts the pool); it reads its
	// records again at start.
	setIdentity(t, sbFile, other)
	setIdentity(t, tmplFile, other)
	h.stop()
	h.start()

	// Waking under another VMM is refused; the sandbox stays hibernated (not failed).
	e = apiErr{}
	if code := h.call("POST", "/v1/sandboxes/"+sb+"/wake", nil, &e); code != 409 || e.Error.Code != "vmm_mismatch" ||
		!strings.Contains(e.Error.Message, other) || !strings.Contains(e.Error.Message, cur.Version) {
		t.Fatalf("wake under another VMM: %d %+v", code, e)
	}
	if got, _ := h.agent.Get(sb); got.State != sandbox.StateHibernated {
		t.Fatalf("after a refused wake: %s (%s), want hibernated", got.State, got.Error)
	}

	// A template baked under another VMM is re-baked on its next use.
	fresh := h.create()
	var after hostapi.Template
	layout.ReadJSON(tmplFile, &after)
	if after.Identity != cur || !after.BakedAt.After(before.BakedAt) {
		t.Fatalf("template not re-baked: identity %+v, baked at %v (before %v)", after.Identity, after.BakedAt, before.BakedAt)
	}
	if r := h.exec(fresh.ID, map[string]any{"cmd": "echo ok"}); r.Stdout != "ok\n" {
		t.Fatalf("sandbox of the re-baked template: %+v", r)
	}

	// A hibernated sandbox recorded without an identity is taken as this VMM's, and wakes.
	setIdentity(t, sbFile, "")
	h.stop()
	h.start()
	if code := h.call("POST", "/v1/sandboxes/"+sb+"/wake", nil, nil); code != 200 {
		t.Fatalf("wake of a legacy record: %d", code)
	}
	if r := h.exec(sb, map[string]any{"cmd": "echo ok"}); r.Stdout != "ok\n" {
		t.Fatalf("woken legacy sandbox: %+v", r)
	}
}
