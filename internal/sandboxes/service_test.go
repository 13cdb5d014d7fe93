package sandboxes

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// The service over a SQLite store and fake host agents (no VMs); the HTTP side of the same paths
// is covered by internal/api's tests.

const token = "agent-secret"

type env struct {
	t     *testing.T
	st    *store.Store
	sched *scheduler.Scheduler
	svc   *Service
	a, b  *agenttest.Agent // host-a ranks first (more memory)
	team  string
	now   time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	st := testenv.SQLiteStore(t)
	e := &env{t: t, st: st, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e.sched = scheduler.New(scheduler.Config{Store: st, Logger: log})
	e.a = agenttest.New("host-a", token, "base")
	e.b = agenttest.New("host-b", token, "base")
	t.Cleanup(e.a.Close)
	t.Cleanup(e.b.Close)
	e.a.SetMemory(16384)
	for _, ag := range []*agenttest.Agent{e.a, e.b} {
		e.sched.AddStaticAgent(ag.URL(), token)
	}
	if err := e.sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	team, err := st.CreateTeam(ctx, store.Team{ID: "team_1", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	e.team = team.ID
	e.svc = New(Config{Store: st, Scheduler: e.sched, Logger: log, Now: func() time.Time { return e.now },
		DefaultTTL: 300 * time.Second, MaxTTL: time.Hour})
	return e
}

func (e *env) count() int {
	e.t.Helper()
	page, _, err := e.st.ListSandboxes(context.Background(), store.SandboxFilter{TeamID: e.team, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(page)
}

func wantKind(t *testing.T, err error, k errdefs.Kind) {
	t.Helper()
	if !errdefs.Is(err, k) {
		t.Fatalf("got %v, want an error of kind %s", err, k.Code())
	}
}

// TestCreateRecordsRunning: a create lands on the best host and is recorded running, expiring
// after its ttl (capped by MaxTTL) or the default.
func TestCreateRecordsRunning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.HostID != "host-a" || sb.State != store.StateRunning || !sb.ExpiresAt.Equal(e.now.Add(300*time.Second)) || sb.Metadata["k"] != "v" {
		t.Fatalf("recorded %+v", sb)
	}
	if got := e.a.State(sb.ID); got != store.StateRunning {
		t.Fatalf("on host-a the sandbox is %q", got)
	}
	long, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", TTLSeconds: 7200})
	if err != nil {
		t.Fatal(err)
	}
	if !long.ExpiresAt.Equal(e.now.Add(time.Hour)) || long.TTLSeconds != 7200 {
		t.Fatalf("a ttl over the maximum: expires %v (policy %d)", long.ExpiresAt, long.TTLSeconds)
	}
}

// TestCreateTriesNextHost: a host that is full or does not answer passes the create to the next
// host; any other refusal is the answer, with nothing tried elsewhere and nothing recorded.
func TestCreateTriesNextHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := CreateParams{Template: "base", AgentTemplate: "base"}

	e.a.FailCreates(&agentclient.Error{Status: 503, Code: "capacity", Message: "no free slot"})
	sb, err := e.svc.Create(ctx, e.team, p)
	if err != nil || sb.HostID != "host-b" {
		t.Fatalf("after a full host: %+v %v", sb, err)
	}

	e.a.FailCreates(&agentclient.Error{Status: 500, Code: "internal", Message: "bake exploded"})
	_, err = e.svc.Create(ctx, e.team, p)
	var ae *agentclient.Error
	if !errors.As(err, &ae) || ae.Code != "internal" {
		t.Fatalf("a failing host: %v", err)
	}
	if n := len(e.b.All()); n != 1 || e.count() != 1 {
		t.Fatalf("a non-retryable failure went on: host-b has %d sandboxes, %d recorded", n, e.count())
	}

	// Both full: the caller gets the capacity error, and the reservations are given back.
	e.b.FailCreates(&agentclient.Error{Status: 503, Code: "capacity", Message: "no free slot"})
	e.a.FailCreates(&agentclient.Error{Status: 503, Code: "capacity", Message: "no free slot"})
	for range 3 {
		if _, err := e.svc.Create(ctx, e.team, p); !errors.As(err, &ae) || ae.Code != "capacity" {
			t.Fatalf("all hosts full: %v", err)
		}
	}
	e.a.FailCreates(nil)
	if sb, err := e.svc.Create(ctx, e.team, p); err != nil || sb.HostID != "host-a" {
		t.Fatalf("host-a with room again: %+v %v", sb, err)
	}

	// A host that does not answer is skipped too.
	e.a.Close()
	e.b.FailCreates(nil)
	if sb, err := e.svc.Create(ctx, e.team, p); err != nil || sb.HostID != "host-b" {
		t.Fatalf("host-a gone: %+v %v", sb, err)
	}
}

// TestCreateWithVolumesOnTheirHost: a sandbox with volumes runs on their host, recorded with its
// attachments; a missing volume is NotFound, a snapshot elsewhere or a held volume Conflict.
func TestCreateWithVolumesOnTheirHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.a.SetPool(1024) // too small: the volume goes to host-b after a no_space
	v, err := e.svc.CreateVolume(ctx, e.team, "data", 2048)
	if err != nil || v.HostID != "host-b" {
		t.Fatalf("volume: %+v %v", v, err)
	}
	att := []store.VolumeAttachment{{VolumeID: v.ID, MountPath: "/data"}}
	sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: att})
	if err != nil || sb.HostID != "host-b" || len(e.b.Mounts(sb.ID)) != 1 {
		t.Fatalf("with a volume: %+v %v", sb, err)
	}
	if att[0].SandboxID != "" {
		t.Fatal("Create changed the caller's attachments")
	}
	_, err = e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: att})
	wantKind(t, err, errdefs.Conflict)
	_, err = e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base",
		Volumes: []store.VolumeAttachment{{VolumeID: "vol_missing", MountPath: "/data"}}})
	wantKind(t, err, errdefs.NotFound)
	snap := store.Snapshot{ID: "snap_x", HostID: "host-a", Template: "base"}
	_, err = e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &snap,
		Volumes: []store.VolumeAttachment{{VolumeID: v.ID, MountPath: "/data", ReadOnly: true}}})
	wantKind(t, err, errdefs.Conflict)
	if n := e.count(); n != 1 {
		t.Fatalf("%d sandboxes recorded, want 1", n)
	}

	// Each child of a fork of a sandbox with volumes gets its own copy, recorded as the team's
	// volume on that host and named after the one it copies.
	kids, err := e.svc.Fork(ctx, sb, 2)
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork with a volume: %+v %v", kids, err)
	}
	seen := map[string]bool{v.ID: true}
	for _, k := range kids {
		atts, err := e.st.SandboxVolumes(ctx, k.ID)
		if err != nil || len(atts) != 1 || seen[atts[0].VolumeID] || atts[0].MountPath != "/data" || atts[0].ReadOnly {
			t.Fatalf("child %s's volumes %+v %v", k.ID, atts, err)
		}
		seen[atts[0].VolumeID] = true
		c, err := e.st.GetTeamVolume(ctx, e.team, atts[0].VolumeID)
		if err != nil || c.HostID != "host-b" || c.SizeMiB != 2048 || c.Name != CopyName("data", k.ID) || len(c.Attachments) != 1 {
			t.Fatalf("child %s's volume %+v %v", k.ID, c, err)
		}
	}
	// Onto another host: refused without a blob store (nothing to carry the snapshot); with one,
	// the child on host-a has a copy made there from the published snapshot's, with the
	// parent's files, recorded as the team's volume on host-a.
	_, err = e.svc.ForkTo(ctx, sb, 1, "host-a")
	wantKind(t, err, errdefs.Conflict)
	if _, err := agentclient.New(e.b.URL(), token).WriteFile(ctx, sb.ID, "/data/note", strings.NewReader("from-b"), 6); err != nil {
		t.Fatal(err)
	}
	shared := agenttest.NewBlob()
	e.a.SetPool(4096)
	e.a.UseBlob(shared)
	e.b.UseBlob(shared)
	far, err := e.svc.ForkTo(ctx, sb, 1, "host-a")
	if err != nil || len(far) != 1 || far[0].HostID != "host-a" {
		t.Fatalf("fork onto another host with a blob store: %+v %v", far, err)
	}
	atts, err := e.st.SandboxVolumes(ctx, far[0].ID)
	if err != nil || len(atts) != 1 || seen[atts[0].VolumeID] || atts[0].MountPath != "/data" {
		t.Fatalf("cross-host child's volumes %+v %v", atts, err)
	}
	if c, err := e.st.GetTeamVolume(ctx, e.team, atts[0].VolumeID); err != nil || c.HostID != "host-a" || c.Name != CopyName("data", far[0].ID) {
		t.Fatalf("cross-host child's volume %+v %v", c, err)
	}
	if got := readAsRoot(t, e, far[0], "/data/note"); got != "from-b" {
		t.Fatalf("cross-host child reads %q from its volume copy", got)
	}
	if !slices.Contains(e.a.Volumes(), atts[0].VolumeID) {
		t.Fatalf("host-a keeps volumes %v, not the child's %s", e.a.Volumes(), atts[0].VolumeID)
	}
	e.a.UseBlob(nil)
	e.b.UseBlob(nil)
	// A child the store cannot record: the host kills it and deletes its copy.
	if _, err := e.st.CreateSandbox(ctx, store.Sandbox{ID: "sb_taken", TeamID: e.team, Template: "base", State: store.StateKilled,
		HostID: "host-b", CreatedAt: e.now, ExpiresAt: e.now}); err != nil {
		t.Fatal(err)
	}
	vols := len(e.b.Volumes())
	e.b.ForkIDs("sb_taken")
	if _, err := e.svc.Fork(ctx, sb, 1); err == nil {
		t.Fatal("a fork whose child could not be recorded succeeded")
	}
	if n := len(e.b.Volumes()); n != vols || e.b.State("sb_taken") != "" {
		t.Fatalf("host-b has %d volumes (want %d) and the unrecorded child is %q", n, vols, e.b.State("sb_taken"))
	}
}

// TestSnapshotRestoresVolumeCopies: a sandbox made from a snapshot of a sandbox with volumes
// gets its own copies (the snapshot's), recorded; it takes no other volumes.
func TestSnapshotRestoresVolumeCopies(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v, err := e.svc.CreateVolume(ctx, e.team, "", 64)
	if err != nil {
		t.Fatal(err)
	}
	src, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base",
		Volumes: []store.VolumeAttachment{{VolumeID: v.ID, MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	sn, err := e.svc.Snapshot(ctx, src)
	if err != nil || sn.Published {
		t.Fatalf("snapshot with a volume: %+v %v", sn, err)
	}
	copies, err := e.svc.SnapshotVolumes(ctx, sn)
	if want := []VolumeCopy{{SourceID: v.ID, MountPath: "/data", SizeMiB: 64}}; err != nil || !reflect.DeepEqual(copies, want) {
		t.Fatalf("snapshot volumes %+v %v, want %+v", copies, err, want)
	}
	other, err := e.svc.CreateVolume(ctx, e.team, "other", 64)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &sn,
		Volumes: []store.VolumeAttachment{{VolumeID: other.ID, MountPath: "/other"}}})
	wantKind(t, err, errdefs.Conflict)
	r, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &sn})
	if err != nil || r.HostID != src.HostID {
		t.Fatalf("create from the snapshot: %+v %v", r, err)
	}
	atts, err := e.st.SandboxVolumes(ctx, r.ID)
	if err != nil || len(atts) != 1 || atts[0].VolumeID == v.ID || atts[0].MountPath != "/data" {
		t.Fatalf("restored volumes %+v %v", atts, err)
	}
	c, err := e.st.GetTeamVolume(ctx, e.team, atts[0].VolumeID)
	if err != nil || c.Name != CopyName(v.ID, r.ID) || c.SizeMiB != 64 || c.HostID != src.HostID {
		t.Fatalf("restored copy %+v %v", c, err)
	}
}

// TestForkRecordsChildren: fork children are recorded on the parent's host with its metadata,
// ttl policy and fork_of; a parent that cannot be reached is Conflict; a failed record kills the
// children on the host.
func TestForkRecordsChildren(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	parent, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Metadata: map[string]string{"k": "v"}, TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	kids, err := e.svc.Fork(ctx, parent, 2)
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork: %v %v", kids, err)
	}
	for _, k := range kids {
		if k.ForkOf != parent.ID || k.HostID != "host-a" || k.Metadata["k"] != "v" || k.TTLSeconds != 60 ||
			!k.ExpiresAt.Equal(e.now.Add(time.Minute)) || e.a.State(k.ID) != store.StateRunning {
			t.Fatalf("child %+v", k)
		}
	}
	// The host answers a child id the store already has (a sandbox the host has forgotten):
	// nothing new is recorded, and the host kills what it made.
	if _, err := e.st.CreateSandbox(ctx, store.Sandbox{ID: "sb_taken", TeamID: e.team, Template: "base", State: store.StateKilled,
		HostID: "host-a", CreatedAt: e.now, ExpiresAt: e.now}); err != nil {
		t.Fatal(err)
	}
	e.a.ForkIDs("sb_taken")
	if _, err := e.svc.Fork(ctx, parent, 1); err == nil {
		t.Fatal("a fork whose child could not be recorded succeeded")
	}
	if n := e.count(); n != 4 || e.a.State("sb_taken") != "" {
		t.Fatalf("%d sandboxes recorded (want 4); the unrecorded child is %q on its host", n, e.a.State("sb_taken"))
	}
	parent.State = store.StateKilled
	_, err = e.svc.Fork(ctx, parent, 1)
	wantKind(t, err, errdefs.Conflict)
}

func TestCopyName(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	for _, c := range []struct{ source, sandbox, want string }{
		{"data", "sb_0123456789abcdef", "data-89abcdef"},
		{"vol_x", "sb_12", "vol_x-sb_12"},
		{long, "sb_0123456789abcdef", strings.Repeat("é", 27) + "-89abcdef"},
	} {
		if got := CopyName(c.source, c.sandbox); got != c.want || len(got) > MaxVolumeNameLen || !utf8.ValidString(got) {
			t.Errorf("CopyName(%q, %q) = %q, want %q", c.source, c.sandbox, got, c.want)
		}
	}
}

// A create from a template baked with a data volume records the copy its host made as the team's
// volume, named after the template; a copy the control plane did not expect is dropped; a volume
// attached beside the copy is recorded with it.
func TestTemplateVolumeCopies(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ag := range []*agenttest.Agent{e.a, e.b} {
		ag.SetTemplateVolume("base", "/var/lib/db", 64, false)
	}
	// Not reported yet: the host's copy is unexpected, so the sandbox and its copy are dropped.
	_, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	wantKind(t, err, errdefs.Capacity)
	if e.count() != 0 || len(e.a.Volumes())+len(e.b.Volumes()) != 0 || len(e.a.All())+len(e.b.All()) != 0 {
		t.Fatalf("left after an unexpected copy: %d sandboxes recorded, volumes %v %v", e.count(), e.a.Volumes(), e.b.Volumes())
	}
	if err := e.sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.TemplateVolumes("base", "my-db"); !reflect.DeepEqual(got, []VolumeCopy{{SourceName: "my-db", MountPath: "/var/lib/db", SizeMiB: 64}}) {
		t.Fatalf("template volumes %+v", got)
	}
	sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	if err != nil {
		t.Fatal(err)
	}
	atts, err := e.st.SandboxVolumes(ctx, sb.ID)
	if err != nil || len(atts) != 1 || atts[0].MountPath != "/var/lib/db" || atts[0].ReadOnly {
		t.Fatalf("volumes of a sandbox of the template: %+v %v", atts, err)
	}
	v, err := e.st.GetTeamVolume(ctx, e.team, atts[0].VolumeID)
	if err != nil || v.Name != CopyName("base", sb.ID) || v.SizeMiB != 64 || v.HostID != sb.HostID {
		t.Fatalf("template volume copy %+v %v", v, err)
	}
	other, err := e.svc.CreateVolume(ctx, e.team, "other", 64)
	if err != nil {
		t.Fatal(err)
	}
	// A volume of the team's attached beside the copy: in its own slot, the copy recorded too.
	both, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base",
		Volumes: []store.VolumeAttachment{{VolumeID: other.ID, MountPath: "/other"}}})
	if err != nil {
		t.Fatal(err)
	}
	if atts, err = e.st.SandboxVolumes(ctx, both.ID); err != nil || len(atts) != 2 || atts[0].MountPath != "/other" || atts[0].VolumeID != other.ID || atts[1].MountPath != "/var/lib/db" {
		t.Fatalf("volumes of a sandbox of the template with one attached: %+v %v", atts, err)
	}
}

// TestCreateFromPublishedSnapshotWithVolumes: a create from a published snapshot with volume
// copies whose host is down learns the copies from the snapshot's publication (its record in the
// blob store) and makes the sandbox on another host, which pulls the copies: its volume there is
// the team's, recorded on that host, with the snapshot's files. Without the blob store to read
// the record from, it waits for the host (Capacity).
func TestCreateFromPublishedSnapshotWithVolumes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	shared := agenttest.NewBlob()
	e.a.UseBlob(shared)
	e.b.UseBlob(shared)
	v, err := e.svc.CreateVolume(ctx, e.team, "data", 16)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: []store.VolumeAttachment{{VolumeID: v.ID, MountPath: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	src, other := e.a, e.b
	if sb.HostID == "host-b" {
		src, other = e.b, e.a
	}
	if _, err := agentclient.New(src.URL(), token).WriteFile(ctx, sb.ID, "/data/note", strings.NewReader("kept"), 4); err != nil {
		t.Fatal(err)
	}
	sn, err := e.svc.Snapshot(ctx, sb)
	if err != nil || !sn.Published {
		t.Fatalf("snapshot: %+v %v", sn, err)
	}
	// The host's publication, as a real host leaves it in the blob store: the record with the copies.
	hs, err := agentclient.New(src.URL(), token).GetSnapshot(ctx, sn.ID)
	if err != nil || len(hs.Volumes) != 1 {
		t.Fatalf("the host's snapshot: %+v %v", hs, err)
	}
	bs, err := blob.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := artifact.Push(ctx, bs, snapshotKind, sn.ID, t.TempDir(), nil, hs); err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkHostDown(ctx, sb.HostID, "test"); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &sn})
	wantKind(t, err, errdefs.Capacity)
	e.svc.blob = bs
	got, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &sn})
	if err != nil || got.HostID == sb.HostID {
		t.Fatalf("create from the published snapshot with its host down: %+v %v", got, err)
	}
	atts, err := e.st.SandboxVolumes(ctx, got.ID)
	if err != nil || len(atts) != 1 || atts[0].VolumeID == v.ID || atts[0].MountPath != "/data" {
		t.Fatalf("the new sandbox's volumes: %+v %v", atts, err)
	}
	if c, err := e.st.GetVolume(ctx, atts[0].VolumeID); err != nil || c.HostID != got.HostID || c.Name != CopyName("data", got.ID) || c.SizeMiB != 16 {
		t.Fatalf("the new sandbox's volume: %+v %v", c, err)
	}
	if !slices.Contains(other.Volumes(), atts[0].VolumeID) {
		t.Fatalf("%s keeps volumes %v, not %s", got.HostID, other.Volumes(), atts[0].VolumeID)
	}
	if data := readAsRoot(t, e, got, "/data/note"); data != "kept" {
		t.Fatalf("the new sandbox reads %q from its volume", data)
	}
}
