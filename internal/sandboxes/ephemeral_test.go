package sandboxes

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
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
