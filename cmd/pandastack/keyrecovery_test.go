package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/store"
)

// `keys create --admin --data-dir DIR` (root) makes a working admin key of the default team in
// the store directly, with no key and no server, and audits it: the key's name, a log line on
// stderr and DIR/audit.log.
func TestKeysCreateLocalRecovery(t *testing.T) {
	ctx, dir := context.Background(), t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("the local recovery is root's only")
	}
	st, err := store.OpenSQLite(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	lost, _, err := auth.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := (&auth.Authenticator{Store: st}).Authenticate(ctx, lost)
	st.Close()
	t.Setenv("PANDASTACK_API_KEY", "")

	mustFail(t, "add --admin", "keys", "create", "--data-dir", dir)
	mustFail(t, "has no state.db", "keys", "create", "--admin", "--data-dir", filepath.Join(dir, "nope"))
	out, stderr, code := runMain(t, "keys", "create", "--admin", "--data-dir", dir)
	key := strings.TrimSpace(out)
	if code != 0 || auth.Validate(key) != nil || !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "admin key created locally") {
		t.Fatalf("keys create --admin --data-dir: exit %d, %q\n%s", code, out, stderr)
	}

	st, err = store.OpenSQLite(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id, err := (&auth.Authenticator{Store: st}).Authenticate(ctx, key)
	if err != nil || !id.Admin || id.TeamID != first.TeamID {
		t.Fatalf("the recovered key: %+v %v; want an admin key of team %s", id, err, first.TeamID)
	}
	k, err := st.GetKey(ctx, id.TeamID, id.KeyID)
	if err != nil || !strings.HasPrefix(k.Name, "local recovery by uid 0") {
		t.Errorf("the key's name does not say how it was made: %q %v", k.Name, err)
	}
	audit, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil || !strings.Contains(string(audit), id.KeyID) || strings.Contains(string(audit), key) {
		t.Errorf("audit.log: %q %v", audit, err)
	}
}
