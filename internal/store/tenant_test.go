package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAuditLog: entries are kept per team, filtered by time and resource, paged newest first,
// and pruned by age across teams.
func TestAuditLog(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		add := func(id, team, res string, at time.Time) {
			t.Helper()
			err := s.AppendAudit(ctx, AuditEntry{ID: id, TeamID: team, KeyID: "key_" + team, Method: "DELETE",
				Route: "/v1/sandboxes/{id}", ResourceID: res, Status: 204, RequestID: "req_" + id, Source: "127.0.0.1", CreatedAt: at})
			if err != nil {
				t.Fatal(err)
			}
		}
		add("a1", "ta", "sb_1", t0)
		add("a2", "ta", "sb_2", t0.Add(time.Hour))
		add("a3", "ta", "sb_1", t0.Add(2*time.Hour))
		add("b1", "tb", "sb_9", t0.Add(time.Hour))

		ids := func(es []AuditEntry) (out []string) {
			for _, e := range es {
				out = append(out, e.ID)
			}
			return out
		}
		got, next, err := s.ListAudit(ctx, AuditFilter{TeamID: "ta", Limit: 2})
		if err != nil || len(got) != 2 || got[0].ID != "a3" || got[1].ID != "a2" || next == "" {
			t.Fatalf("first page: %v %q %v", ids(got), next, err)
		}
		if e := got[0]; e.KeyID != "key_ta" || e.Method != "DELETE" || e.Route != "/v1/sandboxes/{id}" || e.ResourceID != "sb_1" ||
			e.Status != 204 || e.RequestID != "req_a3" || e.Source != "127.0.0.1" || !e.CreatedAt.Equal(t0.Add(2*time.Hour)) {
			t.Fatalf("entry: %+v", e)
		}
		got, next, err = s.ListAudit(ctx, AuditFilter{TeamID: "ta", Limit: 2, Cursor: next})
		if err != nil || len(got) != 1 || got[0].ID != "a1" || next != "" {
			t.Fatalf("second page: %v %q %v", ids(got), next, err)
		}
		if got, _, _ := s.ListAudit(ctx, AuditFilter{TeamID: "ta", ResourceID: "sb_1"}); len(got) != 2 {
			t.Fatalf("by resource: %v", ids(got))
		}
		if got, _, _ := s.ListAudit(ctx, AuditFilter{TeamID: "ta", Since: t0.Add(time.Hour)}); len(got) != 2 {
			t.Fatalf("since: %v", ids(got))
		}
		if got, _, _ := s.ListAudit(ctx, AuditFilter{TeamID: "tb"}); len(got) != 1 || got[0].ID != "b1" {
			t.Fatalf("team b: %v", ids(got))
		}
		n, err := s.PruneAudit(ctx, t0.Add(90*time.Minute))
		if err != nil || n != 3 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if got, _, _ := s.ListAudit(ctx, AuditFilter{TeamID: "ta"}); len(got) != 1 || got[0].ID != "a3" {
			t.Fatalf("after prune: %v", ids(got))
		}
	})
}

// TestQuotaOverrideAndUse: a team's override is stored and replaced, nil fields stay nil, a
// missing team is ErrNotFound; live use counts running and hibernated sandboxes by template.
func TestQuotaOverrideAndUse(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		withClock(s)
		mkTeams(t, s, "team_a", "team_b")
		if o, err := s.GetQuotaOverride(ctx, "team_a"); err != nil || o.Sandboxes != nil || o.VCPUs != nil || o.MemoryMiB != nil {
			t.Fatalf("no override: %+v %v", o, err)
		}
		ten, zero := int64(10), int64(0)
		if err := s.SetQuotaOverride(ctx, "team_a", QuotaOverride{Sandboxes: &ten, MemoryMiB: &zero}); err != nil {
			t.Fatal(err)
		}
		o, err := s.GetQuotaOverride(ctx, "team_a")
		if err != nil || o.Sandboxes == nil || *o.Sandboxes != 10 || o.VCPUs != nil || o.MemoryMiB == nil || *o.MemoryMiB != 0 {
			t.Fatalf("override: %+v %v", o, err)
		}
		if err := s.SetQuotaOverride(ctx, "team_a", QuotaOverride{VCPUs: &ten}); err != nil {
			t.Fatal(err)
		}
		if o, _ := s.GetQuotaOverride(ctx, "team_a"); o.Sandboxes != nil || o.VCPUs == nil || *o.VCPUs != 10 {
			t.Fatalf("replaced override: %+v", o)
		}
		if err := s.SetQuotaOverride(ctx, "team_nope", QuotaOverride{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing team: %v", err)
		}

		for i, c := range []struct{ team, tmpl, state string }{
			{"team_a", "base", StateRunning}, {"team_a", "base", StateHibernated}, {"team_a", "py", StateRunning},
			{"team_a", "base", StateKilled}, {"team_a", "py", StateLost}, {"team_b", "base", StateRunning},
		} {
			sb := Sandbox{ID: "sb_" + string(rune('a'+i)), TeamID: c.team, Template: c.tmpl, State: c.state}
			if _, err := s.CreateSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		use, err := s.LiveSandboxTemplates(ctx, "team_a")
		if err != nil || len(use) != 2 || use["base"] != 2 || use["py"] != 1 {
			t.Fatalf("use: %v %v", use, err)
		}
		if n, mib, err := s.VolumeUse(ctx, "team_a"); err != nil || n != 0 || mib != 0 {
			t.Fatalf("no volumes: %d %d %v", n, mib, err)
		}
		for i, size := range []int64{100, 250, 50} {
			if _, err := s.CreateVolume(ctx, Volume{ID: "vol_" + string(rune('a'+i)), TeamID: "team_a", SizeMiB: size, HostID: "h"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeleteVolume(ctx, "team_a", "vol_c"); err != nil {
			t.Fatal(err)
		}
		if n, mib, err := s.VolumeUse(ctx, "team_a"); err != nil || n != 2 || mib != 350 {
			t.Fatalf("volume use: %d %d %v", n, mib, err)
		}
	})
}
