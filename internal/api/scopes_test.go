package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestScopedKeys: a key's scopes limit what it may call (403 naming the missing scope), an
// expired key is a 401 that says so, and keys show their scopes and expiry.
func TestScopedKeys(t *testing.T) {
	e := newEnv(t)
	mk := func(body map[string]any) (string, map[string]any) {
		t.Helper()
		k := e.mustStatus(e.do("POST", "/v1/keys", e.admin, body), 201).json(t)
		return k["key"].(string), k
	}
	read, rk := mk(map[string]any{"name": "reader", "scopes": []string{"read"}})
	sbx, _ := mk(map[string]any{"name": "agent", "scopes": []string{"sandboxes"}})
	both, _ := mk(map[string]any{"name": "both", "scopes": []string{"read", "sandboxes", "read"}})
	plain, pk := mk(map[string]any{"name": "plain"})
	if got := rk["scopes"].([]any); len(got) != 1 || got[0] != "read" || rk["expires_at"] != nil {
		t.Fatalf("scoped key view: %v", rk)
	}
	if got := pk["scopes"].([]any); len(got) != 1 || got[0] != "all" {
		t.Fatalf("plain key view: %v", pk)
	}

	sb := e.create(sbx, map[string]any{"template": "base"})
	for _, c := range []struct {
		method, path, key string
		status            int
		scope             string
	}{
		{"GET", "/v1/sandboxes", read, 200, ""},
		{"GET", "/v1/volumes", read, 200, ""},
		{"POST", "/v1/sandboxes", read, 403, "sandboxes"},
		{"DELETE", "/v1/sandboxes/" + sb.ID, read, 403, "sandboxes"},
		{"POST", "/v1/keys", read, 403, "all"},
		{"GET", "/v1/sandboxes/" + sb.ID, sbx, 200, ""},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=/work/a", sbx, 200, ""},
		{"GET", "/v1/volumes", sbx, 403, "read"},
		{"POST", "/v1/volumes", sbx, 403, "all"},
		{"POST", "/v1/keys", sbx, 403, "all"},
		{"GET", "/v1/volumes", both, 200, ""},
		{"POST", "/v1/volumes", both, 403, "all"},
		{"GET", "/v1/audit", read, 403, ""}, // the audit log also needs an admin key
		{"DELETE", "/v1/sandboxes/" + sb.ID, sbx, 204, ""},
	} {
		var body any
		if c.method == "PUT" {
			body = "x"
		}
		r := e.do(c.method, c.path, c.key, body)
		if r.status != c.status {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.status, r.body)
			continue
		}
		if c.status == 403 && c.scope != "" && (r.errCode() != "forbidden" || !strings.Contains(r.errMessage(), `"`+c.scope+`"`)) {
			t.Errorf("%s %s: %s, want forbidden naming %q", c.method, c.path, r.body, c.scope)
		}
	}
	// A plain key may not mint an admin key by scope either, and scope names are checked.
	e.mustStatus(e.do("POST", "/v1/keys", plain, map[string]any{"scopes": []string{"admin"}}), 403)
	if r := e.do("POST", "/v1/keys", e.admin, map[string]any{"scopes": []string{"root"}}); r.status != 400 || !strings.Contains(r.errMessage(), "root") {
		t.Fatalf("unknown scope: %d %s", r.status, r.body)
	}
	_, ak := mk(map[string]any{"scopes": []string{"admin"}})
	if ak["admin"] != true {
		t.Fatalf("admin scope makes no admin key: %v", ak)
	}

	// Expiry.
	past := e.clock.Now().Add(-time.Minute).Format(time.RFC3339)
	e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]any{"expires_at": past}), 400)
	e.mustStatus(e.do("POST", "/v1/keys", e.admin, map[string]any{"expires_at": "tomorrow"}), 400)
	exp := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	short, sk := mk(map[string]any{"name": "short", "expires_at": exp.Format(time.RFC3339)})
	if sk["expires_at"] != v1.Timestamp(exp) {
		t.Fatalf("expires_at %v, want %s", sk["expires_at"], v1.Timestamp(exp))
	}
	e.mustStatus(e.do("GET", "/v1/sandboxes", short, nil), 200)
	e.clock.Add(time.Hour)
	if r := e.do("GET", "/v1/sandboxes", short, nil); r.status != 401 || !strings.Contains(r.errMessage(), "expired") {
		t.Fatalf("expired key: %d %s", r.status, r.body)
	}

	// Keys stay stored hashed.
	ks, err := e.st.KeysByPrefix(context.Background(), auth.DisplayPrefix(read))
	if err != nil || len(ks) != 1 || ks[0].Hash != auth.Hash(read) || strings.Contains(ks[0].Hash+ks[0].Prefix, read[auth.DisplayLen:]) {
		t.Fatalf("stored key: %+v %v", ks, err)
	}
}
