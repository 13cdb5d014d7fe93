package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestDatabaseEvents: what happens to a database without a call saying so — a backup the service
// takes (at creation, daily; here on demand) and a suspension of an idle database — reaches the
// events stream and a webhook (signed) as database.backed_up (the backup and its trigger) and
// database.suspended (how long it was idle). The database's VM is a sandbox on the fake host (the
// database row made directly: the fake runs no postgres).
func TestDatabaseEvents(t *testing.T) {
	e, ctx, rcv, hook, events := hooked(t, webhooks.DatabaseBackedUp, webhooks.DatabaseSuspended)

	sb := e.create(e.admin, map[string]any{"template": "base"})
	row, _ := e.st.GetSandbox(ctx, sb.ID)
	d, err := e.st.CreateDatabase(ctx, store.Database{ID: "db_events", TeamID: row.TeamID, Name: "shop", Version: "17",
		SandboxID: sb.ID, State: "ready", SuspendAfterSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	dbs := e.srv.Databases()
	sn, err := dbs.Backup(ctx, d.TeamID, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past suspend_after_seconds without a client
	if n, err := dbs.SuspendIdle(ctx); err != nil || n != 1 {
		t.Fatalf("suspended %d (%v)", n, err)
	}

	check := func(what string, typ string, got *v1.DatabaseEvent) {
		t.Helper()
		switch {
		case got == nil || got.ID != d.ID || got.Name != "shop":
			t.Fatalf("%s: %s %+v", what, typ, got)
		case typ == webhooks.DatabaseBackedUp && (got.BackupID != sn.ID || got.Trigger != "request"):
			t.Fatalf("%s: backup %+v, want %s by request", what, got, sn.ID)
		case typ == webhooks.DatabaseSuspended && got.IdleSeconds < 1:
			t.Fatalf("%s: suspended after %d s idle", what, got.IdleSeconds)
		}
	}
	for _, typ := range []string{webhooks.DatabaseBackedUp, webhooks.DatabaseSuspended} {
		got := nextEvent(t, events, typ)
		check("events stream", got.Type, got.Database)
	}
	e.waitFor("the webhook's deliveries", func() bool { return len(rcv.requests()) >= 2 })
	seen := map[string]bool{}
	for _, r := range rcv.requests() {
		if err := webhooks.Verify(hook.Secret, r.header.Get(webhooks.HeaderSignature), r.body, e.clock.Now(), 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		var ev v1.WebhookEvent
		json.Unmarshal(r.body, &ev)
		check("webhook", ev.Type, ev.Database)
		seen[ev.Type] = true
	}
	if len(seen) != 2 || len(rcv.requests()) != 2 {
		t.Fatalf("webhook deliveries: %v (%d)", seen, len(rcv.requests()))
	}
	if all, err := e.st.DatabaseEventsSince(ctx, d.TeamID, time.Time{}, 10); err != nil || len(all) != 2 {
		t.Fatalf("recorded: %+v %v", all, err)
	}
}
