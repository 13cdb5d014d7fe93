package sandboxes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// An ephemeral template data volume: each sandbox's copy is its own (not the team's to list or
// count), its forks' and its snapshot's restores' copies are theirs, and each copy is deleted —
// recorded and on its host — when its sandbox is killed, or by the sweeper when the sandbox
// ended another way.
func TestEphemeralTemplateVolume(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ag := range []*agenttest.Agent{e.a, e.b} {
		ag.SetTemplateVolume("base", "/var/lib/db", 64, true)
	}
	if err := e.sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.svc.TemplateVolumes("base", "base"); len(got) != 1 || !got[0].Ephemeral {
		t.Fatalf("template volumes %+v", got)
	}
	if n, _ := CopiesNeed(e.svc.TemplateVolumes("base", "base"), 3); n != 0 {
		t.Fatalf("ephemeral copies hold %d of the team's volume quota", n)
	}
	host := func(sb store.Sandbox) *agenttest.Agent {
		if sb.HostID == "host-a" {
			return e.a
		}
		return e.b
	}
	// volumeOf returns sb's one volume, checking it is the sandbox's and alive where recorded.
	volumeOf := func(sb store.Sandbox) store.Volume {
		t.Helper()
		atts, err := e.st.SandboxVolumes(ctx, sb.ID)
		if err != nil || len(atts) != 1 {
			t.Fatalf("volumes of %s: %+v %v", sb.ID, atts, err)
		}
		v, err := e.st.GetVolume(ctx, atts[0].VolumeID)
		if err != nil || v.Owner != store.OwnerSandbox || v.Deleted || v.HostID != sb.HostID {
			t.Fatalf("volume of %s: %+v %v", sb.ID, v, err)
		}
		if _, err := e.st.GetTeamVolume(ctx, e.team, v.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a sandbox's own volume is the team's to get: %v", err)
		}
		if !slices.Contains(host(sb).Volumes(), v.ID) {
			t.Fatalf("%s does not keep volume %s", sb.HostID, v.ID)
		}
		return v
	}
	gone := func(v store.Volume) {
		t.Helper()
		got, err := e.st.GetVolume(ctx, v.ID)
		if err != nil || !got.Deleted {
			t.Fatalf("volume %s after its sandbox ended: %+v %v", v.ID, got, err)
		}
		if slices.Contains(e.a.Volumes(), v.ID) || slices.Contains(e.b.Volumes(), v.ID) {
			t.Fatalf("volume %s is still on its host", v.ID)
		}
	}

	parent, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base"})
	if err != nil {
		t.Fatal(err)
	}
	pv := volumeOf(parent)
	if vols, err := e.st.ListVolumes(ctx, e.team); err != nil || len(vols) != 0 {
		t.Fatalf("the team lists %+v %v", vols, err)
	}
	if n, mib, err := e.st.VolumeUse(ctx, e.team); err != nil || n != 0 || mib != 0 {
		t.Fatalf("the team's volume use: %d, %d MiB, %v", n, mib, err)
	}
	kids, err := e.svc.Fork(ctx, parent, 1)
	if err != nil {
		t.Fatal(err)
	}
	kv := volumeOf(kids[0])
	sn, err := e.svc.Snapshot(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Snapshot: &sn})
	if err != nil {
		t.Fatal(err)
	}
	rv := volumeOf(restored)
	if pv.ID == kv.ID || pv.ID == rv.ID || kv.ID == rv.ID {
		t.Fatalf("copies share volumes: %s %s %s", pv.ID, kv.ID, rv.ID)
	}

	// A kill deletes the sandbox's volume, and only its.
	if err := e.svc.Kill(ctx, parent, "test"); err != nil {
		t.Fatal(err)
	}
	gone(pv)
	volumeOf(kids[0])
	// One ended without a kill here (stopped and recorded killed by another replica, say) is
	// swept.
	if err := agentclient.New(host(kids[0]).URL(), token).KillSandbox(ctx, kids[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.SetSandboxState(ctx, kids[0].ID, store.StateKilled, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if n := e.svc.releaseVolumes(ctx, nil); n != 1 {
		t.Fatalf("the sweeper released %d volumes, want 1", n)
	}
	gone(kv)
	volumeOf(restored)
	if n := e.svc.releaseVolumes(ctx, nil); n != 0 {
		t.Fatalf("the sweeper released %d volumes of live sandboxes", n)
	}
	// Expiries (the reaper's batch) delete theirs too.
	if _, err := e.svc.Expire(ctx, restored, false); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.RecordExpired(ctx, []string{restored.ID}); err != nil {
		t.Fatal(err)
	}
	gone(rv)
}

// A service's own volume attached beside a template's data volume (what a database whose VM died
// gets back, internal/database): the template's copy is the new sandbox's, in the first slot; the
// attached volume keeps its owner and outlives the sandbox; only its owner may attach it.
func TestAttachBesideTemplateVolume(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ag := range []*agenttest.Agent{e.a, e.b} {
		ag.SetTemplateVolume("base", "/data/db", 64, true)
	}
	if err := e.sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", VolumeOwner: store.OwnerDatabase})
	if err != nil {
		t.Fatal(err)
	}
	atts, err := e.st.SandboxVolumes(ctx, first.ID)
	if err != nil || len(atts) != 1 {
		t.Fatalf("volumes of %s: %+v %v", first.ID, atts, err)
	}
	kept := atts[0].VolumeID
	if err := e.svc.Kill(ctx, first, "its VM died"); err != nil {
		t.Fatal(err)
	}
	attach := []store.VolumeAttachment{{VolumeID: kept, MountPath: "/mnt/recover"}}
	if _, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: attach}); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("the team attached a database's volume as its own: %v", err)
	}
	over := []store.VolumeAttachment{{VolumeID: kept, MountPath: "/data/db/x"}}
	if _, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: over, AttachOwner: store.OwnerDatabase}); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("a volume mounted inside the data volume's copy: %v", err)
	}
	second, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: attach, AttachOwner: store.OwnerDatabase})
	if err != nil {
		t.Fatal(err)
	}
	if second.HostID != first.HostID {
		t.Fatalf("placed on %s, the volume is on %s", second.HostID, first.HostID)
	}
	atts, err = e.st.SandboxVolumes(ctx, second.ID)
	if err != nil || len(atts) != 2 {
		t.Fatalf("volumes of %s: %+v %v", second.ID, atts, err)
	}
	var copyID string
	for _, a := range atts {
		v, err := e.st.GetVolume(ctx, a.VolumeID)
		switch {
		case err != nil:
			t.Fatal(err)
		case a.VolumeID == kept && (a.MountPath != "/mnt/recover" || v.Owner != store.OwnerDatabase):
			t.Fatalf("the attached volume: %+v %+v", a, v)
		case a.VolumeID != kept && (a.MountPath != "/data/db" || v.Owner != store.OwnerSandbox):
			t.Fatalf("the template's copy: %+v %+v", a, v)
		case a.VolumeID != kept:
			copyID = a.VolumeID
		}
	}
	if _, err := e.svc.Create(ctx, e.team, CreateParams{Template: "base", AgentTemplate: "base", Volumes: attach, AttachOwner: store.OwnerDatabase}); err == nil {
		t.Fatal("a volume attached to two sandboxes at once")
	}
	if err := e.svc.Kill(ctx, second, "done"); err != nil {
		t.Fatal(err)
	}
	if v, err := e.st.GetVolume(ctx, copyID); err != nil || !v.Deleted {
		t.Fatalf("the template's copy after the kill: %+v %v", v, err)
	}
	if v, err := e.st.GetVolume(ctx, kept); err != nil || v.Deleted || !slices.Contains(e.a.Volumes(), kept) && !slices.Contains(e.b.Volumes(), kept) {
		t.Fatalf("the attached volume after the kill: %+v %v", v, err)
	}
}
