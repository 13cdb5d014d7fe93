package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestHostsAndPinning: GET /v1/hosts lists the hosts with their live sandboxes (admin keys only);
// an admin key pins a create to a host; a pin that cannot hold is a clear error.
func TestHostsAndPinning(t *testing.T) {
	e := newEnv(t)
	b := e.newHost("host-b", "base")
	e.join(b)

	// Pinned creates land where they are pinned, whatever the spread would pick.
	for range 2 {
		if sb := e.create(e.admin, map[string]any{"template": "base", "host": "host-b"}); sb.Host != "host-b" {
			t.Fatalf("pinned to host-b, placed on %s", sb.Host)
		}
	}
	a := e.create(e.admin, map[string]any{"template": "code-interpreter", "host": "host-a"})
	if a.Host != "host-a" {
		t.Fatalf("pinned to host-a, placed on %s", a.Host)
	}

	var hosts v1.Hosts
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/hosts", e.admin, nil), 200).body, &hosts); err != nil {
		t.Fatal(err)
	}
	got := map[string]v1.Host{}
	for _, h := range hosts.Hosts {
		got[h.ID] = h
	}
	if len(got) != 2 || got["host-a"].Sandboxes != 1 || got["host-b"].Sandboxes != 2 || got["host-b"].State != "up" ||
		got["host-b"].URL != b.URL() || len(got["host-b"].Templates) != 1 || got["host-a"].LastHeartbeat == "" {
		t.Fatalf("hosts: %+v", hosts.Hosts)
	}

	// What a pin cannot do.
	tm := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)
	beta := tm["key"].(map[string]any)["key"].(string)
	for _, c := range []struct {
		name, key string
		body      map[string]any
		status    int
		code      string
	}{
		{"a non-admin key", beta, map[string]any{"template": "base", "host": "host-b"}, 403, "forbidden"},
		{"an empty host", e.admin, map[string]any{"template": "base", "host": ""}, 400, "invalid_request"},
		{"an unknown host", e.admin, map[string]any{"template": "base", "host": "host-zz"}, 503, "capacity"},
		{"a host without the template", e.admin, map[string]any{"template": "code-interpreter", "host": "host-b"}, 503, "capacity"},
	} {
		if r := e.do("POST", "/v1/sandboxes", c.key, c.body); r.status != c.status || r.errCode() != c.code {
			t.Errorf("create with %s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	if r := e.do("GET", "/v1/hosts", beta, nil); r.status != 403 {
		t.Errorf("hosts with a team key: %d %s", r.status, r.body)
	}

	// A fork may name its parent's host; another host needs a blob store (these hosts have none).
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+a.ID+"/fork", e.admin, map[string]any{"host": "host-a"}), 201)
	if r := e.do("POST", "/v1/sandboxes/"+a.ID+"/fork", e.admin, map[string]any{"host": "host-b"}); r.status != 409 || r.errCode() != "conflict" {
		t.Errorf("fork onto another host without a blob store: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/sandboxes/"+a.ID+"/fork", beta, map[string]any{"host": "host-a"}); r.status != 403 && r.status != 404 {
		t.Errorf("another team's fork with a pin: %d %s", r.status, r.body)
	}
}

// TestPublishedSnapshotsRestoreAnywhere: with a blob store, a snapshot is published and a sandbox
// made from it may start on another host (pinned there, or when its own host is full), with the
// snapshot's memory; unpinned it starts where it was taken (no pull). Without a blob store a
// snapshot stays tied to its host (TestHostsAndPinning, lifecycle tests).
func TestPublishedSnapshotsRestoreAnywhere(t *testing.T) {
	e := newEnv(t)
	shared := agenttest.NewBlob()
	e.agent.UseBlob(shared)
	e.addHost("host-b", shared)

	parent := e.create(e.admin, map[string]any{"template": "base", "host": "host-a"})
	e.inc(e.admin, parent.ID)
	sn := e.mustStatus(e.do("POST", "/v1/sandboxes/"+parent.ID+"/snapshots", e.admin, nil), 201).json(t)
	id := sn["id"].(string)
	if sn["published"] != true || !shared.Published(id) {
		t.Fatalf("snapshot on a host with a blob store: %v", sn)
	}
	got := e.mustStatus(e.do("GET", "/v1/snapshots/"+id, e.admin, nil), 200).json(t)
	if got["published"] != true {
		t.Fatalf("snapshot record: %v", got)
	}

	// Pinned to the other host: that host pulls it; the child has the parent's memory.
	if c := e.create(e.admin, map[string]any{"snapshot_id": id, "host": "host-b"}); c.Host != "host-b" || e.inc(e.admin, c.ID) != "2" {
		t.Fatalf("restore on host-b: %+v", c)
	}
	// Unpinned: where it was taken while that host has room, elsewhere once it is full.
	if c := e.create(e.admin, map[string]any{"snapshot_id": id}); c.Host != "host-a" {
		t.Fatalf("unpinned restore went to %s, not the snapshot's own host-a", c.Host)
	}
	e.agent.SetSlots(int64(len(e.agent.All())))
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := e.create(e.admin, map[string]any{"snapshot_id": id}); c.Host != "host-b" || e.inc(e.admin, c.ID) != "2" {
		t.Fatalf("restore with host-a full: %+v", c)
	}

	// A fork onto another host: children there with the parent's memory, recorded as its children.
	e.agent.SetSlots(64)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	kids := e.forkOf(e.admin, parent.ID, map[string]any{"count": 2, "host": "host-b"})
	if len(kids) != 2 {
		t.Fatalf("cross-host fork: %+v", kids)
	}
	for _, k := range kids {
		if k.Host != "host-b" || k.ForkOf != parent.ID || e.inc(e.admin, k.ID) != "2" {
			t.Errorf("cross-host fork child: %+v", k)
		}
	}
	if e.inc(e.admin, parent.ID) != "2" {
		t.Error("the parent's memory changed with its children's")
	}
}

// TestHibernatedSandboxesWakeAnywhere: with a blob store, a hibernated sandbox outlives its host:
// the host going down leaves it hibernated (a running one is lost), and the next call wakes it on
// another host with its memory; when the old host comes back, its stale copy is killed there.
func TestHibernatedSandboxesWakeAnywhere(t *testing.T) {
	e := newEnv(t)
	shared := agenttest.NewBlob()
	e.agent.UseBlob(shared)
	e.addHost("host-b", shared)
	ctx := context.Background()

	sleeper := e.create(e.admin, map[string]any{"template": "base", "host": "host-a"})
	runner := e.create(e.admin, map[string]any{"template": "base", "host": "host-a"})
	e.inc(e.admin, sleeper.ID)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sleeper.ID+"/hibernate", e.admin, nil), 200)
	if e.record(sleeper.ID).HibernatedImage == "" {
		t.Fatal("a hibernation published by its host was not recorded")
	}

	if err := e.st.MarkHostDown(ctx, "host-a", "test"); err != nil {
		t.Fatal(err)
	}
	if got := e.get(e.admin, runner.ID); got.State != "lost" {
		t.Errorf("a running sandbox of a down host: %+v", got)
	}
	if got := e.get(e.admin, sleeper.ID); got.State != "hibernated" {
		t.Fatalf("a published hibernated sandbox of a down host: %+v", got)
	}
	if got := e.inc(e.admin, sleeper.ID); got != "2" {
		t.Fatalf("the moved sandbox's memory: inc answered %q", got)
	}
	if got := e.get(e.admin, sleeper.ID); got.State != "running" || got.Host != "host-b" {
		t.Fatalf("after the call: %+v", got)
	}
	if rec := e.record(sleeper.ID); rec.HibernatedImage != "" {
		t.Errorf("a running sandbox keeps a hibernation image: %+v", rec)
	}

	// host-a comes back: its copy of the moved sandbox goes, the sandbox stays on host-b.
	if err := e.sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.sched.Reconcile(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(e.agent.All(), sleeper.ID) {
		t.Errorf("host-a still has the moved sandbox: %v", e.agent.All())
	}
	if got := e.get(e.admin, sleeper.ID); got.State != "running" || got.Host != "host-b" || e.inc(e.admin, sleeper.ID) != "3" {
		t.Errorf("the moved sandbox after host-a is back: %+v", got)
	}
}

// TestDrainHost: a drained host takes nothing new, and its sandboxes wake elsewhere on their next
// call, one with a volume with it (its hibernation carried a copy: the volume is then host-b's,
// and host-a's reconcile deletes its own); one with a read-only volume stays (reported); ending
// the drain places there again.
func TestDrainHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	shared := agenttest.NewBlob()
	e.agent.UseBlob(shared)
	vol := e.createVolume(e.admin, map[string]any{"size_mib": 16}) // host-a is the only host yet
	withVol := e.create(e.admin, map[string]any{"template": "base", "volumes": []any{map[string]any{"volume_id": vol.ID, "mount_path": "/data"}}})
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+withVol.ID+"/files?path=/data/note", e.admin, "from-a"), 200)
	roVol := e.createVolume(e.admin, map[string]any{"size_mib": 16})
	withRO := e.create(e.admin, map[string]any{"template": "base", "volumes": []any{map[string]any{"volume_id": roVol.ID, "mount_path": "/ro", "read_only": true}}})
	b := e.addHost("host-b", shared)
	sb := e.create(e.admin, map[string]any{"template": "base", "host": "host-a"})
	e.inc(e.admin, sb.ID)

	tm := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)
	beta := tm["key"].(map[string]any)["key"].(string)
	if r := e.do("POST", "/v1/hosts/host-a/drain", beta, nil); r.status != 403 {
		t.Errorf("drain with a team key: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/hosts/host-zz/drain", e.admin, nil); r.status != 404 {
		t.Errorf("drain of an unknown host: %d %s", r.status, r.body)
	}
	var rep v1.DrainReport
	if err := json.Unmarshal(e.mustStatus(e.do("POST", "/v1/hosts/host-a/drain", e.admin, nil), 200).body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Host != "host-a" || rep.Moved != 2 || len(rep.Kept) != 1 || rep.Kept[0].SandboxID != withRO.ID {
		t.Fatalf("drain report: %+v", rep)
	}
	if r := e.do("POST", "/v1/sandboxes", e.admin, map[string]any{"template": "base", "host": "host-a"}); r.status != 503 {
		t.Errorf("a create pinned to a draining host: %d %s", r.status, r.body)
	}
	if c := e.create(e.admin, map[string]any{"template": "base"}); c.Host != "host-b" {
		t.Errorf("an unpinned create with host-a draining went to %s", c.Host)
	}
	if got := e.inc(e.admin, sb.ID); got != "2" {
		t.Fatalf("the drained sandbox's memory after its move: %q", got)
	}
	if got := e.get(e.admin, sb.ID); got.Host != "host-b" || got.State != "running" {
		t.Fatalf("the drained sandbox after its next call: %+v", got)
	}
	if got := string(e.mustStatus(e.do("GET", "/v1/sandboxes/"+withVol.ID+"/files?path=/data/note", e.admin, nil), 200).body); got != "from-a" {
		t.Fatalf("the drained sandbox with a volume reads %q after its move", got)
	}
	if got := e.get(e.admin, withVol.ID); got.Host != "host-b" || got.State != "running" {
		t.Fatalf("the drained sandbox with a volume after its next call: %+v", got)
	}
	if v, err := e.st.GetVolume(ctx, vol.ID); err != nil || v.HostID != "host-b" || !slices.Contains(b.Volumes(), vol.ID) {
		t.Fatalf("the moved sandbox's volume: %+v %v (host-b keeps %v)", v, err, b.Volumes())
	}
	if err := e.sched.Reconcile(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(e.agent.Volumes(), vol.ID) || !slices.Contains(e.agent.Volumes(), roVol.ID) {
		t.Errorf("host-a keeps volumes %v after its reconcile (want %s gone, %s kept)", e.agent.Volumes(), vol.ID, roVol.ID)
	}
	var hosts v1.Hosts
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/hosts", e.admin, nil), 200).body, &hosts)
	for _, h := range hosts.Hosts {
		if h.Draining != (h.ID == "host-a") {
			t.Errorf("host %s draining=%v", h.ID, h.Draining)
		}
	}
	e.mustStatus(e.do("DELETE", "/v1/hosts/host-a/drain", e.admin, nil), 204)
	if c := e.create(e.admin, map[string]any{"template": "base", "host": "host-a"}); c.Host != "host-a" {
		t.Errorf("a pinned create after the drain ended: %+v", c)
	}
}

// TestSweepPublished: the sweep deletes the publications of deleted or unknown snapshots and of
// stale hibernations once they are older than the grace, and keeps live ones (and their chunks),
// and those of sandboxes that changed within the grace.
func TestSweepPublished(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bsDir := t.TempDir()
	bs, err := blob.OpenFile(bsDir)
	if err != nil {
		t.Fatal(err)
	}
	sb := e.create(e.admin, map[string]any{"template": "base"})
	live := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), 201).json(t)["id"].(string)
	gone := e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.admin, nil), 201).json(t)["id"].(string)
	e.mustStatus(e.do("DELETE", "/v1/snapshots/"+gone, e.admin, nil), 204)
	e.mustStatus(e.do("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", e.admin, nil), 200)
	if _, err := e.st.SetHibernatedImage(ctx, sb.ID, sb.ID+"-2"); err != nil {
		t.Fatal(err)
	}
	publish := func(kind, name string, b byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte{b}, 100), 0o600)
		if _, _, err := artifact.Push(ctx, bs, kind, name, dir, []string{"f"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	publish("snapshot", live, 1)
	publish("snapshot", gone, 2)
	publish("snapshot", "snap_forkonly", 3)
	publish("hibernated", sb.ID+"-1", 4)
	publish("hibernated", sb.ID+"-2", 5)
	publish("template", "base-abc", 6)
	// A publication two hours old of a sandbox that changed within the grace (woken from it: a
	// lazy host may still be fetching its chunks) is kept, though it would not wake from it again.
	woke := e.create(e.admin, map[string]any{"template": "base"})
	publish("hibernated", woke.ID+"-1", 7)
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(bsDir, artifact.ManifestKey("hibernated", woke.ID+"-1")), old, old); err != nil {
		t.Fatal(err)
	}

	if m, c, err := e.srv.svc.SweepPublished(ctx, bs, time.Hour); err != nil || m != 0 || c != 0 {
		t.Fatalf("sweep within the grace: %d manifests, %d chunks, %v", m, c, err)
	}
	e.clock.Add(2 * time.Hour)
	m, _, err := e.srv.svc.SweepPublished(ctx, bs, time.Hour)
	if err != nil || m != 4 { // the woken-from one too, now that its sandbox is older than the grace
		t.Fatalf("sweep after the grace: %d manifests, %v", m, err)
	}
	for kind, names := range map[string][]string{"snapshot": {live}, "hibernated": {sb.ID + "-2"}, "template": {"base-abc"}} {
		for _, n := range names {
			if _, err := artifact.Get(ctx, bs, kind, n); err != nil {
				t.Errorf("%s/%s was swept: %v", kind, n, err)
			}
		}
	}
	for kind, n := range map[string]string{"snapshot": gone, "hibernated": sb.ID + "-1"} {
		if _, err := artifact.Get(ctx, bs, kind, n); err == nil {
			t.Errorf("%s/%s was kept", kind, n)
		}
	}
}

// addHost adds a fake host (template base) with blob store shared (nil: none), polled at once.
func (e *env) addHost(id string, shared *agenttest.Blob) *agenttest.Agent {
	e.t.Helper()
	b := e.newHost(id, "base")
	b.UseBlob(shared)
	e.join(b)
	return b
}

// newHost starts a fake host with templates, closed when the test ends; join adds it.
func (e *env) newHost(id string, templates ...string) *agenttest.Agent {
	b := agenttest.New(id, agentToken, templates...)
	e.t.Cleanup(b.Close)
	return b
}

// join adds fake host b to the scheduler and polls the hosts at once.
func (e *env) join(b *agenttest.Agent) {
	e.t.Helper()
	e.sched.AddStaticAgent(b.URL(), agentToken)
	if err := e.sched.PollStatic(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// TestHostDoctor: the control plane adds to a host's own findings the sandboxes it runs that the
// store does not place there and the snapshots it keeps that the store never recorded (once they
// are older than an operation in flight), and the repair kills or deletes them there; recorded
// sandboxes and snapshots are never touched; team keys are refused.
func TestHostDoctor(t *testing.T) {
	e := newEnv(t)
	kept := e.create(e.admin, map[string]any{"template": "base"})
	e.agent.AddSandbox("sb_strayone", "base")
	recorded := e.mustStatus(e.do("POST", "/v1/sandboxes/"+kept.ID+"/snapshots", e.admin, nil), 201).json(t)["id"].(string)
	stray, err := agentclient.New(e.agent.URL(), agentToken).CreateSnapshot(context.Background(), kept.ID) // its server died before recording it
	if err != nil {
		t.Fatal(err)
	}
	report := func(method, path string) v1.DoctorReport {
		var r v1.DoctorReport
		if err := json.Unmarshal(e.mustStatus(e.do(method, path, e.admin, nil), 200).body, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := report("GET", "/v1/hosts/host-a/doctor"); len(r.Findings) != 0 {
		t.Fatalf("a sandbox younger than an operation in flight was reported: %+v", r)
	}
	// Past the reconcile's grace (the longest create in flight), which this server's reconcile
	// counts from when it first saw the sandbox without a record: the doctor says so.
	e.clock.Add(e.sched.UnrecordedGrace() + time.Minute)
	if err := e.sched.Reconcile(context.Background(), "host-a"); err != nil {
		t.Fatal(err)
	}
	if r := report("GET", "/v1/hosts/host-a/doctor"); len(r.Findings) != 2 || r.Findings[0].Kind != "unrecorded_sandbox" ||
		r.Findings[0].Resource != "sb_strayone" || r.Findings[0].Repaired ||
		!strings.Contains(r.Findings[0].Detail, "reconcile kills it once it has seen it so for 20m0s; this server's reconcile first saw it") ||
		r.Findings[1].Kind != "unrecorded_snapshot" || r.Findings[1].Resource != stray.ID {
		t.Fatalf("doctor: %+v", r)
	}
	if !strings.Contains(e.metricsText(), "pandastack_orphan_sandboxes_killed_total 0") {
		t.Fatal("no orphan kill counter in /metrics")
	}
	if r := report("POST", "/v1/hosts/host-a/doctor/repair"); len(r.Findings) != 2 || !r.Findings[0].Repaired || !r.Findings[1].Repaired {
		t.Fatalf("repair: %+v", r)
	}
	if got := e.agent.All(); slices.Contains(got, "sb_strayone") || !slices.Contains(got, kept.ID) {
		t.Fatalf("after the repair the host has %v", got)
	}
	if got := e.agent.Snapshots(); slices.Contains(got, stray.ID) || !slices.Contains(got, recorded) {
		t.Fatalf("after the repair the host keeps snapshots %v", got)
	}
	beta := e.newTeam("beta")
	if r := e.do("GET", "/v1/hosts/host-a/doctor", beta, nil); r.status != 403 {
		t.Errorf("doctor with a team key: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/hosts/host-zz/doctor", e.admin, nil); r.status != 404 {
		t.Errorf("doctor of an unknown host: %d %s", r.status, r.body)
	}
}
