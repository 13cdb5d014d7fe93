package agenttest

import (
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// RunTravel is the contract of two hosts sharing a blob store (internal/host/snapshot publish.go,
// internal/host/sandbox travel.go): what one host publishes another restores, as the control
// plane drives a cross-host fork and a wake elsewhere. Host a creates a sandbox, snapshots it
// (published) and hibernates it (published); host b restores the snapshot (plain, and as a fork
// child of the parent, which takes the parent's env), refuses a snapshot no store holds, and
// adopts the hibernated sandbox under its id. TestTravelFake runs it on two fakes; the VM test
// TestSnapshotsTravelThroughBlobStore on two real agents, with also checks of what only a real
// guest has (GuestChecks).
func RunTravel(t *testing.T, a, b Target, g GuestChecks) {
	ka, kb := &contract{c: a.Client, tpl: a.Template}, &contract{c: b.Client, tpl: b.Template}
	parent := must[agentclient.Sandbox](t, "create the parent")(a.Client.CreateSandbox(ctx(),
		agentclient.CreateRequest{Template: a.Template, Env: map[string]string{"PARENT_VAR": "p1"}}))
	defer a.Client.KillSandbox(ctx(), parent.ID)
	ka.write(t, parent.ID, "/tmp/mark", "from-host-a")
	if g.Prepare != nil {
		g.Prepare(t, a.Client, parent.ID)
	}

	snap := must[agentclient.Snapshot](t, "snapshot")(a.Client.CreateSnapshot(ctx(), parent.ID))
	if !snap.Published {
		t.Fatalf("a host with a blob store did not publish its snapshot: %+v", snap)
	}
	// A cross-host fork's snapshot (taken without the guest's sync): published as well, and its
	// child sees what the parent wrote just before.
	forkSnap := must[agentclient.Snapshot](t, "snapshot for a fork")(a.Client.CreateForkSnapshot(ctx(), parent.ID))
	if !forkSnap.Published {
		t.Fatalf("a host with a blob store did not publish a fork's snapshot: %+v", forkSnap)
	}
	for _, forkOf := range []string{"", parent.ID} {
		from := snap
		if forkOf != "" {
			from = forkSnap
		}
		sb := must[agentclient.Sandbox](t, "restore on the other host")(b.Client.CreateSandbox(ctx(),
			agentclient.CreateRequest{SnapshotID: from.ID, ForkOf: forkOf}))
		defer b.Client.KillSandbox(ctx(), sb.ID)
		wantSnap := snap.ID // a fork child, as one made on its parent's host, names no snapshot
		if forkOf != "" {
			wantSnap = ""
		}
		if sb.State != agentclient.StateRunning || sb.ForkOf != forkOf || sb.SnapshotID != wantSnap || sb.Template != a.Template ||
			sb.MemoryMiB != snap.MemoryMiB {
			t.Errorf("restore of %s on the other host (fork_of %q): %+v", from.ID, forkOf, sb)
		}
		kb.wantFile(t, sb.ID, "/tmp/mark", "from-host-a")
		// A fork child takes its parent's env; a plain restore only its create's.
		want := agentclient.ExecResult{ExitCode: 1}
		if forkOf != "" {
			want = agentclient.ExecResult{Stdout: "p1\n"}
		}
		if r := kb.run(t, sb.ID, agentclient.ExecRequest{Cmd: "printenv PARENT_VAR"}); r.ExitCode != want.ExitCode || r.Stdout != want.Stdout {
			t.Errorf("env of a restore on the other host (fork_of %q): %+v", forkOf, r)
		}
		if g.Alive != nil {
			g.Alive(t, b.Client, sb.ID)
		}
	}
	_, err := b.Client.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: "snap_nowhere"})
	wantErr(t, "restore a snapshot no store holds", err, 404, "not_found")
	_, err = b.Client.CreateSandbox(ctx(), agentclient.CreateRequest{ForkOf: parent.ID})
	wantErr(t, "a fork child without its snapshot", err, 400, "invalid_request")

	hib := must[agentclient.Sandbox](t, "hibernate")(a.Client.Hibernate(ctx(), parent.ID))
	if hib.State != agentclient.StateHibernated || hib.Hibernated == "" {
		t.Fatalf("hibernate on a host with a blob store: %+v (want a publication)", hib)
	}
	_, err = b.Client.CreateSandbox(ctx(), agentclient.CreateRequest{ID: parent.ID, Hibernated: hib.Hibernated, Template: a.Template})
	wantErr(t, "adopt with a template as well", err, 400, "invalid_request")
	_, err = b.Client.CreateSandbox(ctx(), agentclient.CreateRequest{ID: parent.ID, Hibernated: parent.ID + "-99"})
	wantErr(t, "adopt a publication no store holds", err, 404, "not_found")
	moved := must[agentclient.Sandbox](t, "adopt")(b.Client.CreateSandbox(ctx(), agentclient.CreateRequest{ID: parent.ID, Hibernated: hib.Hibernated}))
	defer b.Client.KillSandbox(ctx(), moved.ID)
	if moved.ID != parent.ID || moved.State != agentclient.StateRunning || moved.Hibernated != "" {
		t.Errorf("adopted sandbox: %+v", moved)
	}
	kb.wantFile(t, moved.ID, "/tmp/mark", "from-host-a")
	if r := kb.run(t, moved.ID, agentclient.ExecRequest{Cmd: "printenv PARENT_VAR"}); r.Stdout != "p1\n" {
		t.Errorf("env of the adopted sandbox: %+v", r)
	}
	if g.Alive != nil {
		g.Alive(t, b.Client, moved.ID)
	}
}

// GuestChecks are what a real guest adds to RunTravel (a fake has no processes to keep): Prepare
// runs on the parent before its snapshot, Alive on every sandbox the other host restores or
// adopts from it. Either may be nil.
type GuestChecks struct {
	Prepare, Alive func(t *testing.T, c *agentclient.Client, id string)
}
