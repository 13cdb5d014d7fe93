package api

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/sandboxes"
)

func (e *env) createVolume(key string, body any) VolumeView {
	e.t.Helper()
	return decodeAs[VolumeView](e.t, e.mustStatus(e.do("POST", "/v1/volumes", key, body), 201))
}

func (e *env) getVolume(key, id string) VolumeView {
	e.t.Helper()
	r := e.mustStatus(e.do("GET", "/v1/volumes/"+id, key, nil), 200)
	var v VolumeView
	if err := json.Unmarshal(r.body, &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func vols(specs ...map[string]any) []map[string]any { return specs }

func (e *env) listVolumes(key string) []VolumeView {
	e.t.Helper()
	var list struct{ Volumes []VolumeView }
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/volumes", key, nil), 200).body, &list); err != nil {
		e.t.Fatal(err)
	}
	return list.Volumes
}

func TestVolumeCalls(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	v := e.createVolume(k, map[string]any{"size_mib": 64, "name": "data"})
	if !strings.HasPrefix(v.ID, "vol_") || v.Name != "data" || v.SizeMiB != 64 || v.HostID != "host-a" || v.CreatedAt == "" ||
		v.Attachments == nil || len(v.Attachments) != 0 {
		t.Fatalf("created %+v", v)
	}
	raw := e.mustStatus(e.do("GET", "/v1/volumes/"+v.ID, k, nil), 200).json(t)
	if _, ok := raw["attachments"].([]any); !ok {
		t.Fatalf("attachments is not an array: %v", raw)
	}
	if got := e.agent.Volumes(); !reflect.DeepEqual(got, []string{v.ID}) {
		t.Fatalf("agent volumes %v", got)
	}
	e.clock.Add(time.Second)
	unnamed := e.createVolume(k, `{"size_mib": 1}`)
	if unnamed.Name != "" || unnamed.SizeMiB != 1 {
		t.Fatalf("unnamed %+v", unnamed)
	}
	if list := e.listVolumes(k); len(list) != 2 || list[0].ID != unnamed.ID || list[1].ID != v.ID {
		t.Fatalf("list %+v", list)
	}
	if got := e.getVolume(k, v.ID); !reflect.DeepEqual(got, v) {
		t.Fatalf("get %+v, want %+v", got, v)
	}

	// Bad input makes nothing.
	for name, c := range map[string]struct {
		body string
		msg  string
	}{
		"no size":      {`{}`, "size_mib is required"},
		"zero":         {`{"size_mib": 0}`, "between 1 and 1048576"},
		"negative":     {`{"size_mib": -1}`, "between 1 and 1048576"},
		"too big":      {`{"size_mib": 1048577}`, "between 1 and 1048576"},
		"string size":  {`{"size_mib": "64"}`, "size_mib must be an integer"},
		"float size":   {`{"size_mib": 1.5}`, "size_mib must be an integer"},
		"name type":    {`{"size_mib": 1, "name": 5}`, "name must be a string"},
		"name long":    {`{"size_mib": 1, "name": "` + strings.Repeat("n", 65) + `"}`, "at most 64"},
		"unknown":      {`{"size_mib": 1, "sise": 2}`, `unknown field "sise"`},
		"empty body":   {``, "empty"},
		"not object":   {`[1]`, "JSON object"},
		"control name": {`{"size_mib": 1, "name": "a\u0001"}`, "control"},
	} {
		r := e.do("POST", "/v1/volumes", k, c.body)
		if r.status != 400 || r.errCode() != "invalid_request" || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("%s: %d %s, want 400 containing %q", name, r.status, r.body, c.msg)
		}
	}
	if n := len(e.agent.Volumes()); n != 2 {
		t.Fatalf("bad input made volumes: %d", n)
	}
	e.wantErr(e.do("GET", "/v1/volumes?limit=1", k, nil), 400, "invalid_request", "unknown query parameter")

	// Resize: grow only.
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 32}`), 400, "invalid_request", "only grow")
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{}`), 400, "invalid_request", "size_mib is required")
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 2000000}`), 400, "invalid_request", "between 1 and")
	e.wantErr(e.do("POST", "/v1/volumes/vol_nope/resize", k, `{"size_mib": 128}`), 404, "not_found", "volume vol_nope not found")
	if same := e.mustStatus(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 64}`), 200).json(t); same["size_mib"] != 64.0 {
		t.Fatalf("same size %v", same)
	}
	grown := e.mustStatus(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 128}`), 200).json(t)
	if grown["size_mib"] != 128.0 || e.getVolume(k, v.ID).SizeMiB != 128 {
		t.Fatalf("grown %v", grown)
	}
	c := agentclient.New(e.agent.URL(), agentToken)
	if av, err := c.GetVolume(context.Background(), v.ID); err != nil || av.SizeMiB != 128 {
		t.Fatalf("agent's volume %+v %v", av, err)
	}

	// Delete: 204, again 204, then gone everywhere.
	e.mustStatus(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 204)
	e.wantErr(e.do("GET", "/v1/volumes/"+v.ID, k, nil), 404, "not_found", "volume "+v.ID+" not found")
	e.wantErr(e.do("DELETE", "/v1/volumes/vol_nope", k, nil), 404, "not_found", "volume vol_nope not found")
	if got := e.agent.Volumes(); !reflect.DeepEqual(got, []string{unnamed.ID}) {
		t.Fatalf("agent volumes after delete %v", got)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": v.ID, "mount_path": "/data"})}),
		404, "not_found", "volume "+v.ID+" not found")
	e.wantErr(e.do("GET", "/v1/volumes", "", nil), 401, "unauthorized", "")
}

func TestVolumeTeamIsolation(t *testing.T) {
	e := newEnv(t)
	a := e.admin
	tm := e.mustStatus(e.do("POST", "/v1/teams", a, map[string]string{"name": "beta"}), 201).json(t)
	b := tm["key"].(map[string]any)["key"].(string)
	v := e.createVolume(a, `{"size_mib": 8}`)
	vb := e.createVolume(b, `{"size_mib": 8}`)
	missing := "volume " + v.ID + " not found"
	e.wantErr(e.do("GET", "/v1/volumes/"+v.ID, b, nil), 404, "not_found", missing)
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", b, `{"size_mib": 16}`), 404, "not_found", missing)
	e.wantErr(e.do("DELETE", "/v1/volumes/"+v.ID, b, nil), 404, "not_found", missing)
	e.wantErr(e.do("POST", "/v1/sandboxes", b, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": v.ID, "mount_path": "/data"})}),
		404, "not_found", missing)
	if list := e.listVolumes(b); len(list) != 1 || list[0].ID != vb.ID {
		t.Fatalf("team b lists %+v", list)
	}
	if e.getVolume(a, v.ID).SizeMiB != 8 || len(e.agent.Volumes()) != 2 {
		t.Fatal("another team changed a volume")
	}
}

func TestVolumeAttachRules(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	v := e.createVolume(k, `{"size_mib": 64, "name": "data"}`)
	mount := func(path string, ro bool) map[string]any {
		return map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": v.ID, "mount_path": path, "read_only": ro})}
	}
	w := e.create(k, mount("/data", false))
	if got := e.agent.Mounts(w.ID); !reflect.DeepEqual(got, []agentclient.VolumeMount{{VolumeID: v.ID, MountPath: "/data"}}) {
		t.Fatalf("agent mounts %+v", got)
	}
	if got := e.getVolume(k, v.ID).Attachments; !reflect.DeepEqual(got, []AttachmentView{{SandboxID: w.ID, MountPath: "/data"}}) {
		t.Fatalf("attachments %+v", got)
	}
	creates, _ := e.agent.Counts()

	// One read-write holder: nothing else may attach, and the volume may not change.
	e.wantErr(e.do("POST", "/v1/sandboxes", k, mount("/data", false)), 409, "conflict", w.ID)
	e.wantErr(e.do("POST", "/v1/sandboxes", k, mount("/ro", true)), 409, "conflict", "attached read-write to sandbox "+w.ID)
	e.wantErr(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 409, "conflict", w.ID)
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 128}`), 409, "conflict", w.ID)
	if c, _ := e.agent.Counts(); c != creates || len(e.agent.Volumes()) != 1 {
		t.Fatal("a refused call reached the host")
	}
	// Hibernation keeps the volume (snapshots and forks copy it: TestVolumeCopies).
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+w.ID+"/hibernate", k, nil), 200)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+w.ID+"/wake", k, nil), 200)

	// Data written to the volume outlives the sandbox.
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+w.ID+"/files?path=/data/hello.txt", k, "hello"), 200)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+w.ID, k, nil), 204)
	if got := e.getVolume(k, v.ID).Attachments; len(got) != 0 {
		t.Fatalf("attachments after kill %+v", got)
	}

	// Any number of read-only holders, then no read-write one.
	r1 := e.create(k, mount("/data", true))
	e.clock.Add(time.Second)
	r2 := e.create(k, mount("/mnt/ref", true))
	if body := string(e.mustStatus(e.do("GET", "/v1/sandboxes/"+r1.ID+"/files?path=/data/hello.txt", k, nil), 200).body); body != "hello" {
		t.Fatalf("read back %q", body)
	}
	if body := string(e.mustStatus(e.do("GET", "/v1/sandboxes/"+r2.ID+"/files?path=/mnt/ref/hello.txt", k, nil), 200).body); body != "hello" {
		t.Fatalf("read back %q", body)
	}
	e.wantErr(e.do("PUT", "/v1/sandboxes/"+r1.ID+"/files?path=/data/x", k, "x"), 403, "forbidden", "read-only")
	got := e.getVolume(k, v.ID).Attachments
	if want := []AttachmentView{{SandboxID: r1.ID, MountPath: "/data", ReadOnly: true}, {SandboxID: r2.ID, MountPath: "/mnt/ref", ReadOnly: true}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("read-only attachments %+v, want %+v", got, want)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, mount("/data", false)), 409, "conflict", "attached read-only to sandbox "+r1.ID)
	// A sandbox with a read-only volume is neither snapshotted nor forked.
	e.wantErr(e.do("POST", "/v1/sandboxes/"+r1.ID+"/snapshots", k, nil), 409, "conflict", "read-only")
	e.wantErr(e.do("POST", "/v1/sandboxes/"+r1.ID+"/fork", k, nil), 409, "conflict", "read-only")
	e.wantErr(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 409, "conflict", r1.ID)

	// The reaper frees what it kills.
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+r1.ID, k, nil), 204)
	e.clock.Add(time.Hour)
	if n, err := e.srv.ReapOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("reaped %d %v", n, err)
	}
	if got := e.getVolume(k, v.ID).Attachments; len(got) != 0 {
		t.Fatalf("attachments after the reaper %+v", got)
	}
	e.mustStatus(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 128}`), 200)
	e.mustStatus(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 204)
	if len(e.agent.Volumes()) != 0 {
		t.Fatalf("agent still has %v", e.agent.Volumes())
	}
}

func TestVolumesPlaceSandboxOnTheirHost(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	va := e.createVolume(k, `{"size_mib": 8}`)
	// A second host; host-a has little memory free, so the next volume goes to host-b.
	b := e.newHost("host-b", "base", "code-interpreter")
	e.agent.SetMemory(1024)
	e.join(b)
	vb := e.createVolume(k, `{"size_mib": 8}`)
	if va.HostID != "host-a" || vb.HostID != "host-b" {
		t.Fatalf("volumes on %s and %s", va.HostID, vb.HostID)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base", "volumes": vols(
		map[string]any{"volume_id": va.ID, "mount_path": "/a"}, map[string]any{"volume_id": vb.ID, "mount_path": "/b"})}),
		409, "conflict", "on one host")
	// A sandbox goes where its volume is.
	sb := e.create(k, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": vb.ID, "mount_path": "/b"})})
	if sb.Host != "host-b" || len(b.Mounts(sb.ID)) != 1 {
		t.Fatalf("sandbox on %s, mounts %v", sb.Host, b.Mounts(sb.ID))
	}
	// The volume's host down: 503 capacity.
	if err := e.st.MarkHostDown(context.Background(), "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": va.ID, "mount_path": "/a"})}),
		503, "capacity", "host-a")
	// A host that refuses the attach (it still has a sandbox on the volume) is passed through.
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := agentclient.New(e.agent.URL(), agentToken).CreateSandbox(context.Background(), agentclient.CreateRequest{ID: "sb_unrecorded",
		Template: "base", Volumes: []agentclient.VolumeMount{{VolumeID: va.ID, MountPath: "/a"}}}); err != nil {
		t.Fatal(err)
	}
	before := e.sandboxCount()
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": va.ID, "mount_path": "/a"})}),
		409, "conflict", "sb_unrecorded")
	if e.sandboxCount() != before {
		t.Fatal("a refused create was recorded")
	}
}

func TestVolumeDeleteWhileHostDownIsReconciled(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	v := e.createVolume(k, `{"size_mib": 8}`)
	if err := e.st.MarkHostDown(context.Background(), "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	e.mustStatus(e.do("DELETE", "/v1/volumes/"+v.ID, k, nil), 204)
	if len(e.agent.Volumes()) != 1 {
		t.Fatal("deleted on a host recorded down")
	}
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	if len(e.agent.Volumes()) != 0 {
		t.Fatalf("reconcile left %v", e.agent.Volumes())
	}
}

// TestVolumeNoSpace: a host whose disk pool cannot take a volume answers 507 no_space; the
// control plane then tries the next host, and when none has room the caller gets that 507 with
// nothing recorded. A resize past the pool's room is the same 507 and leaves the size.
func TestVolumeNoSpace(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	e.agent.SetPool(1024)
	b := e.newHost("host-b", "base", "code-interpreter")
	b.SetPool(4096)
	e.agent.SetMemory(16384) // host-a ranks first
	e.join(b)
	v := e.createVolume(k, `{"size_mib": 2048}`)
	if v.HostID != "host-b" {
		t.Fatalf("a 2 GiB volume went to %s, which has a 1 GiB pool", v.HostID)
	}
	e.wantErr(e.do("POST", "/v1/volumes", k, `{"size_mib": 8192}`), 507, "no_space", "available")
	e.wantErr(e.do("POST", "/v1/volumes/"+v.ID+"/resize", k, `{"size_mib": 8192}`), 507, "no_space", "available")
	if got := e.getVolume(k, v.ID); got.SizeMiB != 2048 {
		t.Fatalf("refused resize changed the size: %d", got.SizeMiB)
	}
	r := e.mustStatus(e.do("GET", "/v1/volumes", k, nil), 200).json(t)
	if n := len(r["volumes"].([]any)); n != 1 {
		t.Fatalf("%d volumes recorded, want 1", n)
	}
}

// TestVolumeCopies: a snapshot or a fork of a sandbox with a volume copies it; a sandbox made from
// the snapshot, and each fork child, gets a volume of its own made from the copy: the team's,
// named after the one it copies, counted against the volume quota (a copy over it is refused
// before anything is made), and outliving its sandbox like any volume.
func TestVolumeCopies(t *testing.T) {
	e := newEnv(t)
	k := e.admin
	v := e.createVolume(k, `{"size_mib": 64, "name": "data"}`)
	src := e.create(k, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": v.ID, "mount_path": "/data"})})
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+src.ID+"/files?path=/data/a", k, "one"), 200)
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+src.ID+"/snapshots", k, nil), 201).json(t)
	if snap["published"] == true {
		t.Errorf("a snapshot with volume copies is published: %v", snap)
	}
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+src.ID+"/files?path=/data/a", k, "two"), 200)
	copyOf := func(sb string) VolumeView {
		t.Helper()
		for _, cv := range e.listVolumes(k) {
			if len(cv.Attachments) == 1 && cv.Attachments[0].SandboxID == sb {
				return cv
			}
		}
		t.Fatalf("no volume attached to %s", sb)
		return VolumeView{}
	}
	read := func(sb string) string {
		t.Helper()
		return string(e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb+"/files?path=/data/a", k, nil), 200).body)
	}

	r := e.create(k, map[string]any{"snapshot_id": snap["id"]})
	rv := copyOf(r.ID)
	if rv.ID == v.ID || rv.Name != sandboxes.CopyName("data", r.ID) || rv.SizeMiB != 64 || rv.Attachments[0].MountPath != "/data" {
		t.Fatalf("restored sandbox's volume %+v", rv)
	}
	if got := read(r.ID); got != "one" {
		t.Errorf("restored copy reads %q, want the snapshot's", got)
	}
	e.wantErr(e.do("POST", "/v1/sandboxes", k, map[string]any{"snapshot_id": snap["id"],
		"volumes": vols(map[string]any{"volume_id": e.createVolume(k, `{"size_mib": 8}`).ID, "mount_path": "/x"})}), 409, "conflict", "copies")

	kids := e.mustStatus(e.do("POST", "/v1/sandboxes/"+src.ID+"/fork", k, map[string]any{"count": 2}), 201).json(t)["sandboxes"].([]any)
	seen := map[string]bool{v.ID: true, rv.ID: true}
	for _, kid := range kids {
		id := kid.(map[string]any)["id"].(string)
		cv := copyOf(id)
		if seen[cv.ID] || cv.Name != sandboxes.CopyName("data", id) {
			t.Fatalf("fork child's volume %+v", cv)
		}
		seen[cv.ID] = true
		if got := read(id); got != "two" {
			t.Errorf("fork child reads %q", got)
		}
	}

	// Quota: a team at its volume limit cannot copy.
	g, _, gamma, err := auth.CreateTeam(context.Background(), e.st, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	gid := g.ID
	e.mustStatus(e.do("PUT", "/v1/teams/"+gid+"/quota", e.admin, map[string]any{"volume_mib": 100}), 200)
	gv := e.createVolume(gamma, `{"size_mib": 60}`)
	gs := e.create(gamma, map[string]any{"template": "base", "volumes": vols(map[string]any{"volume_id": gv.ID, "mount_path": "/data"})})
	creates, _ := e.agent.Counts()
	if r := e.do("POST", "/v1/sandboxes/"+gs.ID+"/fork", gamma, nil); r.status != 429 || !strings.Contains(r.errMessage(), "volume_mib limit 100, in use 60, this call needs 60 more") {
		t.Fatalf("fork over the volume quota: %d %s", r.status, r.body)
	}
	gsnap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+gs.ID+"/snapshots", gamma, nil), 201).json(t)
	if r := e.do("POST", "/v1/sandboxes", gamma, map[string]any{"snapshot_id": gsnap["id"]}); r.status != 429 {
		t.Fatalf("restore over the volume quota: %d %s", r.status, r.body)
	}
	if c, _ := e.agent.Counts(); c != creates || len(e.listVolumes(gamma)) != 1 {
		t.Fatal("a refused copy reached the host")
	}

	// The copies outlive their sandboxes and are deleted like any volume.
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+r.ID, k, nil), 204)
	e.mustStatus(e.do("DELETE", "/v1/volumes/"+rv.ID, k, nil), 204)
}

// A create from a template with a data volume holds the copy's quota before it asks the host,
// and the copy is the team's volume, named after the template.
func TestTemplateVolumeQuota(t *testing.T) {
	e := newEnv(t)
	e.agent.SetTemplateVolume("code-interpreter", "/var/lib/db", 64, false)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, _, gamma, err := auth.CreateTeam(context.Background(), e.st, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	e.mustStatus(e.do("PUT", "/v1/teams/"+g.ID+"/quota", e.admin, map[string]any{"volume_mib": 100}), 200)
	sb := e.create(gamma, map[string]any{"template": "code-interpreter"})
	vs := e.listVolumes(gamma)
	if len(vs) != 1 || vs[0].Name != sandboxes.CopyName("code-interpreter", sb.ID) || vs[0].SizeMiB != 64 ||
		len(vs[0].Attachments) != 1 || vs[0].Attachments[0].SandboxID != sb.ID || vs[0].Attachments[0].MountPath != "/var/lib/db" {
		t.Fatalf("volumes after a create from a template with a data volume: %+v", vs)
	}
	creates, _ := e.agent.Counts()
	if r := e.do("POST", "/v1/sandboxes", gamma, map[string]any{"template": "code-interpreter"}); r.status != 429 ||
		!strings.Contains(r.errMessage(), "volume_mib limit 100, in use 64, this call needs 64 more") {
		t.Fatalf("create over the volume quota: %d %s", r.status, r.body)
	}
	if c, _ := e.agent.Counts(); c != creates {
		t.Fatal("a create refused for quota reached the host")
	}
	// Another volume beside the copy: attached in its own slot (the copy holds quota as before).
	extra := e.createVolume(e.admin, `{"size_mib": 16}`)
	if r := e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "code-interpreter",
		"volumes": vols(map[string]any{"volume_id": extra.ID, "mount_path": "/data"})}); r.status != 201 {
		t.Fatalf("create from the template with another volume: %d %s", r.status, r.body)
	}
	mounts := map[string]bool{}
	for _, v := range e.listVolumes(e.admin) {
		for _, a := range v.Attachments {
			mounts[v.ID+" "+a.MountPath] = true
		}
	}
	if !mounts[extra.ID+" /data"] || len(mounts) != 2 {
		t.Fatalf("the admin team's volumes' mounts after a create with another volume: %v", mounts)
	}
}
