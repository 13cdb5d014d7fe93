package store

import (
	"context"
	"testing"
	"time"
)

// An E2B sandbox keeps the token it was first given and its timeout policy; a killed sandbox's
// row is pruned.
func TestE2BSandboxes(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a")
		for _, id := range []string{"sb_live", "sb_dead"} {
			if _, err := s.CreateSandbox(ctx, Sandbox{ID: id, TeamID: "team_a", Template: "base", State: StateRunning, HostID: "h1",
				ExpiresAt: clk.now().Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if tok, err := s.E2BAccessToken(ctx, "team_a", id, "first-"+id); err != nil || tok != "first-"+id {
				t.Fatalf("token %q %v", tok, err)
			}
		}
		if tok, err := s.E2BAccessToken(ctx, "team_a", "sb_live", "second"); err != nil || tok != "first-sb_live" {
			t.Fatalf("a second call changed the token: %q %v", tok, err)
		}
		if _, err := s.E2BAccessToken(ctx, "team_b", "sb_live", "x"); err == nil {
			t.Fatal("another team read the token")
		}
		if err := s.SetPauseOnTimeout(ctx, "sb_live", true); err != nil {
			t.Fatal(err)
		}
		if p, err := s.PausesOnTimeout(ctx, "sb_live"); err != nil || !p {
			t.Fatalf("pauses: %v %v", p, err)
		}
		if p, err := s.PausesOnTimeout(ctx, "sb_none"); err != nil || p {
			t.Fatalf("a sandbox without a row pauses: %v %v", p, err)
		}
		if m, err := s.PausingOnTimeout(ctx, []string{"sb_live", "sb_dead", "sb_none"}); err != nil || len(m) != 1 || !m["sb_live"] {
			t.Fatalf("pausing of three: %v %v", m, err)
		}
		// Restarted code contexts: the SDK's id → the context standing for it now.
		for _, c := range [][3]string{{"sb_live", "ctx1", "ctx2"}, {"sb_live", "ctx1", "ctx3"}, {"sb_live", "ctx4", "ctx5"},
			{"sb_live", "ctx4", ""}, {"sb_dead", "ctx1", "ctx9"}} {
			if err := s.SetE2BCodeContext(ctx, c[0], c[1], c[2]); err != nil {
				t.Fatal(err)
			}
		}
		if m, err := s.E2BCodeContexts(ctx, "sb_live"); err != nil || len(m) != 1 || m["ctx1"] != "ctx3" {
			t.Fatalf("code contexts: %v %v", m, err)
		}
		if _, err := s.SetSandboxState(ctx, "sb_dead", StateKilled, "test"); err != nil {
			t.Fatal(err)
		}
		if n, err := s.PruneE2BSandboxes(ctx); err != nil || n != 1 {
			t.Fatalf("pruned %d, %v", n, err)
		}
		if tok, err := s.E2BAccessToken(ctx, "team_a", "sb_live", "x"); err != nil || tok != "first-sb_live" {
			t.Fatalf("the live sandbox's row went: %q %v", tok, err)
		}
		if m, err := s.E2BCodeContexts(ctx, "sb_dead"); err != nil || len(m) != 0 {
			t.Fatalf("a killed sandbox's code contexts: %v %v", m, err)
		}
		if m, err := s.E2BCodeContexts(ctx, "sb_live"); err != nil || m["ctx1"] != "ctx3" {
			t.Fatalf("the live sandbox's code contexts went: %v %v", m, err)
		}
	})
}
