package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/api"
	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/termtext"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The CLI verbs against a real control plane whose host agent is the fakeagent test double.

// useServer starts a server and points the CLI's environment at it; it returns the server's URL
// and the key, for the tests that also reach the server by other means.
func useServer(t *testing.T) (url, key string) {
	url, key = startServer(t)
	t.Setenv("PANDASTACK_BASE_URL", url)
	t.Setenv("PANDASTACK_API_KEY", key)
	return url, key
}

func startServer(t *testing.T) (url, key string) {
	t.Helper()
	ctx := context.Background()
	st := testenv.SQLiteStore(t)
	agent := agenttest.New("host-a", "tok", "base")
	t.Cleanup(agent.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sched := scheduler.New(scheduler.Config{Store: st, Logger: log})
	sched.AddStaticAgent(agent.URL(), "tok")
	if err := sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	key, _, err := auth.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(api.Config{Store: st, Scheduler: sched, Logger: log}).Handler())
	t.Cleanup(hs.Close)
	return hs.URL, key
}

// resetFlags puts every flag back to its default: cobra keeps values between Execute calls.
func resetFlags(c *cobra.Command) {
	reset := func(f *pflag.Flag) {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			sv.Replace(nil)
		} else {
			f.Value.Set(f.DefValue)
		}
		f.Changed = false
	}
	c.Flags().VisitAll(reset)
	c.PersistentFlags().VisitAll(reset)
	for _, sub := range c.Commands() {
		resetFlags(sub)
	}
}

// run executes the CLI in-process and returns stdout, stderr and the error main would print.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	resetFlags(rootCmd)
	var out, errb bytes.Buffer
	rootCmd.SetArgs(args)
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	rootCmd.SetIn(strings.NewReader(stdin))
	err := rootCmd.Execute()
	return out.String(), errb.String(), err
}

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, stderr, err := run(t, stdin, args...)
	if err != nil {
		t.Fatalf("pandastack %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func TestCLI(t *testing.T) {
	useServer(t)

	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--template", "base", "-q", "-m", "task=cli"))
	if !strings.HasPrefix(id, "sb_") {
		t.Fatalf("create -q printed %q", id)
	}
	list := mustRun(t, "", "sandbox", "list")
	if !strings.Contains(list, "ID") || !strings.Contains(list, id) || !strings.Contains(list, "task=cli") {
		t.Fatalf("list table:\n%s", list)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "get", id, "--json")), &got); err != nil || got["state"] != "running" {
		t.Fatalf("get --json: %v %v", got, err)
	}
	if out := mustRun(t, "", "sandbox", "metrics", id); !strings.Contains(out, "CPU%") || !strings.Contains(out, "MiB") {
		t.Fatalf("sandbox metrics:\n%s", out)
	}
	var arr []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "list", "--json", "-m", "task=nope")), &arr); err != nil || len(arr) != 0 {
		t.Fatalf("list --json filter: %v %v", arr, err)
	}

	// exec streams output and passes the exit status through.
	if out := mustRun(t, "", "sandbox", "exec", id, "--", "echo", "hi", "there"); out != "hi there\n" {
		t.Fatalf("exec output %q", out)
	}
	_, _, err := run(t, "", "sandbox", "exec", id, "exit 3")
	var ec interface{ ExitCode() int }
	if !errors.As(err, &ec) || ec.ExitCode() != 3 {
		t.Fatalf("exit status: %v", err)
	}
	if out := mustRun(t, "payload", "sandbox", "exec", "--stdin", id, "--", "cat"); out != "payload" {
		t.Fatalf("stdin: %q", out)
	}
	var res map[string]any
	json.Unmarshal([]byte(mustRun(t, "", "sandbox", "exec", "--json", id, "exit 2")), &res)
	if res["exit_code"] != float64(2) {
		t.Fatalf("exec --json %v", res)
	}

	// files
	mustRun(t, "hello from the CLI", "sandbox", "files", "write", id, "/tmp/a.txt")
	if out := mustRun(t, "", "sandbox", "files", "read", id, "/tmp/a.txt"); out != "hello from the CLI" {
		t.Fatalf("read %q", out)
	}
	if out := mustRun(t, "", "sandbox", "files", "ls", id, "/tmp"); !strings.Contains(out, "/tmp/a.txt") {
		t.Fatalf("ls:\n%s", out)
	}
	mustRun(t, "", "sandbox", "files", "mv", id, "/tmp/a.txt", "/tmp/b.txt")
	mustRun(t, "", "sandbox", "files", "rm", id, "/tmp/b.txt")
	if _, _, err := run(t, "", "sandbox", "files", "stat", id, "/tmp/b.txt"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("stat removed file: %v", err)
	}

	// templates and keys
	if out := mustRun(t, "", "template", "list"); !strings.Contains(out, "base") {
		t.Fatalf("templates:\n%s", out)
	}
	newKey := strings.TrimSpace(mustRun(t, "", "keys", "create", "--name", "ci"))
	if !strings.HasPrefix(newKey, "pds_") {
		t.Fatalf("keys create printed %q", newKey)
	}
	if out := mustRun(t, "", "usage"); !strings.Contains(out, "sandboxes") || !strings.Contains(out, "none") {
		t.Fatalf("usage:\n%s", out)
	}
	var me map[string]any
	json.Unmarshal([]byte(mustRun(t, "", "usage", "--json")), &me)
	if out := mustRun(t, "", "teams", "quota", me["team_id"].(string), "--sandboxes", "7"); !strings.Contains(out, " 7\n") {
		t.Fatalf("teams quota:\n%s", out)
	}
	// A scoped, expiring key: reads work, a create is refused naming the scope.
	reader := strings.TrimSpace(mustRun(t, "", "keys", "create", "--name", "ro", "--scope", "read", "--expires", "24h"))
	mustRun(t, "", "sandbox", "list", "--api-key", reader)
	if _, _, err := run(t, "", "sandbox", "create", "--template", "base", "--api-key", reader); err == nil || !strings.Contains(err.Error(), `"sandboxes"`) {
		t.Fatalf("read-only key created a sandbox: %v", err)
	}
	if out := mustRun(t, "", "keys", "list"); !strings.Contains(out, "read") || !strings.Contains(out, "SCOPES") {
		t.Fatalf("keys list:\n%s", out)
	}
	if _, _, err := run(t, "", "keys", "create", "--expires", "soon"); err == nil {
		t.Fatal("--expires soon accepted")
	}
	// An E2B key (docs/e2b.md): E2B's format, refused on /v1.
	e2bKey := strings.TrimSpace(mustRun(t, "", "keys", "create", "--e2b", "--name", "e2b"))
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(e2bKey) {
		t.Fatalf("keys create --e2b printed %q", e2bKey)
	}
	if _, _, err := run(t, "", "sandbox", "list", "--api-key", e2bKey); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("an E2B key on /v1: %v", err)
	}
	var keys []map[string]any
	json.Unmarshal([]byte(mustRun(t, "", "keys", "list", "--json")), &keys)
	if len(keys) != 4 {
		t.Fatalf("keys %v", keys)
	}
	var ciID string
	for _, k := range keys {
		if k["name"] == "ci" {
			ciID = k["id"].(string)
		}
	}
	mustRun(t, "", "keys", "revoke", ciID)
	if _, _, err := run(t, "", "sandbox", "list", "--api-key", newKey); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked key: %v", err)
	}

	// kill, then the API's message comes back as the CLI's error.
	mustRun(t, "", "sandbox", "kill", id)
	_, _, err = run(t, "", "sandbox", "exec", id, "echo x")
	if err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Fatalf("exec on killed: %v", err)
	}
	if _, _, err := run(t, "", "sandbox", "get", "sb_nope"); err == nil || !strings.Contains(err.Error(), "sandbox sb_nope not found") {
		t.Fatalf("get missing: %v", err)
	}
	if _, _, err := run(t, "", "sandbox", "create", "--template", "nope"); err == nil || !strings.Contains(err.Error(), "unknown template") {
		t.Fatalf("bad create: %v", err)
	}
}

func TestCLIConnectionErrors(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	t.Setenv("PANDASTACK_API_KEY", "pds_"+strings.Repeat("a", 32))
	t.Setenv("PANDASTACK_BASE_URL", dead)
	_, _, err := run(t, "", "sandbox", "list")
	if err == nil || !strings.Contains(err.Error(), "cannot reach PandaStack at "+dead) {
		t.Fatalf("dead server: %v", err)
	}
	t.Setenv("PANDASTACK_API_KEY", "")
	t.Setenv("PANDASTACK_TOKEN", "")
	if _, _, err := run(t, "", "sandbox", "list"); err == nil || !strings.Contains(err.Error(), "PANDASTACK_API_KEY") {
		t.Fatalf("no key: %v", err)
	}
}

func TestUpBanner(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:8080": "http://127.0.0.1:8080", "0.0.0.0:9000": "http://127.0.0.1:9000",
		"[::]:8080": "http://127.0.0.1:8080", "[::1]:8080": "http://[::1]:8080"} {
		if got := app.BaseURL(in); got != want {
			t.Errorf("BaseURL(%s) = %s, want %s", in, got, want)
		}
	}
	var b bytes.Buffer
	printBanner(&b, "http://127.0.0.1:8080", "pds_x", false, "/d", "")
	out := b.String()
	for _, want := range []string{"base URL:  http://127.0.0.1:8080", "export PANDASTACK_BASE_URL=http://127.0.0.1:8080 PANDASTACK_API_KEY=pds_x",
		"sandbox create --template base -q", `sandbox exec "$id" -- python -c 'print(2 ** 10)'`} {
		if !strings.Contains(out, want) {
			t.Errorf("banner lacks %q:\n%s", want, out)
		}
	}
	// A key from PANDASTACK_API_KEY is the operator's: only its prefix is printed.
	preset := "pds_" + strings.Repeat("s3cr", 8)
	b.Reset()
	printBanner(&b, "http://127.0.0.1:8080", preset, true, "/d", "")
	if out := b.String(); strings.Contains(out, preset) || strings.Contains(out, preset[12:]) ||
		!strings.Contains(out, "API key:   pds_s3crs3cr…   (from PANDASTACK_API_KEY)") || !strings.Contains(out, "export PANDASTACK_BASE_URL=http://127.0.0.1:8080 ") {
		t.Errorf("banner with a preset key:\n%s", out)
	}
	// A preset key the data dir does not have: the banner says so, and what to do.
	b.Reset()
	printBanner(&b, "http://127.0.0.1:8080", "", false, "/d", "pandastack keys create --admin --data-dir /d")
	if out := b.String(); !strings.Contains(out, "PANDASTACK_API_KEY is NOT a key of this data dir") ||
		!strings.Contains(out, "pandastack keys create --admin --data-dir /d") {
		t.Errorf("banner with an unknown preset key:\n%s", out)
	}
}

func TestCLIForkSnapshotHibernate(t *testing.T) {
	useServer(t)
	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "-q", "-m", "task=warm"))
	mustRun(t, "", "sandbox", "exec", id, "inc")

	// fork: -q prints one id a line; the table names the children.
	kids := strings.Fields(mustRun(t, "", "sandbox", "fork", id, "-n", "2", "-q"))
	if len(kids) != 2 || kids[0] == kids[1] || !strings.HasPrefix(kids[0], "sb_") {
		t.Fatalf("fork -q: %v", kids)
	}
	for _, k := range kids {
		if out := mustRun(t, "", "sandbox", "exec", k, "inc"); out != "2\n" {
			t.Fatalf("child %s continues at %q", k, out)
		}
	}
	var arr []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "fork", id, "--json")), &arr); err != nil || len(arr) != 1 || arr[0]["fork_of"] != id {
		t.Fatalf("fork --json: %v %v", arr, err)
	}
	if _, _, err := run(t, "", "sandbox", "fork", id, "--count", "17"); err == nil || !strings.Contains(err.Error(), "between 1 and 16") {
		t.Fatalf("fork of 17: %v", err)
	}

	// snapshot, then list/get/create from it/delete.
	snap := strings.TrimSpace(mustRun(t, "", "sandbox", "snapshot", id, "-q"))
	if !strings.HasPrefix(snap, "snap_") {
		t.Fatalf("snapshot -q: %q", snap)
	}
	if out := mustRun(t, "", "snapshot", "list"); !strings.Contains(out, "SANDBOX") || !strings.Contains(out, snap) || !strings.Contains(out, id) {
		t.Fatalf("snapshot list:\n%s", out)
	}
	var sn map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "snapshot", "get", snap, "--json")), &sn); err != nil || sn["sandbox_id"] != id {
		t.Fatalf("snapshot get --json: %v %v", sn, err)
	}
	mustRun(t, "", "sandbox", "kill", id)
	seeded := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--snapshot", snap, "-q"))
	if out := mustRun(t, "", "sandbox", "exec", seeded, "inc"); out != "2\n" {
		t.Fatalf("from snapshot: %q", out)
	}
	mustRun(t, "", "snapshot", "delete", snap)
	if _, _, err := run(t, "", "snapshot", "get", snap); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get deleted snapshot: %v", err)
	}
	if _, _, err := run(t, "", "sandbox", "create", "--snapshot", snap); err == nil || !strings.Contains(err.Error(), "snapshot "+snap+" not found") {
		t.Fatalf("create from deleted snapshot: %v", err)
	}

	// hibernate / wake.
	if out := mustRun(t, "", "sandbox", "hibernate", seeded); !strings.Contains(out, "hibernated") {
		t.Fatalf("hibernate:\n%s", out)
	}
	var got map[string]any
	json.Unmarshal([]byte(mustRun(t, "", "sandbox", "get", seeded, "--json")), &got)
	if got["state"] != "hibernated" {
		t.Fatalf("get after hibernate: %v", got)
	}
	if out := mustRun(t, "", "sandbox", "exec", seeded, "inc"); out != "3\n" {
		t.Fatalf("exec wakes: %q", out)
	}
	mustRun(t, "", "sandbox", "hibernate", seeded)
	if out := mustRun(t, "", "sandbox", "wake", seeded); !strings.Contains(out, "running") {
		t.Fatalf("wake:\n%s", out)
	}
}

func TestCLIVolumes(t *testing.T) {
	useServer(t)
	vol := strings.TrimSpace(mustRun(t, "", "volume", "create", "--size-mib", "64", "--name", "data", "-q"))
	if !strings.HasPrefix(vol, "vol_") {
		t.Fatalf("volume create -q: %q", vol)
	}
	if _, _, err := run(t, "", "volume", "create"); err == nil || !strings.Contains(err.Error(), "--size-mib is required") {
		t.Fatalf("create without size: %v", err)
	}
	if _, _, err := run(t, "", "volume", "create", "--size-mib", "0"); err == nil || !strings.Contains(err.Error(), "size_mib must be between 1") {
		t.Fatalf("create of 0 MiB: %v", err)
	}
	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--volume", vol+":/data", "-q"))
	mustRun(t, "hello", "sandbox", "files", "write", id, "/data/hello.txt")
	out := mustRun(t, "", "volume", "list")
	if !strings.Contains(out, "SIZE_MIB") || !strings.Contains(out, vol) || !strings.Contains(out, id+":/data:rw") {
		t.Fatalf("volume list:\n%s", out)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "volume", "get", vol, "--json")), &v); err != nil || v["name"] != "data" || v["size_mib"] != 64.0 ||
		len(v["attachments"].([]any)) != 1 {
		t.Fatalf("volume get --json: %v %v", v, err)
	}
	for _, args := range [][]string{{"volume", "delete", vol}, {"volume", "resize", vol, "--size-mib", "128"}, {"sandbox", "create", "--volume", vol + ":/x:ro"}} {
		if _, _, err := run(t, "", args...); err == nil || !strings.Contains(err.Error(), "attached read-write to sandbox "+id) {
			t.Fatalf("%v while attached: %v", args, err)
		}
	}
	if _, _, err := run(t, "", "sandbox", "create", "--volume", vol+":/x:rx"); err == nil || !strings.Contains(err.Error(), "ro or rw") {
		t.Fatalf("bad mode: %v", err)
	}
	if _, _, err := run(t, "", "sandbox", "create", "--volume", vol); err == nil || !strings.Contains(err.Error(), "VOLUME_ID:/path") {
		t.Fatalf("no path: %v", err)
	}
	mustRun(t, "", "sandbox", "kill", id)
	ro := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "--volume", vol+":/data:ro", "-q"))
	if out := mustRun(t, "", "sandbox", "files", "read", ro, "/data/hello.txt"); out != "hello" {
		t.Fatalf("read back %q", out)
	}
	mustRun(t, "", "sandbox", "kill", ro)
	if out := mustRun(t, "", "volume", "resize", vol, "--size-mib", "128"); !strings.Contains(out, "128") {
		t.Fatalf("resize:\n%s", out)
	}
	mustRun(t, "", "volume", "delete", vol)
	if _, _, err := run(t, "", "volume", "get", vol); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get deleted volume: %v", err)
	}
}

func TestCLITemplates(t *testing.T) {
	useServer(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<h1>hi</h1>"), 0o644)
	spec := filepath.Join(dir, "web.yaml")
	os.WriteFile(spec, []byte("name: web\nfrom: base\nfiles:\n  - path: /srv/index.html\n    src: index.html\nsteps:\n  - echo built\n"), 0o644)
	out, stderr, err := run(t, "", "template", "build", "-f", spec)
	if err != nil || !strings.Contains(stderr, "step 1/1: echo built") || !strings.Contains(out, "web") || !strings.Contains(out, "team") {
		t.Fatalf("build: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	out = mustRun(t, "", "template", "list")
	for _, want := range []string{"NAME", "OWNER", "MEMORY", "BAKE", "base", "catalog", "web", "team"} {
		if !strings.Contains(out, want) {
			t.Fatalf("list lacks %q:\n%s", want, out)
		}
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "", "template", "get", "web", "--json")), &got); err != nil || got["owner"] != "team" {
		t.Fatalf("get --json: %v %v", got, err)
	}
	// A failing build says why and exits non-zero.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: bad\nfrom: base\nsteps: [\"false\"]\n"), 0o644)
	if _, _, err := run(t, "", "template", "build", "-f", bad); err == nil || !strings.Contains(err.Error(), "build_failed") {
		t.Fatalf("failing build: %v", err)
	}
	os.WriteFile(bad, []byte("name: bad\nfrom: base\nfiles: [{path: /x, src: missing.txt}]\n"), 0o644)
	if _, _, err := run(t, "", "template", "build", "-f", bad); err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Fatalf("missing src: %v", err)
	}
	if _, _, err := run(t, "", "template", "build"); err == nil || !strings.Contains(err.Error(), "-f SPEC is required") {
		t.Fatalf("no -f: %v", err)
	}
	if _, _, err := run(t, "", "template", "delete", "base"); err == nil || !strings.Contains(err.Error(), "catalog") {
		t.Fatalf("delete base: %v", err)
	}
	if out := mustRun(t, "", "template", "delete", "web"); !strings.Contains(out, "deleted web") {
		t.Fatalf("delete:\n%s", out)
	}
}

// noRaw fails if s holds a character that could drive the terminal (other than newlines).
func noRaw(t *testing.T, what, s string) {
	t.Helper()
	for _, r := range s {
		if r != '\n' && termtext.Unsafe(r) {
			t.Errorf("%s prints %U raw:\n%q", what, r, s)
			return
		}
	}
}

// What users and guests name (metadata, file paths, error messages) reaches the terminal
// escaped: no escape sequences, C1 controls or bidi overrides pass raw.
func TestCLITerminalEscapes(t *testing.T) {
	useServer(t)
	const evil = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u202egpj.exe"
	const escaped = `\x1b]0;pwned\x07\x1b[2J\u009b31m\u202egpj.exe`

	// The API refuses such metadata outright, with a message that names the field.
	_, _, err := run(t, "", "sandbox", "create", "-q", "-m", "k="+evil)
	if err == nil || !strings.Contains(err.Error(), `metadata value of "k"`) {
		t.Fatalf("create with control characters in metadata: %v", err)
	}

	// A guest names its files as it likes: the listing escapes them.
	id := strings.TrimSpace(mustRun(t, "", "sandbox", "create", "-q"))
	out := mustRun(t, "x", "sandbox", "files", "write", id, "/tmp/"+evil)
	noRaw(t, "files write", out)
	out = mustRun(t, "", "sandbox", "files", "ls", id, "/tmp")
	noRaw(t, "files ls", out)
	if !strings.Contains(out, "/tmp/"+escaped) {
		t.Errorf("files ls does not show the escaped name:\n%s", out)
	}
	out = mustRun(t, "", "sandbox", "files", "ls", id, "/tmp", "--json")
	noRaw(t, "files ls --json", out)
	var sts []map[string]any
	if err := json.Unmarshal([]byte(out), &sts); err != nil || len(sts) != 1 || sts[0]["path"] != "/tmp/"+evil {
		t.Errorf("files ls --json does not decode to the real name: %v %v", sts, err)
	}

	// Error messages carry the server's and guest's words.
	_, _, err = run(t, "", "sandbox", "files", "read", id, "/tmp/missing"+evil)
	if err == nil {
		t.Fatal("read of a missing file succeeded")
	}
	var b bytes.Buffer
	printError(&b, err)
	noRaw(t, "the error", b.String())
	if !strings.Contains(b.String(), "missing"+escaped) {
		t.Errorf("error lacks the escaped path: %s", b.String())
	}

	// Metadata stored before the API refused it still lists escaped.
	var tb bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&tb)
	legacy := []client.Sandbox{{ID: "sb_old", Template: "base", State: "running", Metadata: map[string]string{"k": evil, "n": "a\nb\x00"}}}
	if err := sandboxes.print(&apiFlags{}, cmd, legacy, false); err != nil {
		t.Fatal(err)
	}
	noRaw(t, "sandbox list", tb.String())
	if !strings.Contains(tb.String(), "k="+escaped+`,n=a\x0ab\x00`) || strings.Count(tb.String(), "\n") != 2 {
		t.Errorf("sandbox list:\n%s", tb.String())
	}
}

func TestCLIPrivatePorts(t *testing.T) {
	useServer(t)
	out, stderr, err := run(t, "", "sandbox", "create", "--private-ports", "-q")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "sb_") || !strings.Contains(stderr, "X-PandaStack-Traffic-Token: pdt_") {
		t.Fatalf("create --private-ports -q: %v\nstdout %q\nstderr %q", err, out, stderr)
	}
	var sb struct {
		PublicPorts  bool   `json:"public_ports"`
		TrafficToken string `json:"traffic_token"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "create", "--private-ports", "--json")), &sb); err != nil || sb.PublicPorts || !strings.HasPrefix(sb.TrafficToken, "pdt_") {
		t.Fatalf("create --private-ports --json: %v %+v", err, sb)
	}
	sb.PublicPorts, sb.TrafficToken = false, ""
	if err := json.Unmarshal([]byte(mustRun(t, "", "sandbox", "create", "--json")), &sb); err != nil || !sb.PublicPorts || sb.TrafficToken != "" {
		t.Fatalf("create --json: %v %+v", err, sb)
	}
	if _, _, err := run(t, "", "sandbox", "create", "--private-ports", "--public-ports"); err == nil || !strings.Contains(err.Error(), "contradict") {
		t.Fatalf("both flags: %v", err)
	}
}

func TestCLIHosts(t *testing.T) {
	useServer(t)
	out := mustRun(t, "", "sandbox", "create", "--host", "host-a", "--json")
	if !strings.Contains(out, `"host": "host-a"`) {
		t.Fatalf("create --host host-a:\n%s", out)
	}
	if _, _, err := run(t, "", "sandbox", "create", "--host", "host-nope"); err == nil || !strings.Contains(err.Error(), "host-nope is not known") {
		t.Fatalf("create --host host-nope: %v", err)
	}
	list := mustRun(t, "", "hosts", "list")
	if !strings.Contains(list, "SANDBOXES") || !strings.Contains(list, "host-a") || !strings.Contains(list, "up") {
		t.Fatalf("hosts list:\n%s", list)
	}
	// The only host drained: its sandbox (no blob store here) is kept, and nothing new goes there.
	if out := mustRun(t, "", "hosts", "drain", "host-a"); !strings.Contains(out, "MOVED") || !strings.Contains(out, "not published") {
		t.Fatalf("hosts drain:\n%s", out)
	}
	if out := mustRun(t, "", "hosts", "list"); !strings.Contains(out, "up,draining") {
		t.Fatalf("hosts list while draining:\n%s", out)
	}
	if _, _, err := run(t, "", "sandbox", "create"); err == nil || !strings.Contains(err.Error(), "no host") {
		t.Fatalf("create with the only host draining: %v", err)
	}
	mustRun(t, "", "hosts", "undrain", "host-a")
	mustRun(t, "", "sandbox", "create", "-q")
	if out := mustRun(t, "", "doctor"); !strings.Contains(out, "nothing left behind on 1 host") {
		t.Fatalf("doctor:\n%s", out)
	}
	if _, _, err := run(t, "", "doctor", "--host", "host-nope"); err == nil || !strings.Contains(err.Error(), "host-nope not found") {
		t.Fatalf("doctor of an unknown host: %v", err)
	}
}

func TestCLIImagePrune(t *testing.T) {
	cache := t.TempDir()
	old, fresh := filepath.Join(cache, "rootfs-0ld"), filepath.Join(cache, "built-fresh")
	for _, d := range []string{old, fresh} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "rootfs.ext4"), make([]byte, 4096), 0o644)
	}
	long := time.Now().Add(-30 * 24 * time.Hour)
	os.Chtimes(old, long, long)

	out := mustRun(t, "", "image", "prune", "--cache-dir", cache, "--dry-run")
	if !strings.Contains(out, "rootfs-0ld") || strings.Contains(out, "built-fresh") || !strings.Contains(out, "would remove 1 entries") {
		t.Fatalf("dry run:\n%s", out)
	}
	if _, err := os.Stat(old); err != nil {
		t.Fatal("the dry run removed an entry")
	}
	out = mustRun(t, "", "image", "prune", "--cache-dir", cache)
	if !strings.Contains(out, "removed 1 entries") {
		t.Fatalf("prune:\n%s", out)
	}
	if _, err := os.Stat(old); err == nil {
		t.Fatal("the unused entry is still there")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("the recent entry was removed")
	}
	if _, _, err := run(t, "", "image", "prune", "--cache-dir", cache, "--unused-for", "-1h"); err == nil {
		t.Fatal("a negative --unused-for was accepted")
	}
}
