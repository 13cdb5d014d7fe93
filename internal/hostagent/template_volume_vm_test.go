package hostagent

import (
	"context"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// A template baked with a data volume: its build step and start command write to the volume, and
// every sandbox of it restores with its own copy of that volume, mounted in slot 0. The bake is
// published with its data volume: a second host pulls it (no build, no bake) and its sandboxes
// have the same volume.
func TestTemplateDataVolume(t *testing.T) {
	t.Parallel()
	const dir = testenv.VolumeTemplatePath
	url := "file://" + t.TempDir()
	withTemplate := func(c *Config) {
		c.Templates = map[string]template.Spec{testenv.VolumeTemplateName: testenv.VolumeTemplate()}
		c.BlobStore = url
	}
	h := newHarness(t, withTemplate)
	create := func(h *harness) hostapi.Sandbox {
		t.Helper()
		var raw []byte
		if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": testenv.VolumeTemplateName}, &raw); code != 201 {
			t.Fatalf("create from the template: %d %s", code, raw)
		}
		var sb hostapi.Sandbox
		jsonInto(t, raw, &sb)
		if len(sb.Volumes) != 1 || sb.Volumes[0].MountPath != dir || sb.Volumes[0].ReadOnly {
			t.Fatalf("volumes of a sandbox of the template: %+v", sb.Volumes)
		}
		return sb
	}
	read := func(h *harness, id string) string {
		t.Helper()
		r := h.exec(id, map[string]any{"cmd": "grep -c ' " + dir + " ext4 ' /proc/mounts; cat " + dir + "/built " + dir + "/started; cat " + dir + "/w 2>/dev/null || echo no-w"})
		if r.ExitCode != 0 {
			t.Fatalf("read in %s: %+v", id, r)
		}
		return strings.ReplaceAll(r.Stdout, "\n", " ")
	}
	a, b := create(h), create(h)
	if a.Volumes[0].VolumeID == b.Volumes[0].VolumeID {
		t.Fatalf("two sandboxes share volume %s", a.Volumes[0].VolumeID)
	}
	for _, sb := range []hostapi.Sandbox{a, b} {
		if got, want := read(h, sb.ID), "1 built started no-w "; got != want {
			t.Errorf("%s reads %q, want %q (mounted once, the build's and the start's files)", sb.ID, got, want)
		}
	}
	if r := h.exec(a.ID, map[string]any{"cmd": "echo mine > " + dir + "/w && sync"}); r.ExitCode != 0 {
		t.Fatalf("write in %s: %+v", a.ID, r)
	}
	if got := read(h, b.ID); got != "1 built started no-w " {
		t.Errorf("after a write in %s, %s reads %q", a.ID, b.ID, got)
	}
	if got := read(h, a.ID); got != "1 built started mine " {
		t.Errorf("%s reads %q after its write", a.ID, got)
	}
	var tl struct{ Templates []hostapi.Template }
	h.call("GET", "/v1/templates", nil, &tl)
	for _, tm := range tl.Templates {
		if tm.Name == testenv.VolumeTemplateName && (len(tm.Volumes) != 1 || tm.Volumes[0].MountPath != dir || tm.Volumes[0].SizeMiB != 64) {
			t.Errorf("template's volumes %+v", tm.Volumes)
		}
	}
	// The copies are volumes of this host like any other; other volumes cannot be added.
	var vl hostapi.VolumeList
	h.call("GET", "/v1/volumes", nil, &vl)
	listed := map[string]string{}
	for _, v := range vl.Volumes {
		if len(v.Attachments) == 1 {
			listed[v.ID] = v.Attachments[0].SandboxID
		}
	}
	if listed[a.Volumes[0].VolumeID] != a.ID || listed[b.Volumes[0].VolumeID] != b.ID {
		t.Errorf("volumes listed %+v, want %s on %s and %s on %s", listed, a.Volumes[0].VolumeID, a.ID, b.Volumes[0].VolumeID, b.ID)
	}
	if code := h.call("POST", "/v1/volumes", map[string]any{"id": "vol_extra", "size_mib": 16}, nil); code != 201 {
		t.Fatalf("create volume: %d", code)
	}
	// Another volume attached beside the copy: in the next slot, mounted where asked, the copy
	// as before; never at (or inside, or above) the copy's path.
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": testenv.VolumeTemplateName,
		"volumes": []map[string]any{{"volume_id": "vol_extra", "mount_path": dir}}}, &e); code != 400 {
		t.Errorf("create from the template with another volume at its data volume's path: %d %+v, want 400", code, e)
	}
	var extraRaw []byte
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": testenv.VolumeTemplateName,
		"volumes": []map[string]any{{"volume_id": "vol_extra", "mount_path": "/data"}}}, &extraRaw); code != 201 {
		t.Fatalf("create from the template with another volume: %d %s", code, extraRaw)
	}
	var extra hostapi.Sandbox
	jsonInto(t, extraRaw, &extra)
	if len(extra.Volumes) != 2 || extra.Volumes[0].MountPath != dir || extra.Volumes[1].VolumeID != "vol_extra" || extra.Volumes[1].MountPath != "/data" {
		t.Fatalf("volumes of a sandbox of the template with another one: %+v", extra.Volumes)
	}
	if got := read(h, extra.ID); got != "1 built started no-w " {
		t.Errorf("%s (another volume attached) reads %q", extra.ID, got)
	}
	if r := h.exec(extra.ID, map[string]any{"cmd": "grep -c ' /data ext4 ' /proc/mounts && echo x > /data/f && sync"}); r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "1" {
		t.Fatalf("the attached volume in %s: %+v", extra.ID, r)
	}
	if code := h.call("DELETE", "/v1/sandboxes/"+extra.ID, nil, nil); code != 204 {
		t.Fatalf("kill %s: %d", extra.ID, code)
	}
	if code := h.call("DELETE", "/v1/volumes/"+extra.Volumes[0].VolumeID, nil, nil); code != 204 {
		t.Errorf("delete the copy of %s: %d", extra.ID, code)
	}
	// A snapshot of a sandbox of the template copies its volume as of then (vol5's path).
	var snap hostapi.Snapshot
	if code := h.call("POST", "/v1/sandboxes/"+a.ID+"/snapshots", nil, &snap); code != 201 || len(snap.Volumes) != 1 {
		t.Fatalf("snapshot: %d %+v", code, snap.Volumes)
	}
	var raw []byte
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &raw); code != 201 {
		t.Fatalf("restore: %d %s", code, raw)
	}
	var r hostapi.Sandbox
	jsonInto(t, raw, &r)
	if got := read(h, r.ID); got != "1 built started mine " {
		t.Errorf("restore of a snapshot of %s reads %q", a.ID, got)
	}
	// Killed, the sandboxes let go of their copies, which stay (volumes outlive sandboxes).
	for _, id := range []string{a.ID, b.ID, r.ID} {
		if code := h.call("DELETE", "/v1/sandboxes/"+id, nil, nil); code != 204 {
			t.Fatalf("kill %s: %d", id, code)
		}
	}
	for _, id := range []string{a.Volumes[0].VolumeID, b.Volumes[0].VolumeID} {
		var v hostapi.Volume
		if code := h.call("GET", "/v1/volumes/"+id, nil, &v); code != 200 || len(v.Attachments) != 0 {
			t.Errorf("volume %s after its sandbox's kill: %d %+v", id, code, v)
		}
		if code := h.call("DELETE", "/v1/volumes/"+id, nil, nil); code != 204 {
			t.Errorf("delete volume %s: %d", id, code)
		}
	}

	// A second host with an empty image cache pulls the published bake, data volume included:
	// its sandboxes read the build's and the start's files on their own copies.
	other := newHarness(t, func(c *Config) { withTemplate(c); c.ImageCacheDir = t.TempDir() })
	var said strings.Builder
	if _, err := other.agent.EnsureTemplate(context.Background(), testenv.VolumeTemplateName, func(s string) { said.WriteString(s + "\n") }); err != nil {
		t.Fatal(err)
	}
	if out := said.String(); !strings.Contains(out, "pulled template") || strings.Contains(out, "image:") {
		t.Fatalf("the second host did not come from a pull:\n%s", out)
	}
	if got := read(other, create(other).ID); got != "1 built started no-w " {
		t.Errorf("a sandbox of the pulled template reads %q", got)
	}
}
