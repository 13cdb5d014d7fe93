package api

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestE2EVolumeSnapshotsAndForks: through the public API on a real host, a snapshot of a sandbox
// with a volume holds the volume as it was; a sandbox made from it, and each fork child, mounts a
// volume of its own made from the copy (the team's, named after it), and no write in one copy is
// seen in another or in the original.
func TestE2EVolumeSnapshotsAndForks(t *testing.T) {
	t.Parallel()
	ctx, _, _, c := startE2E(t, 20*time.Minute)
	vol, src := e2eWithVolume(t, ctx, c, "pgdata")
	sh := func(id, cmd string) string { return e2eSh(t, ctx, c, id, cmd) }
	const read = "cat /data/a; cat /data/b 2>/dev/null || echo no-b"
	sh(src.ID, "echo one > /data/a")
	snap, err := c.CreateSnapshot(ctx, src.ID)
	if err != nil || snap.Published {
		t.Fatalf("snapshot with a volume: %+v %v", snap, err)
	}
	sh(src.ID, "echo two > /data/a; echo b > /data/b")

	// The volume made for a sandbox (its only one), as the team's list shows it.
	volumeOf := func(id string) client.Volume {
		t.Helper()
		vs, err := c.ListVolumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if len(v.Attachments) == 1 && v.Attachments[0].SandboxID == id {
				if v.ID == vol.ID || v.Name != sandboxes.CopyName("pgdata", id) || v.SizeMiB != 64 || v.Attachments[0].MountPath != "/data" {
					t.Fatalf("volume of %s: %+v", id, v)
				}
				return v
			}
		}
		t.Fatalf("no volume attached to %s", id)
		return client.Volume{}
	}

	restored, err := c.CreateSandbox(ctx, client.CreateRequest{SnapshotID: snap.ID})
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	rv := volumeOf(restored.ID)
	if got := sh(restored.ID, read); got != "one\nno-b" {
		t.Errorf("restored copy reads %q, want the snapshot's", got)
	}
	sh(restored.ID, "echo restored > /data/a")

	kids, err := c.Fork(ctx, src.ID, 2)
	if err != nil || len(kids) != 2 {
		t.Fatalf("fork with a volume: %+v %v", kids, err)
	}
	seen := map[string]bool{vol.ID: true, rv.ID: true}
	for _, k := range kids {
		if v := volumeOf(k.ID); seen[v.ID] {
			t.Fatalf("fork child %s shares volume %s", k.ID, v.ID)
		} else {
			seen[v.ID] = true
		}
	}
	sh(kids[0].ID, "echo child > /data/a")
	for id, want := range map[string]string{src.ID: "two\nb", restored.ID: "restored\nno-b", kids[0].ID: "child\nb", kids[1].ID: "two\nb"} {
		if got := sh(id, read); got != want {
			t.Errorf("%s reads %q, want %q", id, got, want)
		}
	}

	// Refused: another volume beside a snapshot's copies; a cross-host fork is refused elsewhere
	// (TestCreateWithVolumesOnTheirHost), read-only volumes in TestVolumeAttachRules.
	other, err := c.CreateVolume(ctx, 8, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, client.CreateRequest{SnapshotID: snap.ID, Volumes: []client.VolumeMount{{VolumeID: other.ID, MountPath: "/x"}}})
	if apiCode(err) != "409 conflict" {
		t.Errorf("create from a snapshot with volumes, with another volume: %v", err)
	}

	// The copies outlive their sandboxes, and are deleted like any volume.
	if err := c.KillSandbox(ctx, restored.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(context.WithoutCancel(ctx), rv.ID); err != nil {
		t.Errorf("delete the restored copy: %v", err)
	}
}

// TestE2ETemplateDataVolume: a team template built with a data volume (its build step and start
// command write there); each sandbox of it mounts its own copy of that volume, recorded as the
// team's (named after the template), and a write in one is not seen in another.
func TestE2ETemplateDataVolume(t *testing.T) {
	t.Parallel()
	ctx, _, cp, c := startE2E(t, 20*time.Minute)
	spec := testenv.VolumeTemplate()
	if _, err := c.BuildTemplate(ctx, spec.JSON(), nil); err != nil {
		t.Fatalf("build a template with a data volume: %v", err)
	}
	const dir = testenv.VolumeTemplatePath
	sh := func(id, cmd string) string {
		t.Helper()
		r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: cmd, TimeoutSeconds: client.Seconds(60)})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %q in %s: %+v %v", cmd, id, r, err)
		}
		return strings.ReplaceAll(strings.TrimSpace(r.Stdout), "\n", " ")
	}
	const read = "cat " + dir + "/built " + dir + "/started; cat " + dir + "/w 2>/dev/null || echo no-w"
	vols := map[string]client.Volume{}
	for range 2 {
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: spec.Name})
		if err != nil {
			t.Fatalf("create from the template: %v", err)
		}
		if got := sh(sb.ID, read); got != "built started no-w" {
			t.Errorf("%s reads %q, want the build's and the start's files", sb.ID, got)
		}
		vs, err := c.ListVolumes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if len(v.Attachments) == 1 && v.Attachments[0].SandboxID == sb.ID {
				if v.Name != sandboxes.CopyName(spec.Name, sb.ID) || v.SizeMiB != 64 || v.Attachments[0].MountPath != dir {
					t.Errorf("volume of %s: %+v", sb.ID, v)
				}
				vols[sb.ID] = v
			}
		}
		if _, ok := vols[sb.ID]; !ok {
			t.Fatalf("no volume listed for %s: %+v", sb.ID, vs)
		}
	}
	var ids []string
	for id := range vols {
		ids = append(ids, id)
	}
	a, b := ids[0], ids[1]
	if vols[a].ID == vols[b].ID {
		t.Fatalf("both sandboxes have volume %s", vols[a].ID)
	}
	sh(a, "echo mine > "+dir+"/w")
	if got := sh(b, read); got != "built started no-w" {
		t.Errorf("after a write in %s, %s reads %q", a, b, got)
	}
	// Another team sees none of them.
	_, kb, err := c.CreateTeam(ctx, "e2e-tmplvol-beta")
	if err != nil {
		t.Fatal(err)
	}
	if vs, err := cp.client(kb.Key).ListVolumes(ctx); err != nil || len(vs) != 0 {
		t.Errorf("another team's volumes: %+v %v", vs, err)
	}
	// Killed, the sandboxes let go of their copies, which the team then deletes.
	for id, v := range vols {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteVolume(ctx, v.ID); err != nil {
			t.Errorf("delete %s after its sandbox's kill: %v", v.ID, err)
		}
	}
}

// TestE2EVolumesAcrossHosts: two real hosts sharing a blob store. A snapshot of a sandbox with a
// volume on host A is published with its copy; a fork of it onto host B has a volume of its own
// there (the team's, recorded on B) with A's file; the sandbox, hibernated and its host A then
// down, wakes on B on its next call with its volume, which the store then records on B; a create
// from the snapshot, its host down, is made on B with a copy of the volume.
func TestE2EVolumesAcrossHosts(t *testing.T) {
	testenv.NeedVMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	shared := "file://" + t.TempDir()
	withBlob := func(c *hostagent.Config) { c.BlobStore = shared }
	a, b := startVMHostWith(t, withBlob), startVMHostWith(t, withBlob)
	a.bake(ctx, "base")
	infoA, errA := a.client().Info(ctx)
	infoB, errB := b.client().Info(ctx)
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	// Host A alone first: the volume and its sandbox are placed there.
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{}, Config{}, a)
	c := cp.client(cp.admin)
	vol, src := e2eWithVolume(t, ctx, c, "data")
	sh := func(id, cmd string) string { return e2eSh(t, ctx, c, id, cmd) }
	sh(src.ID, "echo from-a > /data/note")
	snap, err := c.CreateSnapshot(ctx, src.ID)
	if err != nil || !snap.Published {
		t.Fatalf("snapshot with a volume on a host with a blob store: %+v %v", snap, err)
	}

	// Both hosts now; A is marked down soon after it stops answering.
	admin := cp.admin
	cp.stop()
	bs, err := blob.Open(ctx, shared) // the control plane's view of the hosts' store
	if err != nil {
		t.Fatal(err)
	}
	cp = startCP(t, cp.dbPath, scheduler.Config{HeartbeatTimeout: 3 * time.Second, PollInterval: 500 * time.Millisecond}, Config{Blob: bs}, a, b)
	cp.admin = admin
	c = cp.client(admin)
	kids, err := c.ForkTo(ctx, src.ID, 1, infoB.HostID)
	if err != nil || len(kids) != 1 || kids[0].Host != infoB.HostID {
		t.Fatalf("fork of a sandbox with a volume onto host B: %+v %v", kids, err)
	}
	if got := sh(kids[0].ID, "cat /data/note"); got != "from-a" {
		t.Errorf("the child on host B reads %q", got)
	}
	atts, err := cp.st.SandboxVolumes(ctx, kids[0].ID)
	if err != nil || len(atts) != 1 || atts[0].VolumeID == vol.ID {
		t.Fatalf("the child's volumes: %+v %v", atts, err)
	}
	if v, err := cp.st.GetVolume(ctx, atts[0].VolumeID); err != nil || v.HostID != infoB.HostID || v.Name != sandboxes.CopyName("data", kids[0].ID) {
		t.Errorf("the child's volume: %+v %v", v, err)
	}

	sh(src.ID, "echo before-hibernate > /data/note")
	if hib, err := c.Hibernate(ctx, src.ID); err != nil || hib.State != "hibernated" {
		t.Fatalf("hibernate: %+v %v", hib, err)
	}
	a.stop()
	waitFor(t, 20*time.Second, "host A to be marked down", func() bool {
		h, err := cp.st.GetHost(ctx, infoA.HostID)
		return err == nil && h.State == store.HostDown
	})
	if got := sh(src.ID, "cat /data/note"); got != "before-hibernate" {
		t.Errorf("the sandbox woken on host B reads %q", got)
	}
	if got, err := c.GetSandbox(ctx, src.ID); err != nil || got.Host != infoB.HostID || got.State != "running" {
		t.Fatalf("the sandbox after its host went down: %+v %v", got, err)
	}
	if v, err := cp.st.GetVolume(ctx, vol.ID); err != nil || v.HostID != infoB.HostID {
		t.Errorf("the woken sandbox's volume: %+v %v (want it on host B)", v, err)
	}
	// A create from the snapshot, its host down: the copies are learnt from the publication.
	restored, err := c.CreateSandbox(ctx, client.CreateRequest{SnapshotID: snap.ID})
	if err != nil || restored.Host != infoB.HostID {
		t.Fatalf("create from the published snapshot with its host down: %+v %v", restored, err)
	}
	if got := sh(restored.ID, "cat /data/note"); got != "from-a" {
		t.Errorf("the restore on host B reads %q", got)
	}
}

// e2eWithVolume creates a 64 MiB volume named name and a sandbox of base with it at /data.
func e2eWithVolume(t *testing.T, ctx context.Context, c *client.Client, name string) (client.Volume, client.Sandbox) {
	t.Helper()
	vol, err := c.CreateVolume(ctx, 64, name)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", Volumes: []client.VolumeMount{{VolumeID: vol.ID, MountPath: "/data"}}})
	if err != nil {
		t.Fatalf("create with a volume: %v", err)
	}
	return vol, sb
}

// e2eSh runs cmd in sandbox id and returns its trimmed output; a failure fails the test.
func e2eSh(t *testing.T, ctx context.Context, c *client.Client, id, cmd string) string {
	t.Helper()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: cmd, TimeoutSeconds: client.Seconds(60)})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("exec %q in %s: %+v %v", cmd, id, r, err)
	}
	return strings.TrimSpace(r.Stdout)
}
