package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runMain runs the CLI as a user does: its main in a child process (the test binary, see
// TestMain), with the server and key of the environment. It returns stdout, stderr and the exit
// status.
func runMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PANDASTACK_TEST_MAIN=1")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// mustFail runs the CLI, wants it to fail with one "error: " line that contains want, and
// returns that line.
func mustFail(t *testing.T, want string, args ...string) string {
	t.Helper()
	out, stderr, code := runMain(t, args...)
	if code == 0 || out != "" || !strings.HasPrefix(stderr, "error: ") || strings.Count(stderr, "rror:") != 1 ||
		!strings.Contains(stderr, want) {
		t.Errorf("pandastack %s: exit %d, stdout %q, stderr %q; want a non-zero exit and one error line with %q",
			strings.Join(args, " "), code, out, stderr, want)
	}
	return stderr
}

func lifetime(t *testing.T, id string) time.Duration {
	t.Helper()
	out, stderr, code := runMain(t, "sandbox", "get", id, "--json")
	var sb struct {
		CreatedAt time.Time `json:"created_at"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil {
		t.Fatalf("sandbox get %s: %d %s %s", id, code, out, stderr)
	}
	return sb.ExpiresAt.Sub(sb.CreatedAt)
}

// TestCLIAgreesWithAPI runs the built CLI: what it refuses the API refuses, times are written
// one way everywhere, --json errors are JSON, and every failure has one "error: " prefix.
func TestCLIAgreesWithAPI(t *testing.T) {
	useServer(t)

	// --ttl 0 is refused (the API refuses ttl_seconds 0), and nothing is created.
	mustFail(t, "--ttl must be at least 1 second", "sandbox", "create", "--ttl", "0")
	if out, _, _ := runMain(t, "sandbox", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("a refused create made a sandbox: %s", out)
	}
	// Durations: plain seconds, 400s, 5m.
	for arg, want := range map[string]time.Duration{"400": 400 * time.Second, "400s": 400 * time.Second, "5m": 5 * time.Minute} {
		out, stderr, code := runMain(t, "sandbox", "create", "--ttl", arg, "-q")
		if code != 0 {
			t.Fatalf("create --ttl %s: %s", arg, stderr)
		}
		if got := lifetime(t, strings.TrimSpace(out)); got != want {
			t.Errorf("create --ttl %s: expires %s after creation, want %s", arg, got, want)
		}
	}
	mustFail(t, "whole number of seconds", "sandbox", "create", "--ttl", "1.5s")
	mustFail(t, `"soon" is not a time: give seconds (400) or a duration (400s, 5m, 1h30m)`, "sandbox", "create", "--ttl", "soon")

	out, _, _ := runMain(t, "sandbox", "create", "-q")
	id := strings.TrimSpace(out)
	if out, stderr, code := runMain(t, "sandbox", "exec", "--timeout", "400s", id, "--", "echo", "ok"); code != 0 || out != "ok\n" {
		t.Errorf("exec --timeout 400s: %d %q %s", code, out, stderr)
	}
	if out, stderr, code := runMain(t, "sandbox", "exec", "--timeout", "30", id, "echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("exec --timeout 30: %d %q %s", code, out, stderr)
	}
	if _, stderr, code := runMain(t, "sandbox", "ttl", id, "10m"); code != 0 || lifetime(t, id) <= 5*time.Minute {
		t.Errorf("sandbox ttl ID 10m: %d %s, lifetime %s", code, stderr, lifetime(t, id))
	}
	mustFail(t, "ttl_seconds must be between 1 and 86400, got 0", "sandbox", "ttl", id, "0")
	mustFail(t, `"12345678901234567890123" is out of range`, "sandbox", "ttl", id, "12345678901234567890123")
	mustFail(t, `is out of range`, "sandbox", "create", "--ttl", "99999999999999999h")

	// exec without a command, and version.
	mustFail(t, "missing command", "sandbox", "exec", id)
	mustFail(t, "missing command", "sandbox", "exec", id, "--")
	mustFail(t, `unknown command "bogus"`, "bogus")
	mustFail(t, "unknown flag: --bogus", "sandbox", "list", "--bogus")
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if out, _, code := runMain(t, args...); code != 0 || out != "pandastack version dev\n" {
			t.Errorf("pandastack %s: %d %q", args[0], code, out)
		}
	}

	// --json: the error is one JSON object on stderr, the exit status non-zero.
	for _, tc := range []struct {
		args      []string
		code      string
		requestID bool
	}{
		{[]string{"sandbox", "get", "sb_nope", "--json"}, "not_found", true},
		{[]string{"sandbox", "kill", "--json", "sb_nope"}, "not_found", true}, // kill of a missing id
		{[]string{"sandbox", "exec", "--json", id}, "cli", false},
		{[]string{"sandbox", "get", "x", "--json", "--base-url", "http://127.0.0.1:1"}, "unreachable", false},
	} {
		out, stderr, code := runMain(t, tc.args...)
		var e struct {
			Code, Message string
			RequestID     *string `json:"request_id"`
		}
		if code == 0 || out != "" || json.Unmarshal([]byte(stderr), &e) != nil || strings.Count(stderr, "\n") != 1 ||
			e.Code != tc.code || e.Message == "" || (e.RequestID != nil) != tc.requestID {
			t.Errorf("pandastack %s: exit %d, stdout %q, stderr %q; want one JSON error with code %s",
				strings.Join(tc.args, " "), code, out, stderr, tc.code)
		}
	}
}
