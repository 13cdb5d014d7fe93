package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestPruneKilledSandboxes: killed rows whose last change is older than the cut go, batch rows a
// statement until none is left, with their metadata and volume attachments; recent killed rows,
// live ones and killed ones a snapshot (not deleted), database or app deployment points at stay;
// a snapshot of a pruned sandbox stays readable.
func TestPruneKilledSandboxes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a")
		mk := func(id, state string) {
			t.Helper()
			if _, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1",
				Metadata: map[string]string{"k": "v"}}); err != nil {
				t.Fatal(err)
			}
			if state != StateRunning {
				if ok, err := s.SetSandboxState(ctx, id, state, "test"); !ok || err != nil {
					t.Fatalf("%s to %s: %v %v", id, state, ok, err)
				}
			}
		}
		var old []string
		for i := range 23 {
			old = append(old, fmt.Sprintf("sb_old%02d", i))
			mk(old[i], StateKilled)
		}
		if _, err := s.CreateVolume(ctx, Volume{ID: "vol_1", TeamID: "team_a", Name: "data", SizeMiB: 64, HostID: "h1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateSandboxWithVolumes(ctx, Sandbox{ID: "sb_vol", TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1"},
			[]VolumeAttachment{{SandboxID: "sb_vol", VolumeID: "vol_1", MountPath: "/data"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_vol", StateKilled, "test"); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"sb_snap", "sb_snapgone", "sb_db", "sb_app"} {
			mk(id, StateKilled)
		}
		mk("sb_live", StateRunning)
		mk("sb_asleep", StateHibernated)
		for _, sn := range []Snapshot{{ID: "snap_kept", SandboxID: "sb_snap"}, {ID: "snap_gone", SandboxID: "sb_snapgone"}, {ID: "snap_old", SandboxID: "sb_old00"}} {
			sn.TeamID, sn.HostID, sn.Template = "team_a", "h1", "base"
			if _, err := s.CreateSnapshot(ctx, sn); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"snap_gone", "snap_old"} {
			if err := s.DeleteSnapshot(ctx, "team_a", id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.CreateDatabase(ctx, Database{ID: "db_1", TeamID: "team_a", Name: "one", Version: "17", SandboxID: "sb_db", State: "running"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateDeployment(ctx, Deployment{ID: "dep_1", AppID: "app_1", TeamID: "team_a", State: "live", Source: "upload", SandboxID: "sb_app"}); err != nil {
			t.Fatal(err)
		}
		clk.add(6 * 24 * time.Hour)
		mk("sb_recent", StateKilled)
		clk.add(2 * 24 * time.Hour)
		cut := clk.now().Add(-7 * 24 * time.Hour) // after the old ones' kill, before sb_recent's

		if _, err := s.PruneKilledSandboxes(ctx, cut, 0); err == nil {
			t.Fatal("a batch of 0 was taken")
		}
		gone := append(slices.Clone(old), "sb_vol", "sb_snapgone") // 25: three statements of 10
		n, err := s.PruneKilledSandboxes(ctx, cut, 10)
		if err != nil || n != int64(len(gone)) {
			t.Fatalf("pruned %d (%v), want %d", n, err, len(gone))
		}
		for _, id := range gone {
			if _, err := s.GetSandbox(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want not found", id, err)
			}
		}
		for _, id := range []string{"sb_snap", "sb_db", "sb_app", "sb_live", "sb_asleep", "sb_recent"} {
			if _, err := s.GetSandbox(ctx, id); err != nil {
				t.Errorf("%s was pruned: %v", id, err)
			}
		}
		var meta, atts int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandbox_metadata`).Scan(&meta); err != nil || meta != 6 {
			t.Errorf("%d metadata rows (%v), want the 6 kept sandboxes'", meta, err)
		}
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandbox_volumes`).Scan(&atts); err != nil || atts != 0 {
			t.Errorf("%d attachment rows (%v), want the pruned sandbox's gone", atts, err)
		}
		if sn, err := s.GetSnapshot(ctx, "snap_old"); err != nil || sn.SandboxID != "sb_old00" {
			t.Errorf("the snapshot of a pruned sandbox: %+v %v", sn, err)
		}
		if v, err := s.GetVolume(ctx, "vol_1"); err != nil || len(v.Attachments) != 0 {
			t.Errorf("the volume of a pruned sandbox: %+v %v", v, err)
		}
		// An exact multiple of the batch ends with an empty statement; nothing is left to prune.
		if n, err := s.PruneKilledSandboxes(ctx, cut, 10); n != 0 || err != nil {
			t.Fatalf("second prune: %d %v", n, err)
		}
		// Once the database and deployment let their sandboxes go, those go too.
		if err := s.DeleteDatabase(ctx, "team_a", "db_1"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneKilledSandboxes(ctx, cut, 1); n != 1 || err != nil {
			t.Fatalf("prune after the database went: %d %v", n, err)
		}
		if _, err := s.GetSandbox(ctx, "sb_db"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("sb_db: %v", err)
		}
	})
}
