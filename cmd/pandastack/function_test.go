package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISchedules: the schedule verbs against a control plane with the fake host agent (the
// command runs in a fake sandbox). Function deploys need microVMs: a directory is zipped and
// refused here for its missing handler (the API's 400), which is as far as the fake goes.
func TestCLISchedules(t *testing.T) {
	useServer(t)

	if _, _, err := run(t, "", "schedule", "create", "--cron", "61 * * * *", "--template", "base", "--cmd", "true"); err == nil ||
		!strings.Contains(err.Error(), "minute field") {
		t.Fatalf("bad cron: %v", err)
	}
	id := strings.TrimSpace(mustRun(t, "", "schedule", "create", "--cron", "@daily", "--timezone", "Europe/Berlin", "--template", "base",
		"--cmd", "echo tick", "--name", "nightly", "-q"))
	if !strings.HasPrefix(id, "sch_") {
		t.Fatalf("create -q: %q", id)
	}
	if out := mustRun(t, "", "schedule", "list"); !strings.Contains(out, id) || !strings.Contains(out, "Europe/Berlin") || !strings.Contains(out, "base: echo tick") {
		t.Fatalf("list:\n%s", out)
	}
	if out := mustRun(t, "", "schedule", "pause", id); !strings.Contains(out, "false") {
		t.Fatalf("pause:\n%s", out)
	}
	mustRun(t, "", "schedule", "resume", id)
	if out := mustRun(t, "", "schedule", "trigger", id); !strings.Contains(out, "manual") {
		t.Fatalf("trigger:\n%s", out)
	}
	var runs []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "schedule", "runs", id, "--json")), &runs); err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	mustRun(t, "", "schedule", "delete", id)
	if _, _, err := run(t, "", "schedule", "get", id); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("deleted: %v", err)
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "app.py"), []byte("x = 1\n"), 0o644)
	if _, _, err := run(t, "", "fn", "deploy", dir, "--name", "hello", "--runtime", "python3", "--handler", "main.handler"); err == nil ||
		!strings.Contains(err.Error(), "needs main.py") {
		t.Fatalf("deploy without the handler's module: %v", err)
	}
	if out := mustRun(t, "", "fn", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("fn list: %q", out)
	}
}
