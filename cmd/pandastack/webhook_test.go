package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIWebhooks: the webhook verbs against a control plane with the fake host agent, under the
// server's default destination policy (nothing is sent: no delivery loop runs here).
func TestCLIWebhooks(t *testing.T) {
	url, _ := useServer(t)

	if _, _, err := run(t, "", "webhook", "create", url+"/hook", "--events", "*"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback under the server policy: %v", err)
	}
	if _, _, err := run(t, "", "webhook", "create", "https://203.0.113.9/hook", "--events", "sandbox.nope"); err == nil || !strings.Contains(err.Error(), "unknown event type") {
		t.Fatalf("unknown event: %v", err)
	}
	out := mustRun(t, "", "webhook", "create", "https://203.0.113.9/hook", "--events", "sandbox.killed,sandbox.ttl_expired")
	if !strings.Contains(out, "whsec_") || !strings.Contains(out, "sandbox.killed,sandbox.ttl_expired") {
		t.Fatalf("create:\n%s", out)
	}
	var hooks []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "webhook", "list", "--json")), &hooks); err != nil || len(hooks) != 1 || hooks[0]["secret"] != nil {
		t.Fatalf("list: %v %v", hooks, err)
	}
	id := hooks[0]["id"].(string)
	if out := mustRun(t, "", "webhook", "deliveries", id, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("deliveries: %q", out)
	}
	mustRun(t, "", "webhook", "delete", id)
	if _, _, err := run(t, "", "webhook", "get", id); err == nil || !strings.Contains(err.Error(), "no webhook") {
		t.Fatalf("deleted: %v", err)
	}
}
