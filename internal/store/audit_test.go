package store

import (
	"context"
	"testing"
	"time"
)

// TestAuditLog: entries are kept per team, filtered by time and resource, paged newest first,
// and pruned by age across teams.
func TestAuditLog(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
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
