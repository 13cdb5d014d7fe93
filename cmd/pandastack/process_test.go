package main

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCLIProcesses: start prints a pid; ps lists it; logs prints its output (and with -f exits
// with its status); kill-process signals or kills it. The host is the fake agent (toy commands).
func TestCLIProcesses(t *testing.T) {
	useServer(t)
	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--template", "base", "-q"))

	echo := strings.TrimSpace(mustRun(t, "", "sandbox", "start", id, "--", "echo", "hi", "there"))
	if out := mustRun(t, "", "sandbox", "logs", id, echo); out != "hi there\n" {
		t.Fatalf("logs: %q", out)
	}
	if out := mustRun(t, "", "sandbox", "logs", id, echo, "--offset", "3"); out != "there\n" {
		t.Fatalf("logs --offset 3: %q", out)
	}
	failing := strings.TrimSpace(mustRun(t, "", "sandbox", "start", id, "exit 3"))
	_, _, err := run(t, "", "sandbox", "logs", "-f", id, failing)
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 3 {
		t.Fatalf("logs -f of a process that exits 3: %v", err)
	}

	var started map[string]int
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "start", "--json", "--tag", "napper", id, "sleep 600")), &started); err != nil || started["pid"] == 0 {
		t.Fatalf("start --json: %v %v", started, err)
	}
	sleeper := started["pid"]
	ps := mustRun(t, "", "sandbox", "ps", id)
	if !strings.Contains(ps, "PID") || !strings.Contains(ps, "sleep 600") || !strings.Contains(ps, "napper") || !strings.Contains(ps, "running") || !strings.Contains(ps, "exited") {
		t.Fatalf("ps:\n%s", ps)
	}
	if out := mustRun(t, "", "sandbox", "kill-process", id, strconv.Itoa(sleeper), "--signal", "TERM"); !strings.Contains(out, "sent TERM") {
		t.Fatalf("kill-process --signal: %q", out)
	}
	var listed []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "ps", "--json", id)), &listed); err != nil || len(listed) != 3 {
		t.Fatalf("ps --json: %v %v", listed, err)
	}
	for _, p := range listed {
		if p["pid"] == float64(sleeper) && (p["state"] != "exited" || p["signal"] != "SIGTERM") {
			t.Fatalf("after TERM: %v", p)
		}
	}
	other := strings.TrimSpace(mustRun(t, "", "sandbox", "start", id, "sleep 600"))
	if out := mustRun(t, "", "sandbox", "kill-process", id, other); !strings.Contains(out, "SIGKILL") {
		t.Fatalf("kill-process: %q", out)
	}
	var onTerm map[string]int
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "start", "--json", "--pty", "120x40", id, "sleep 600")), &onTerm); err != nil || onTerm["pid"] == 0 {
		t.Fatalf("start --pty: %v %v", onTerm, err)
	}
	var all []map[string]any
	json.Unmarshal([]byte(mustRun(t, "", "sandbox", "ps", "--json", id)), &all)
	if !slices.ContainsFunc(all, func(p map[string]any) bool { return p["pid"] == float64(onTerm["pid"]) && p["pty"] == true }) {
		t.Fatalf("the --pty process is not listed as one: %v", all)
	}
	for _, bad := range [][]string{
		{"sandbox", "start", "--pty", "wide", id, "true"},
		{"sandbox", "start", "--pty", "0x10", id, "true"},
		{"sandbox", "kill-process", id, "abc"},
		{"sandbox", "kill-process", id, other, "--signal", "SEGV"},
		{"sandbox", "logs", id, "999999"},
		{"sandbox", "start", id},
	} {
		if _, _, err := run(t, "", bad...); err == nil {
			t.Errorf("pandastack %s: no error", strings.Join(bad, " "))
		}
	}
}
