package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAppRoutes: app names are unique across teams; a route switch (app or preview) is a
// compare-and-set that marks the new deployment live and the old superseded; a delivery id is
// claimed once; deleting an app takes its deployments, previews and deliveries.
func TestAppRoutes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		mkTeams(t, s, "team_a", "team_b")
		a, err := s.CreateApp(ctx, App{ID: "app_1", TeamID: "team_a", Name: "web", Branch: "main", Build: "{}"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateApp(ctx, App{ID: "app_2", TeamID: "team_b", Name: "web", Branch: "main", Build: "{}"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("a taken name: %v", err)
		}
		if _, err := s.GetTeamApp(ctx, "team_b", "web"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team's app: %v", err)
		}
		for _, id := range []string{"dep_1", "dep_2", "dep_3"} {
			if _, err := s.CreateDeployment(ctx, Deployment{ID: id, AppID: a.ID, TeamID: "team_a", State: "deploying", Source: "upload"}); err != nil {
				t.Fatal(err)
			}
		}
		state := func(id string) string {
			d, err := s.GetDeployment(ctx, a.ID, id)
			if err != nil {
				t.Fatal(err)
			}
			return d.State
		}
		if ok, err := s.SetLiveDeployment(ctx, a.ID, "", "dep_1"); !ok || err != nil {
			t.Fatalf("first switch: %v %v", ok, err)
		}
		if ok, err := s.SetLiveDeployment(ctx, a.ID, "", "dep_2"); ok || err != nil {
			t.Fatalf("a switch from a stale route went through: %v %v", ok, err)
		}
		if ok, err := s.SetLiveDeployment(ctx, a.ID, "dep_1", "dep_2"); !ok || err != nil || state("dep_1") != "superseded" || state("dep_2") != "live" {
			t.Fatalf("second switch: %v %v %s %s", ok, err, state("dep_1"), state("dep_2"))
		}
		if ok, err := s.SetPreview(ctx, a.ID, "feature-x", "", "dep_3"); !ok || err != nil || state("dep_3") != "live" {
			t.Fatalf("preview: %v %v", ok, err)
		}
		if ok, err := s.SetPreview(ctx, a.ID, "feature-x", "", "dep_1"); ok || err != nil {
			t.Fatalf("a second preview insert: %v %v", ok, err)
		}
		if id, err := s.GetPreview(ctx, a.ID, "feature-x"); id != "dep_3" || err != nil {
			t.Fatalf("preview route: %q %v", id, err)
		}
		if ps, err := s.ListPreviews(ctx, a.ID); err != nil || len(ps) != 1 || ps[0] != (Preview{"feature-x", "dep_3"}) {
			t.Fatalf("previews: %v %v", ps, err)
		}
		// A superseded deployment's own URL instance: compare-and-set.
		if ok, err := s.SetDeploymentInstance(ctx, "dep_1", "", "sb_url"); !ok || err != nil {
			t.Fatalf("url instance: %v %v", ok, err)
		}
		if ok, err := s.SetDeploymentInstance(ctx, "dep_1", "", "sb_other"); ok || err != nil {
			t.Fatalf("a stale url instance went through: %v %v", ok, err)
		}
		if ok, _ := s.SetDeploymentInstance(ctx, "dep_2", "", "sb_x"); ok {
			t.Fatal("a live deployment got a url instance")
		}
		if ds, err := s.ListInstanceDeployments(ctx); err != nil || len(ds) != 1 || ds[0].SandboxID != "sb_url" {
			t.Fatalf("deployments with instances: %v %v", ds, err)
		}
		// Deleting a preview: compare-and-set, its deployment superseded.
		if ok, err := s.DeletePreview(ctx, a.ID, "feature-x", "dep_1"); ok || err != nil {
			t.Fatalf("a stale preview delete went through: %v %v", ok, err)
		}
		if ok, err := s.DeletePreview(ctx, a.ID, "feature-x", "dep_3"); !ok || err != nil || state("dep_3") != "superseded" {
			t.Fatalf("preview delete: %v %v %s", ok, err, state("dep_3"))
		}
		if id, _ := s.GetPreview(ctx, a.ID, "feature-x"); id != "" {
			t.Fatalf("deleted preview still routes to %s", id)
		}
		// Orphaned deployments: an unfinished one whose lease passed is failed once; one whose
		// lease holds, and a route's, are not.
		now := s.now().UTC()
		for _, d := range []Deployment{{ID: "dep_lost", State: "building", LeaseUntil: now.Add(-time.Minute)},
			{ID: "dep_held", State: "queued", LeaseUntil: now.Add(time.Minute)}, {ID: "dep_route", State: "deploying"}} {
			d.AppID, d.TeamID, d.Source = a.ID, "team_a", "upload"
			if _, err := s.CreateDeployment(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := s.SetPreview(ctx, a.ID, "other", "", "dep_route"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		s.exec(ctx, s.db, `UPDATE app_deployments SET state = 'deploying' WHERE id = 'dep_route'`)
		if ds, err := s.FailOrphanedDeployments(ctx, now, "gone"); err != nil || len(ds) != 1 || ds[0].ID != "dep_lost" {
			t.Fatalf("orphaned: %v %v", ds, err)
		}
		if d, _ := s.GetDeployment(ctx, a.ID, "dep_lost"); d.State != "failed" || d.Error != "gone" || !d.LeaseUntil.IsZero() {
			t.Fatalf("orphan after: %+v", d)
		}
		if ds, err := s.FailOrphanedDeployments(ctx, now.Add(time.Hour), "gone"); err != nil || len(ds) != 1 || ds[0].ID != "dep_held" {
			t.Fatalf("orphaned later: %v %v", ds, err)
		}
		if fresh, err := s.ClaimDelivery(ctx, a.ID, "d-1"); !fresh || err != nil {
			t.Fatalf("first delivery: %v %v", fresh, err)
		}
		if fresh, err := s.ClaimDelivery(ctx, a.ID, "d-1"); fresh || err != nil {
			t.Fatalf("repeated delivery: %v %v", fresh, err)
		}
		if err := s.DeleteApp(ctx, "team_b", a.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another team deleted it: %v", err)
		}
		if err := s.DeleteApp(ctx, "team_a", a.ID); err != nil {
			t.Fatal(err)
		}
		if ds, _ := s.ListDeployments(ctx, a.ID, 0); len(ds) != 0 {
			t.Fatalf("deployments left: %d", len(ds))
		}
		if id, _ := s.GetPreview(ctx, a.ID, "feature-x"); id != "" {
			t.Fatal("preview left")
		}
		if fresh, _ := s.ClaimDelivery(ctx, a.ID, "d-1"); !fresh {
			t.Fatal("deliveries left")
		}
	})
}

// TestDeploymentChanges: every change of a deployment's state (made, built, switched to, superseded,
// failed as orphaned) moves it into the team's changes after the last cursor; another team's never.
func TestDeploymentChanges(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		a, err := s.CreateApp(ctx, App{ID: "app_1", TeamID: "team_a", Name: "web", Branch: "main", Build: "{}"})
		if err != nil {
			t.Fatal(err)
		}
		cursor := clk.now()
		clk.add(time.Millisecond)
		// changed returns the ids changed after the cursor, in order, and moves the cursor on.
		changed := func(team string) []string {
			t.Helper()
			clk.add(time.Second)
			ds, err := s.DeploymentsChangedSince(ctx, team, cursor, 100)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range ds {
				ids = append(ids, d.ID+":"+d.State)
			}
			if team == "team_a" {
				cursor = clk.now()
				clk.add(time.Millisecond)
			}
			return ids
		}
		want := func(got []string, want ...string) {
			t.Helper()
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("changes %v, want %v", got, want)
			}
		}
		mk := func(id string, lease time.Time) Deployment {
			d, err := s.CreateDeployment(ctx, Deployment{ID: id, AppID: a.ID, TeamID: "team_a", State: "queued", Source: "upload", LeaseUntil: lease})
			if err != nil {
				t.Fatal(err)
			}
			clk.add(time.Millisecond)
			return d
		}
		d1, d2 := mk("dep_1", time.Time{}), mk("dep_2", time.Time{})
		want(changed("team_a"), "dep_1:queued", "dep_2:queued")
		want(changed("team_a"))
		d1.State = "building"
		if _, err := s.UpdateDeployment(ctx, d1, false); err != nil {
			t.Fatal(err)
		}
		want(changed("team_a"), "dep_1:building")
		if ok, err := s.SetLiveDeployment(ctx, a.ID, "", d1.ID); !ok || err != nil {
			t.Fatal(ok, err)
		}
		want(changed("team_a"), "dep_1:live")
		if ok, err := s.SetLiveDeployment(ctx, a.ID, d1.ID, d2.ID); !ok || err != nil {
			t.Fatal(ok, err)
		}
		want(changed("team_a"), "dep_1:superseded", "dep_2:live")
		mk("dep_lost", clk.now().Add(-time.Minute))
		want(changed("team_a"), "dep_lost:queued")
		if ds, err := s.FailOrphanedDeployments(ctx, clk.now(), "gone"); err != nil || len(ds) != 1 {
			t.Fatal(ds, err)
		}
		want(changed("team_a"), "dep_lost:failed")
		want(changed("team_b"))
	})
}
