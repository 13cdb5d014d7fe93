package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func (e *env) audit(key, query string) v1.AuditPage {
	e.t.Helper()
	var p v1.AuditPage
	if err := json.Unmarshal(e.mustStatus(e.do("GET", "/v1/audit"+query, key, nil), 200).body, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestAuditLog: every mutating call is recorded with its key, route, resource, status, request
// id and source; reads are not; only admin keys read it, each its own team's; no secret or file
// content reaches a row; old entries are pruned.
func TestAuditLog(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	admin, err := e.srv.auth.Authenticate(ctx, e.admin)
	if err != nil {
		t.Fatal(err)
	}
	sb := e.create(e.admin, map[string]any{"template": "base"})
	e.clock.Add(time.Second) // entries of one instant have no order
	const content = "top-secret-file-content-4711"
	e.mustStatus(e.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/work/x.txt", e.admin, content), 200)
	e.clock.Add(time.Second) // entries of one instant have no order
	e.mustStatus(e.do("GET", "/v1/sandboxes/"+sb.ID, e.admin, nil), 200)
	kr := e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]any{"name": "ci"}), 201).json(t)
	e.clock.Add(time.Second) // entries of one instant have no order
	secret, keyID := kr["key"].(string), kr["id"].(string)
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID, secret, nil, "X-Request-Id", "my-req-1"), 204)
	e.clock.Add(time.Second) // entries of one instant have no order
	e.mustStatus(e.do("DELETE", "/v1/volumes/vol_nope", e.admin, nil), 404)
	e.clock.Add(time.Second) // entries of one instant have no order
	tm := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "beta"}), 201).json(t)
	e.clock.Add(time.Second) // entries of one instant have no order
	betaKey := tm["key"].(map[string]any)["key"].(string)

	p := e.audit(e.admin, "")
	type row struct {
		key, method, route, res string
		status                  int
	}
	var got []row
	for _, a := range p.Entries {
		got = append(got, row{a.KeyID, a.Method, a.Route, a.ResourceID, a.Status})
		if a.RequestID == "" || a.Source != "127.0.0.1" || a.CreatedAt == "" {
			t.Errorf("entry lacks request id, source or time: %+v", a)
		}
	}
	teamID := tm["team"].(map[string]any)["id"].(string)
	want := []row{
		{admin.KeyID, "POST", "/v1/teams", teamID, 201},
		{admin.KeyID, "DELETE", "/v1/volumes/{id}", "vol_nope", 404},
		{keyID, "DELETE", "/v1/sandboxes/{id}", sb.ID, 204},
		{admin.KeyID, "POST", "/v1/keys", keyID, 201},
		{admin.KeyID, "PUT", "/v1/sandboxes/{id}/files", sb.ID, 200},
		{admin.KeyID, "POST", "/v1/sandboxes", sb.ID, 201},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit entries:\n got %v\nwant %v", got, want)
	}
	if p.Entries[2].RequestID != "my-req-1" {
		t.Errorf("request id %q", p.Entries[2].RequestID)
	}

	// Filters and paging.
	if p := e.audit(e.admin, "?resource="+sb.ID); len(p.Entries) != 3 {
		t.Errorf("by resource: %d entries", len(p.Entries))
	}
	p1 := e.audit(e.admin, "?limit=4")
	if len(p1.Entries) != 4 || p1.NextCursor == nil {
		t.Fatalf("page 1: %d entries, cursor %v", len(p1.Entries), p1.NextCursor)
	}
	if p2 := e.audit(e.admin, "?limit=4&cursor="+url.QueryEscape(*p1.NextCursor)); len(p2.Entries) != 2 || p2.NextCursor != nil {
		t.Fatalf("page 2: %d entries", len(p2.Entries))
	}
	future := url.QueryEscape(e.clock.Now().Add(time.Minute).Format(time.RFC3339))
	if p := e.audit(e.admin, "?since="+future); len(p.Entries) != 0 {
		t.Errorf("since the future: %d entries", len(p.Entries))
	}
	for _, q := range []string{"?since=yesterday", "?who=me", "?cursor=zzz"} {
		e.mustStatus(e.do("GET", "/v1/audit"+q, e.admin, nil), 400)
	}

	// Only admin keys read it, and only their own team's.
	e.wantErr(e.do("GET", "/v1/audit", secret, nil), 403, "forbidden", "")
	e.mustStatus(e.do("GET", "/v1/audit", betaKey, nil), 403)
	_, betaAdmin, err := auth.IssueKey(ctx, e.st, teamID, "beta admin", true)
	if err != nil {
		t.Fatal(err)
	}
	if p := e.audit(betaAdmin, ""); len(p.Entries) != 0 {
		t.Fatalf("another team's entries: %+v", p.Entries)
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+sb.ID, betaAdmin, nil), 404)
	if p := e.audit(betaAdmin, ""); len(p.Entries) != 1 || p.Entries[0].Status != 404 {
		t.Fatalf("beta's own entries: %+v", p.Entries)
	}
	if p := e.audit(e.admin, ""); len(p.Entries) != len(want) {
		t.Fatalf("team a sees %d entries", len(p.Entries))
	}

	// No secret or file content in any row of any team.
	for _, team := range []string{admin.TeamID, teamID} {
		rows, _, err := e.st.ListAudit(ctx, store.AuditFilter{TeamID: team, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		dump := fmt.Sprintf("%+v", rows)
		for _, s := range []string{secret, betaKey, betaAdmin, e.admin, content, auth.Hash(secret)} {
			if strings.Contains(dump, s) {
				t.Errorf("an audit row holds %q", s)
			}
		}
	}

	// Retention: entries older than it are pruned.
	e.clock.Add(DefaultAuditRetention - time.Minute)
	e.srv.PruneAudit(ctx)
	if p := e.audit(e.admin, ""); len(p.Entries) != len(want) {
		t.Fatalf("pruned too early: %d entries", len(p.Entries))
	}
	e.clock.Add(2 * time.Minute)
	e.srv.PruneAudit(ctx)
	if p := e.audit(e.admin, ""); len(p.Entries) != 0 {
		t.Fatalf("not pruned: %d entries", len(p.Entries))
	}
}
