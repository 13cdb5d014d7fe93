package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/template"
)

// Target is one host agent under test, reached the only way the control plane reaches one: an
// agentclient.Client.
type Target struct {
	Client *agentclient.Client
	// Template is a catalog template the agent can create sandboxes from (e.g. "base").
	Template string
}

// Run is the host-agent API's contract: every check drives the agent through agentclient and
// asserts only what the control plane can observe (status codes, error codes, state strings,
// JSON fields). TestContractFake runs it against the fake on every `go test`; the VM test
// TestContractHostAgent runs it against the real agent, so the fake cannot drift from it.
//
// The subtests run in order on one agent (the real one is slow to start) and share one
// sandbox, killed last; each cleans up what else it makes. Where the fake only pretends (no
// process runs, files live in a map) the checks stay at the contract: an exec's output and exit
// code, a file's bytes and stat.
func Run(t *testing.T, tg Target) {
	k := &contract{c: tg.Client, tpl: tg.Template}
	steps := []struct {
		name     string
		fn       func(*testing.T)
		needsBox bool // uses the sandbox create makes
	}{
		{"health", k.health, false}, {"templates", k.templates, false}, {"create_refused", k.createRefused, false},
		{"create", k.create, false}, {"exec", k.exec, true}, {"processes", k.processes, true}, {"process_exits", k.processExits, true}, {"metrics", k.metrics, true}, {"files", k.files, true}, {"filetree", k.filetree, true}, {"snapshots", k.snapshots, true},
		{"fork", k.fork, true}, {"hibernate", k.hibernate, true}, {"volumes", k.volumes, false}, {"kill", k.kill, true},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.needsBox && k.main.ID == "" {
				t.Skip("no sandbox: create failed")
			}
			s.fn(t)
		})
	}
}

type contract struct {
	c    *agentclient.Client
	tpl  string
	main agentclient.Sandbox // made by create, killed by kill
}

// The shapes of the ids the agent makes.
var (
	sandboxID  = regexp.MustCompile(`^sb_[a-z0-9]{1,60}$`)
	snapshotID = regexp.MustCompile(`^snap_[a-z0-9]{1,60}$`)
)

const missingSandbox = "sb_nosuchsandbox"

func ctx() context.Context { return context.Background() }

var made atomic.Int64

// unique returns prefix followed by lowercase letters and digits seen nowhere else (ids the
// agent accepts).
func unique(prefix string) string {
	return prefix + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatInt(made.Add(1), 36)
}

// wantErr asserts err is the agent's error answer with this status and code.
func wantErr(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var e *agentclient.Error
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Errorf("%s: got %v, want %d %s", what, err, status, code)
	}
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func (k *contract) health(t *testing.T) {
	h := must[agentclient.Health](t, "health")(k.c.Health(ctx()))
	if !h.OK || h.Version == "" || (h.Accel != "kvm" && h.Accel != "tcg") {
		t.Errorf("health: %+v", h)
	}
	// Health needs no token; everything else does.
	stranger := agentclient.New(k.c.BaseURL, "wrong-token")
	if _, err := stranger.Health(ctx()); err != nil {
		t.Errorf("health with a wrong token: %v", err)
	}
	_, err := stranger.Info(ctx())
	wantErr(t, "info with a wrong token", err, 401, "unauthorized")
	_, err = stranger.ListSandboxes(ctx())
	wantErr(t, "list with a wrong token", err, 401, "unauthorized")
	_, err = k.c.Raw(ctx(), "GET", "/v1/no-such-route", nil, nil, -1, nil)
	wantErr(t, "an unknown route", err, 404, "not_found")

	info := must[agentclient.Info](t, "info")(k.c.Info(ctx()))
	if info.HostID == "" || info.Accel != h.Accel || info.SlotsTotal < 1 || info.MemMiBTotal <= 0 ||
		info.MaxVCPUs <= 0 || info.MaxMemoryMiB <= 0 || info.MemoryOvercommit <= 0 || info.MemMiBCommitLimit <= 0 ||
		info.PoolMiBTotal <= 0 || info.PoolMiBFree < 0 || info.PoolMiBFree > info.PoolMiBTotal {
		t.Errorf("info: %+v", info)
	}
}

// templates: the list (also in /v1/info) and the build API's refusals, which come before any VM.
func (k *contract) templates(t *testing.T) {
	list := must[[]agentclient.Template](t, "templates")(k.c.Templates(ctx()))
	tpl, ok := findTemplate(list, k.tpl)
	cat, _ := template.CatalogSpec(k.tpl)
	if !ok || tpl.VCPUs <= 0 || tpl.MemoryMiB <= 0 || tpl.DiskMiB <= 0 || tpl.Built || tpl.Description != cat.Description {
		t.Errorf("template %s in the list: %+v (found %v)", k.tpl, tpl, ok)
	}
	info := must[agentclient.Info](t, "info")(k.c.Info(ctx()))
	if !slices.Equal(templateNames(info.Templates), templateNames(list)) {
		t.Errorf("info lists templates %v, /v1/templates %v", templateNames(info.Templates), templateNames(list))
	}

	wantErr(t, "delete a catalog template", k.c.DeleteTemplate(ctx(), k.tpl), 409, "conflict")
	wantErr(t, "delete an unknown template", k.c.DeleteTemplate(ctx(), "no-such-template"), 404, "not_found")
	for _, c := range []struct {
		what   string
		spec   map[string]any
		status int
		code   string
	}{
		{"a spec without a name", map[string]any{"from": k.tpl, "steps": []string{"true"}}, 400, "invalid_request"},
		{"an unknown parent", map[string]any{"name": "contract-tpl", "from": "no-such-parent"}, 400, "invalid_request"},
		{"a catalog name", map[string]any{"name": k.tpl, "from": "debian:trixie"}, 409, "conflict"},
		{"a template larger than the host", map[string]any{"name": "contract-tpl", "from": k.tpl, "vcpus": 4096}, 400, "invalid_request"},
	} {
		_, err := k.c.BuildTemplate(ctx(), c.spec, nil)
		wantErr(t, "build of "+c.what, err, c.status, c.code)
	}
}

func findTemplate(list []agentclient.Template, name string) (agentclient.Template, bool) {
	for _, t := range list {
		if t.Name == name {
			return t, true
		}
	}
	return agentclient.Template{}, false
}

func templateNames(list []agentclient.Template) []string {
	var out []string
	for _, t := range list {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

// createRefused: creates the agent refuses before it starts anything.
func (k *contract) createRefused(t *testing.T) {
	for _, c := range []struct {
		what, body string
		status     int
		code       string
	}{
		{"an unknown field", `{"template": "` + k.tpl + `", "bogus": 1}`, 400, "invalid_request"},
		{"no template or snapshot", `{}`, 400, "invalid_request"},
		{"a malformed id", `{"id": "Not-An-Id", "template": "` + k.tpl + `"}`, 400, "invalid_request"},
		{"an unknown template", `{"template": "no-such-template"}`, 404, "not_found"},
		{"an unknown snapshot", `{"snapshot_id": "snap_nosuchsnapshot"}`, 404, "not_found"},
		{"an unknown volume", `{"template": "` + k.tpl + `", "volumes": [{"volume_id": "vol_nosuchvolume", "mount_path": "/data"}]}`, 404, "not_found"},
	} {
		_, err := k.c.Raw(ctx(), "POST", "/v1/sandboxes", nil, strings.NewReader(c.body), int64(len(c.body)), nil)
		wantErr(t, "create with "+c.what, err, c.status, c.code)
	}
	if sbs := must[[]agentclient.Sandbox](t, "list")(k.c.ListSandboxes(ctx())); len(sbs) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", sbs)
	}
}

// create makes the sandbox the next steps share.
func (k *contract) create(t *testing.T) {
	sb := must[agentclient.Sandbox](t, "create")(k.c.CreateSandbox(ctx(), agentclient.CreateRequest{Template: k.tpl,
		Env: map[string]string{"CONTRACT_CREATE": "from-create"}}))
	k.main = sb
	tpl, _ := findTemplate(must[[]agentclient.Template](t, "templates")(k.c.Templates(ctx())), k.tpl)
	if !sandboxID.MatchString(sb.ID) || sb.Template != k.tpl || sb.State != agentclient.StateRunning || sb.PID <= 0 ||
		sb.VCPUs != tpl.VCPUs || sb.MemoryMiB != tpl.MemoryMiB || sb.SnapshotID != "" || sb.ForkOf != "" || sb.Error != "" {
		t.Errorf("created %+v (template %+v)", sb, tpl)
	}
	if _, err := time.Parse(time.RFC3339, sb.CreatedAt); err != nil {
		t.Errorf("created_at %q: %v", sb.CreatedAt, err)
	}
	if !tpl.Baked {
		t.Errorf("template %s not baked after a create from it: %+v", k.tpl, tpl)
	}
	got := must[agentclient.Sandbox](t, "get")(k.c.GetSandbox(ctx(), sb.ID))
	if got.ID != sb.ID || got.State != agentclient.StateRunning || got.Template != sb.Template || got.MemoryMiB != sb.MemoryMiB {
		t.Errorf("get %+v after create %+v", got, sb)
	}
	k.checkCounts(t, sb.ID)

	_, err := k.c.CreateSandbox(ctx(), agentclient.CreateRequest{ID: sb.ID, Template: k.tpl})
	wantErr(t, "create with a taken id", err, 409, "conflict")
	_, err = k.c.GetSandbox(ctx(), missingSandbox)
	wantErr(t, "get an unknown sandbox", err, 404, "not_found")
}

// checkCounts checks that the sandbox list holds ids and that /v1/info counts the list: a slot
// for every sandbox in any state, memory for running ones.
func (k *contract) checkCounts(t *testing.T, ids ...string) {
	t.Helper()
	sbs := must[[]agentclient.Sandbox](t, "list")(k.c.ListSandboxes(ctx()))
	info := must[agentclient.Info](t, "info")(k.c.Info(ctx()))
	var listed []string
	committed := 0
	for _, sb := range sbs {
		listed = append(listed, sb.ID)
		if sb.State == agentclient.StateRunning {
			committed += sb.MemoryMiB
		}
	}
	slices.Sort(listed)
	ids = slices.Sorted(slices.Values(ids))
	if !slices.Equal(listed, ids) {
		t.Errorf("sandboxes listed %v, want %v", listed, ids)
	}
	if info.SlotsUsed != int64(len(sbs)) || info.MemMiBCommitted != int64(committed) {
		t.Errorf("info counts %d slots and %d MiB committed; the list has %d sandboxes, %d MiB running",
			info.SlotsUsed, info.MemMiBCommitted, len(sbs), committed)
	}
}

func (k *contract) run(t *testing.T, id string, req agentclient.ExecRequest) agentclient.ExecResult {
	t.Helper()
	return must[agentclient.ExecResult](t, "exec "+req.Cmd)(k.c.Exec(ctx(), id, req))
}

// exec: output, exit code, env, cwd, stdin, timeout and the refusals. The fake interprets a few
// commands (echo, printenv, pwd, cat, sleep, exit); the suite uses only those.
func (k *contract) exec(t *testing.T) {
	id := k.main.ID
	secs := func(s float64) *float64 { return &s }
	stdin := "to stdin"
	for _, c := range []struct {
		req            agentclient.ExecRequest
		stdout, stderr string
		exit           int
		timedOut       bool
	}{
		{agentclient.ExecRequest{Cmd: "echo hello"}, "hello\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "echo oops >&2"}, "", "oops\n", 0, false},
		{agentclient.ExecRequest{Cmd: "exit 3"}, "", "", 3, false},
		{agentclient.ExecRequest{Argv: []string{"echo", "two  spaces"}}, "two  spaces\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "printenv CONTRACT_EXEC", Env: map[string]string{"CONTRACT_EXEC": "from-exec"}}, "from-exec\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "printenv CONTRACT_CREATE"}, "from-create\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "printenv CONTRACT_UNSET"}, "", "", 1, false},
		{agentclient.ExecRequest{Cmd: "pwd"}, "/home/user\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "pwd", Cwd: "/tmp"}, "/tmp\n", "", 0, false},
		{agentclient.ExecRequest{Cmd: "cat", Stdin: &stdin}, stdin, "", 0, false},
		// A timed-out command is killed (SIGKILL: 128 + 9, the shell's convention).
		{agentclient.ExecRequest{Cmd: "sleep 30", TimeoutSeconds: secs(0.5)}, "", "", 137, true},
	} {
		r := k.run(t, id, c.req)
		if r.Stdout != c.stdout || r.Stderr != c.stderr || r.ExitCode != c.exit || r.TimedOut != c.timedOut {
			t.Errorf("exec %+v: got %+v, want stdout %q stderr %q exit %d timed_out %v", c.req, r, c.stdout, c.stderr, c.exit, c.timedOut)
		}
	}
	// A shell that cannot find a command says so on stderr and exits 127; argv names an executable.
	if r := k.run(t, id, agentclient.ExecRequest{Cmd: "no-such-command"}); r.ExitCode != 127 || r.Stderr == "" {
		t.Errorf("exec of an unknown command: %+v", r)
	}
	for _, c := range []struct {
		what   string
		req    agentclient.ExecRequest
		status int
		code   string
	}{
		{"neither cmd nor argv", agentclient.ExecRequest{}, 400, "invalid_request"},
		{"both cmd and argv", agentclient.ExecRequest{Cmd: "echo", Argv: []string{"echo"}}, 400, "invalid_request"},
		{"a zero timeout", agentclient.ExecRequest{Cmd: "echo", TimeoutSeconds: secs(0)}, 400, "invalid_request"},
		{"a bad env name", agentclient.ExecRequest{Cmd: "echo", Env: map[string]string{"A=B": "x"}}, 400, "invalid_request"},
		{"an unknown executable", agentclient.ExecRequest{Argv: []string{"no-such-command"}}, 404, "not_found"},
		{"a missing cwd", agentclient.ExecRequest{Cmd: "pwd", Cwd: "/no/such/dir"}, 404, "not_found"},
		{"a relative cwd", agentclient.ExecRequest{Cmd: "pwd", Cwd: "tmp"}, 400, "invalid_request"},
	} {
		_, err := k.c.Exec(ctx(), id, c.req)
		wantErr(t, "exec with "+c.what, err, c.status, c.code)
	}
	_, err := k.c.Exec(ctx(), missingSandbox, agentclient.ExecRequest{Cmd: "echo"})
	wantErr(t, "exec in an unknown sandbox", err, 404, "not_found")

	// Streamed: NDJSON events, then one with the exit code.
	for _, c := range []struct {
		cmd, stdout, stderr string
		exit                int
	}{{"echo streamed", "streamed\n", "", 0}, {"echo streamed >&2", "", "streamed\n", 0}, {"exit 4", "", "", 4}} {
		body, err := k.c.ExecStream(ctx(), id, agentclient.ExecRequest{Cmd: c.cmd})
		if err != nil {
			t.Fatalf("stream %q: %v", c.cmd, err)
		}
		stdout, stderr, end := readStream(t, body)
		if stdout != c.stdout || stderr != c.stderr || end.ExitCode == nil || *end.ExitCode != c.exit || end.TimedOut == nil || *end.TimedOut {
			t.Errorf("stream %q: stdout %q stderr %q end %+v", c.cmd, stdout, stderr, end)
		}
	}
	_, err = k.c.ExecStream(ctx(), missingSandbox, agentclient.ExecRequest{Cmd: "echo"})
	wantErr(t, "stream in an unknown sandbox", err, 404, "not_found")
}

type streamEnd struct {
	ExitCode *int  `json:"exit_code"`
	TimedOut *bool `json:"timed_out"`
}

// readStream reads an exec stream to its end event.
func readStream(t *testing.T, body io.ReadCloser) (stdout, stderr string, end streamEnd) {
	t.Helper()
	defer body.Close()
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Stdout *string `json:"stdout"`
			Stderr *string `json:"stderr"`
			streamEnd
		}
		if err := dec.Decode(&ev); err == io.EOF {
			return
		} else if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch {
		case ev.Stdout != nil:
			stdout += *ev.Stdout
		case ev.Stderr != nil:
			stderr += *ev.Stderr
		case ev.ExitCode != nil:
			end = ev.streamEnd
		}
	}
}

func (k *contract) write(t *testing.T, id, path, data string) agentclient.Stat {
	t.Helper()
	return must[agentclient.Stat](t, "write "+path)(k.c.WriteFile(ctx(), id, path, strings.NewReader(data), int64(len(data))))
}

// read returns a file's content, or the error.
func (k *contract) read(id, path string) (string, error) {
	resp, err := k.c.ReadFile(ctx(), id, path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.ContentLength != int64(len(b)) {
		err = fmt.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(b))
	}
	return string(b), err
}

func (k *contract) wantFile(t *testing.T, id, path, want string) {
	t.Helper()
	if got, err := k.read(id, path); err != nil || got != want {
		t.Errorf("read %s in %s: %q, %v; want %q", path, id, got, err, want)
	}
}

// files: the file API over a directory of its own. The fake keeps files in a map and knows no
// owners or permissions; the suite writes only where the default user may.
func (k *contract) files(t *testing.T) {
	id, dir := k.main.ID, "/tmp/contract"
	st := k.write(t, id, dir+"/a/b.txt", "hello") // parents are made
	if st.Name != "b.txt" || st.Path != dir+"/a/b.txt" || st.Type != "file" || st.Size != 5 || st.Mode != "0644" || !isTime(st.MTime) {
		t.Errorf("write answered %+v", st)
	}
	k.wantFile(t, id, dir+"/a/b.txt", "hello")
	if st := k.write(t, id, dir+"/empty", ""); st.Size != 0 || st.Type != "file" {
		t.Errorf("write of an empty file answered %+v", st)
	}
	if st, err := k.c.StatFile(ctx(), id, dir+"/a"); err != nil || st.Type != "dir" || st.Name != "a" || st.Path != dir+"/a" || !isTime(st.MTime) {
		t.Errorf("stat of a directory: %+v, %v", st, err)
	}
	k.wantList(t, id, dir, 0, "a/", "empty")
	k.wantList(t, id, dir, 2, "a/", "a/b.txt", "empty")

	// mkdir makes parents and may be repeated; over a file it is a conflict.
	for range 2 {
		if err := k.c.Mkdir(ctx(), id, dir+"/d/e"); err != nil {
			t.Errorf("mkdir: %v", err)
		}
	}
	wantErr(t, "mkdir over a file", k.c.Mkdir(ctx(), id, dir+"/a/b.txt"), 409, "conflict")

	// move renames files and directories; it makes no parents.
	if err := k.c.Move(ctx(), id, dir+"/a/b.txt", dir+"/d/c.txt"); err != nil {
		t.Errorf("move a file: %v", err)
	}
	k.wantFile(t, id, dir+"/d/c.txt", "hello")
	_, err := k.c.StatFile(ctx(), id, dir+"/a/b.txt")
	wantErr(t, "stat of a moved file", err, 404, "not_found")
	if err := k.c.Move(ctx(), id, dir+"/d", dir+"/f"); err != nil {
		t.Errorf("move a directory: %v", err)
	}
	k.wantFile(t, id, dir+"/f/c.txt", "hello")
	k.wantList(t, id, dir, 3, "a/", "empty", "f/", "f/c.txt", "f/e/")
	wantErr(t, "move of a missing file", k.c.Move(ctx(), id, dir+"/nope", dir+"/nope2"), 404, "not_found")
	wantErr(t, "move into a missing directory", k.c.Move(ctx(), id, dir+"/f/c.txt", dir+"/missing/c.txt"), 404, "not_found")

	for _, c := range []struct {
		what   string
		call   func() error
		status int
		code   string
	}{
		{"read of a directory", func() error { _, err := k.read(id, dir+"/f"); return err }, 400, "invalid_request"},
		{"read of a missing file", func() error { _, err := k.read(id, dir+"/nope"); return err }, 404, "not_found"},
		{"read of a relative path", func() error { _, err := k.read(id, "relative.txt"); return err }, 400, "invalid_request"},
		{"read in an unknown sandbox", func() error { _, err := k.read(missingSandbox, dir+"/f/c.txt"); return err }, 404, "not_found"},
		{"write over a directory", func() error {
			_, err := k.c.WriteFile(ctx(), id, dir+"/f", strings.NewReader("x"), 1)
			return err
		}, 400, "invalid_request"},
		{"stat of a missing path", func() error { _, err := k.c.StatFile(ctx(), id, dir+"/nope"); return err }, 404, "not_found"},
		{"list of a file", func() error { _, err := k.c.ListFiles(ctx(), id, dir+"/f/c.txt", 0); return err }, 400, "invalid_request"},
		{"list of a missing directory", func() error { _, err := k.c.ListFiles(ctx(), id, dir+"/nope", 0); return err }, 404, "not_found"},
		{"remove of a missing path", func() error { return k.c.Remove(ctx(), id, dir+"/nope", false) }, 404, "not_found"},
		{"remove of a full directory", func() error { return k.c.Remove(ctx(), id, dir+"/f", false) }, 409, "conflict"},
	} {
		wantErr(t, c.what, c.call(), c.status, c.code)
	}

	for _, p := range []string{dir + "/f/c.txt", dir + "/a"} {
		if err := k.c.Remove(ctx(), id, p, false); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	k.wantList(t, id, dir, 3, "empty", "f/", "f/e/")
	if err := k.c.Remove(ctx(), id, dir, true); err != nil {
		t.Errorf("remove -r: %v", err)
	}
	_, err = k.c.StatFile(ctx(), id, dir)
	wantErr(t, "stat after remove -r", err, 404, "not_found")
}

func isTime(s string) bool {
	_, err := time.Parse(time.RFC3339, s)
	return err == nil
}

// wantList checks a listing of dir: entries relative to dir, directories with a trailing slash,
// in the agent's order (a directory's entries by name, each directory followed by its own).
func (k *contract) wantList(t *testing.T, id, dir string, depth int, want ...string) {
	t.Helper()
	entries, err := k.c.ListFiles(ctx(), id, dir, depth)
	var got []string
	for _, e := range entries {
		name := strings.TrimPrefix(e.Path, dir+"/")
		if e.Type == "dir" {
			name += "/"
		}
		if e.Name != e.Path[strings.LastIndex(e.Path, "/")+1:] {
			t.Errorf("list entry %+v: name is not the path's last element", e)
		}
		got = append(got, name)
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("list %s depth %d: %v, %v; want %v", dir, depth, got, err, want)
	}
}

// snapshots: a snapshot keeps memory and disk of one instant; sandboxes made from it start there
// and outlive its deletion. /tmp is the guest's memory (tmpfs) on the real agent.
func (k *contract) snapshots(t *testing.T) {
	id := k.main.ID
	k.write(t, id, "/tmp/moment", "before")
	sn := must[agentclient.Snapshot](t, "snapshot")(k.c.CreateSnapshot(ctx(), id))
	if !snapshotID.MatchString(sn.ID) || sn.SandboxID != id || sn.Template != k.tpl || sn.CreatedAt.IsZero() || sn.SizeBytes <= 0 ||
		sn.VCPUs != k.main.VCPUs || sn.MemoryMiB != k.main.MemoryMiB {
		t.Errorf("snapshot %+v of %+v", sn, k.main)
	}
	if sb := must[agentclient.Sandbox](t, "get")(k.c.GetSandbox(ctx(), id)); sb.State != agentclient.StateRunning {
		t.Errorf("sandbox %s is %s after a snapshot", id, sb.State)
	}
	k.write(t, id, "/tmp/moment", "after")
	if got := must[agentclient.Snapshot](t, "get snapshot")(k.c.GetSnapshot(ctx(), sn.ID)); got.ID != sn.ID || got.SandboxID != id || got.SizeBytes != sn.SizeBytes {
		t.Errorf("get snapshot %+v, made %+v", got, sn)
	}
	if !slices.ContainsFunc(must[[]agentclient.Snapshot](t, "list snapshots")(k.c.ListSnapshots(ctx())), func(s agentclient.Snapshot) bool { return s.ID == sn.ID }) {
		t.Errorf("snapshot %s not listed", sn.ID)
	}
	_, err := k.c.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: sn.ID, Template: "no-such-template"})
	wantErr(t, "create from a snapshot of another template", err, 400, "invalid_request")

	child := must[agentclient.Sandbox](t, "create from snapshot")(k.c.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: sn.ID}))
	defer k.c.KillSandbox(ctx(), child.ID)
	if child.SnapshotID != sn.ID || child.Template != k.tpl || child.State != agentclient.StateRunning || child.ForkOf != "" || child.MemoryMiB != sn.MemoryMiB {
		t.Errorf("create from snapshot %s: %+v", sn.ID, child)
	}
	k.wantFile(t, child.ID, "/tmp/moment", "before")
	// The create's env is the only env: the snapshot's sandbox's is not carried.
	if r := k.run(t, child.ID, agentclient.ExecRequest{Cmd: "printenv CONTRACT_CREATE"}); r.ExitCode != 1 || r.Stdout != "" {
		t.Errorf("env of a sandbox made from a snapshot: %+v", r)
	}
	k.checkCounts(t, id, child.ID)

	if err := k.c.DeleteSnapshot(ctx(), sn.ID); err != nil {
		t.Errorf("delete snapshot: %v", err)
	}
	_, err = k.c.GetSnapshot(ctx(), sn.ID)
	wantErr(t, "get a deleted snapshot", err, 404, "not_found")
	wantErr(t, "delete a deleted snapshot", k.c.DeleteSnapshot(ctx(), sn.ID), 404, "not_found")
	_, err = k.c.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: sn.ID})
	wantErr(t, "create from a deleted snapshot", err, 404, "not_found")
	if r := k.run(t, child.ID, agentclient.ExecRequest{Cmd: "echo alive"}); r.Stdout != "alive\n" {
		t.Errorf("a sandbox made from a deleted snapshot: %+v", r)
	}
	_, err = k.c.CreateSnapshot(ctx(), missingSandbox)
	wantErr(t, "snapshot of an unknown sandbox", err, 404, "not_found")
	if err := k.c.KillSandbox(ctx(), child.ID); err != nil {
		t.Errorf("kill: %v", err)
	}
}

// fork: children start from the parent's memory and files at one instant, then diverge.
func (k *contract) fork(t *testing.T) {
	id := k.main.ID
	for _, n := range []int{0, agentclient.MaxForkCount + 1} {
		_, err := k.c.Fork(ctx(), id, n)
		wantErr(t, fmt.Sprint("fork count ", n), err, 400, "invalid_request")
	}
	_, err := k.c.Fork(ctx(), missingSandbox, 1)
	wantErr(t, "fork of an unknown sandbox", err, 404, "not_found")

	children := must[[]agentclient.Sandbox](t, "fork")(k.c.Fork(ctx(), id, 2))
	ids := []string{id}
	for _, c := range children {
		defer k.c.KillSandbox(ctx(), c.ID)
		ids = append(ids, c.ID)
	}
	if len(children) != 2 || children[0].ID == children[1].ID {
		t.Fatalf("fork of 2: %+v", children)
	}
	for _, c := range children {
		if !sandboxID.MatchString(c.ID) || c.ID == id || c.ForkOf != id || c.Template != k.tpl || c.State != agentclient.StateRunning ||
			c.SnapshotID != "" || c.MemoryMiB != k.main.MemoryMiB {
			t.Errorf("child %+v of %s", c, id)
		}
		k.wantFile(t, c.ID, "/tmp/moment", "after")
		// Forks keep their parent's env.
		if r := k.run(t, c.ID, agentclient.ExecRequest{Cmd: "printenv CONTRACT_CREATE"}); r.Stdout != "from-create\n" {
			t.Errorf("env of a fork: %+v", r)
		}
	}
	k.write(t, children[0].ID, "/tmp/moment", "child")
	k.wantFile(t, id, "/tmp/moment", "after")
	k.wantFile(t, children[1].ID, "/tmp/moment", "after")
	k.checkCounts(t, ids...)
	for _, c := range children {
		if err := k.c.KillSandbox(ctx(), c.ID); err != nil {
			t.Errorf("kill %s: %v", c.ID, err)
		}
	}
}

// hibernate: state moves running → hibernated → running; a hibernated sandbox keeps its slot
// and its memory, and any call wakes it.
func (k *contract) hibernate(t *testing.T) {
	id := k.main.ID
	for range 2 { // hibernating a hibernated sandbox answers it as it is
		sb := must[agentclient.Sandbox](t, "hibernate")(k.c.Hibernate(ctx(), id))
		if sb.ID != id || sb.State != agentclient.StateHibernated || sb.PID != 0 {
			t.Errorf("hibernate answered %+v", sb)
		}
	}
	_, err := k.c.SandboxMetrics(ctx(), id)
	wantErr(t, "metrics of a hibernated sandbox", err, 409, "conflict")
	if sb := must[agentclient.Sandbox](t, "get")(k.c.GetSandbox(ctx(), id)); sb.State != agentclient.StateHibernated || sb.PID != 0 {
		t.Errorf("get after hibernate (and metrics, which must not wake it): %+v", sb)
	}
	k.checkCounts(t, id)
	for range 2 { // waking a running sandbox answers it as it is
		sb := must[agentclient.Sandbox](t, "wake")(k.c.Wake(ctx(), id))
		if sb.State != agentclient.StateRunning || sb.PID <= 0 {
			t.Errorf("wake answered %+v", sb)
		}
	}
	k.wantFile(t, id, "/tmp/moment", "after")
	k.checkCounts(t, id)

	must[agentclient.Sandbox](t, "hibernate")(k.c.Hibernate(ctx(), id))
	if r := k.run(t, id, agentclient.ExecRequest{Cmd: "printenv CONTRACT_CREATE"}); r.Stdout != "from-create\n" {
		t.Errorf("exec in a hibernated sandbox: %+v", r)
	}
	if sb := must[agentclient.Sandbox](t, "get")(k.c.GetSandbox(ctx(), id)); sb.State != agentclient.StateRunning {
		t.Errorf("after an exec woke it: %+v", sb)
	}
	_, err = k.c.Hibernate(ctx(), missingSandbox)
	wantErr(t, "hibernate an unknown sandbox", err, 404, "not_found")
	_, err = k.c.Wake(ctx(), missingSandbox)
	wantErr(t, "wake an unknown sandbox", err, 404, "not_found")
}

// metrics: a running sandbox's figures are plausible for its size (the guest sees a little less
// memory than it was given: the kernel keeps some); an unknown sandbox is a 404.
func (k *contract) metrics(t *testing.T) {
	id := k.main.ID
	for i := range 2 { // the second call measures CPU since the first
		m := must[agentclient.SandboxMetrics](t, "metrics")(k.c.SandboxMetrics(ctx(), id))
		t.Logf("metrics %d: %+v", i, m)
		given := int64(k.main.MemoryMiB) << 20
		if !isTime(m.At) || m.VCPUs != k.main.VCPUs || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 ||
			m.MemTotalBytes < given/2 || m.MemTotalBytes > given || m.MemUsedBytes <= 0 || m.MemUsedBytes >= m.MemTotalBytes ||
			m.MemCacheBytes < 0 || m.DiskTotalBytes < 64<<20 || m.DiskUsedBytes <= 0 || m.DiskUsedBytes > m.DiskTotalBytes ||
			m.HostCPUSeconds <= 0 || m.HostMemBytes <= 0 {
			t.Errorf("metrics %d of a %d-vCPU %d MiB sandbox: %+v", i, k.main.VCPUs, k.main.MemoryMiB, m)
		}
	}
	_, err := k.c.SandboxMetrics(ctx(), missingSandbox)
	wantErr(t, "metrics of an unknown sandbox", err, 404, "not_found")
}

// volumes: create, grow, attach at create (one read-write user or read-only ones), refusals
// while attached, data that outlives the sandbox, delete.
func (k *contract) volumes(t *testing.T) {
	for _, c := range []struct {
		what string
		req  agentclient.CreateVolumeRequest
	}{
		{"no vol_ prefix", agentclient.CreateVolumeRequest{ID: "data1", SizeMiB: 16}},
		{"upper case", agentclient.CreateVolumeRequest{ID: "vol_DATA", SizeMiB: 16}},
		{"size 0", agentclient.CreateVolumeRequest{ID: unique("vol_"), SizeMiB: 0}},
		{"a size over the maximum", agentclient.CreateVolumeRequest{ID: unique("vol_"), SizeMiB: MaxVolumeMiB + 1}},
	} {
		_, err := k.c.CreateVolume(ctx(), c.req)
		wantErr(t, "volume with "+c.what, err, 400, "invalid_request")
	}
	// The pool admits what /v1/info says it does (with a margin: the host's disk is shared).
	if size := must[agentclient.Info](t, "info")(k.c.Info(ctx())).PoolMiBFree + 1024; size <= MaxVolumeMiB {
		_, err := k.c.CreateVolume(ctx(), agentclient.CreateVolumeRequest{ID: unique("vol_"), SizeMiB: size})
		wantErr(t, "a volume larger than the pool admits", err, 507, "no_space")
	}
	vid, other := unique("vol_"), unique("vol_")
	v := must[agentclient.Volume](t, "create volume")(k.c.CreateVolume(ctx(), agentclient.CreateVolumeRequest{ID: vid, SizeMiB: 16}))
	defer k.c.DeleteVolume(ctx(), vid)
	if v.ID != vid || v.SizeMiB != 16 || v.CreatedAt.IsZero() || len(v.Attachments) != 0 {
		t.Errorf("created volume %+v", v)
	}
	must[agentclient.Volume](t, "create volume")(k.c.CreateVolume(ctx(), agentclient.CreateVolumeRequest{ID: other, SizeMiB: 16}))
	defer k.c.DeleteVolume(ctx(), other)
	_, err := k.c.CreateVolume(ctx(), agentclient.CreateVolumeRequest{ID: vid, SizeMiB: 16})
	wantErr(t, "create a volume twice", err, 409, "conflict")
	if got := must[agentclient.Volume](t, "get volume")(k.c.GetVolume(ctx(), vid)); got.ID != vid || got.SizeMiB != 16 {
		t.Errorf("get volume: %+v", got)
	}
	if vs := must[[]agentclient.Volume](t, "list volumes")(k.c.ListVolumes(ctx())); !slices.ContainsFunc(vs, func(x agentclient.Volume) bool { return x.ID == vid }) {
		t.Errorf("volume %s not listed: %+v", vid, vs)
	}
	_, err = k.c.ResizeVolume(ctx(), vid, 8)
	wantErr(t, "shrink a volume", err, 400, "invalid_request")
	_, err = k.c.ResizeVolume(ctx(), "vol_nosuchvolume", 32)
	wantErr(t, "resize an unknown volume", err, 404, "not_found")
	if got := must[agentclient.Volume](t, "resize")(k.c.ResizeVolume(ctx(), vid, 24)); got.SizeMiB != 24 {
		t.Errorf("resize to 24: %+v", got)
	}

	create := func(ms ...agentclient.VolumeMount) (agentclient.Sandbox, error) {
		return k.c.CreateSandbox(ctx(), agentclient.CreateRequest{Template: k.tpl, Volumes: ms})
	}
	rw := func(p string) agentclient.VolumeMount { return agentclient.VolumeMount{VolumeID: vid, MountPath: p} }
	ro := agentclient.VolumeMount{VolumeID: vid, MountPath: "/data", ReadOnly: true}
	for _, c := range []struct {
		what string
		ms   []agentclient.VolumeMount
	}{
		{"a relative mount path", []agentclient.VolumeMount{rw("data")}},
		{"mount path /", []agentclient.VolumeMount{rw("/")}},
		{"a system directory", []agentclient.VolumeMount{rw("/etc/data")}},
		{"one volume twice", []agentclient.VolumeMount{rw("/data"), rw("/data2")}},
		{"overlapping mount paths", []agentclient.VolumeMount{rw("/data"), {VolumeID: other, MountPath: "/data/sub"}}},
	} {
		_, err := create(c.ms...)
		wantErr(t, "create with "+c.what, err, 400, "invalid_request")
	}

	writer := must[agentclient.Sandbox](t, "create with a volume")(create(rw("/data/")))
	defer k.c.KillSandbox(ctx(), writer.ID)
	want := []agentclient.VolumeAttachment{{SandboxID: writer.ID, MountPath: "/data"}}
	if got := must[agentclient.Volume](t, "get volume")(k.c.GetVolume(ctx(), vid)); !slices.Equal(got.Attachments, want) {
		t.Errorf("attachments %+v, want %+v", got.Attachments, want)
	}
	k.write(t, writer.ID, "/data/kept", "on the volume")
	// A hibernated sandbox keeps its volumes attached, and mounted when it wakes.
	must[agentclient.Sandbox](t, "hibernate")(k.c.Hibernate(ctx(), writer.ID))
	if got := must[agentclient.Volume](t, "get volume")(k.c.GetVolume(ctx(), vid)); !slices.Equal(got.Attachments, want) {
		t.Errorf("attachments of a hibernated sandbox %+v, want %+v", got.Attachments, want)
	}
	k.wantFile(t, writer.ID, "/data/kept", "on the volume")
	for _, c := range []struct {
		what string
		err  error
	}{
		{"delete an attached volume", k.c.DeleteVolume(ctx(), vid)},
		{"resize an attached volume", second(k.c.ResizeVolume(ctx(), vid, 32))},
		{"a second read-write user", second(create(rw("/data")))},
		{"a reader beside a writer", second(create(ro))},
	} {
		wantErr(t, c.what, c.err, 409, "conflict")
	}
	k.volumeCopies(t, writer.ID, vid, other)
	if err := k.c.KillSandbox(ctx(), writer.ID); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if got := must[agentclient.Volume](t, "get volume")(k.c.GetVolume(ctx(), vid)); len(got.Attachments) != 0 {
		t.Errorf("attachments after the kill: %+v", got.Attachments)
	}

	// Any number of readers; the data outlived its writer.
	r1 := must[agentclient.Sandbox](t, "create a reader")(create(ro))
	defer k.c.KillSandbox(ctx(), r1.ID)
	r2 := must[agentclient.Sandbox](t, "create a reader")(create(ro))
	defer k.c.KillSandbox(ctx(), r2.ID)
	want = []agentclient.VolumeAttachment{{SandboxID: r1.ID, MountPath: "/data", ReadOnly: true}, {SandboxID: r2.ID, MountPath: "/data", ReadOnly: true}}
	slices.SortFunc(want, func(a, b agentclient.VolumeAttachment) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	if got := must[agentclient.Volume](t, "get volume")(k.c.GetVolume(ctx(), vid)); !slices.Equal(got.Attachments, want) {
		t.Errorf("attachments %+v, want %+v", got.Attachments, want)
	}
	k.wantFile(t, r2.ID, "/data/kept", "on the volume")
	_, err = k.c.CreateSnapshot(ctx(), r1.ID)
	wantErr(t, "snapshot of a sandbox with a read-only volume", err, 409, "conflict")
	_, err = k.c.Fork(ctx(), r1.ID, 1)
	wantErr(t, "fork of a sandbox with a read-only volume", err, 409, "conflict")
	_, err = k.c.WriteFile(ctx(), r1.ID, "/data/new", strings.NewReader("x"), 1)
	wantErr(t, "write to a read-only volume", err, 403, "forbidden")
	_, err = create(rw("/data"))
	wantErr(t, "a writer beside readers", err, 409, "conflict")
	for _, id := range []string{r1.ID, r2.ID} {
		if err := k.c.KillSandbox(ctx(), id); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
	}
	for _, id := range []string{vid, other} {
		if err := k.c.DeleteVolume(ctx(), id); err != nil {
			t.Errorf("delete volume %s: %v", id, err)
		}
	}
	_, err = k.c.GetVolume(ctx(), vid)
	wantErr(t, "get a deleted volume", err, 404, "not_found")
	wantErr(t, "delete a deleted volume", k.c.DeleteVolume(ctx(), vid), 404, "not_found")
}

// volumeCopies: a snapshot or a fork of sandbox id, which has volume vid at /data, copies the
// volume at its instant; a sandbox made from it mounts a new volume of its own made from the copy,
// and takes no other volume (other).
func (k *contract) volumeCopies(t *testing.T, id, vid, other string) {
	sn := must[agentclient.Snapshot](t, "snapshot with a volume")(k.c.CreateSnapshot(ctx(), id))
	defer k.c.DeleteSnapshot(ctx(), sn.ID)
	if want := []agentclient.SnapshotVolume{{VolumeID: vid, MountPath: "/data", SizeMiB: 24, FS: "ext4"}}; !slices.Equal(sn.Volumes, want) || sn.Published {
		t.Errorf("snapshot's volumes %+v (published %v), want %+v, not published", sn.Volumes, sn.Published, want)
	}
	k.write(t, id, "/data/later", "after the snapshot")
	_, err := k.c.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: sn.ID, Volumes: []agentclient.VolumeMount{{VolumeID: other, MountPath: "/other"}}})
	wantErr(t, "create from a snapshot with volumes, with a volume", err, 409, "conflict")
	restored := must[agentclient.Sandbox](t, "create from a snapshot with a volume")(k.c.CreateSandbox(ctx(), agentclient.CreateRequest{SnapshotID: sn.ID}))
	defer k.c.KillSandbox(ctx(), restored.ID)
	forked := must[[]agentclient.Sandbox](t, "fork with a volume")(k.c.Fork(ctx(), id, 1))
	defer k.c.KillSandbox(ctx(), forked[0].ID)
	seen := map[string]bool{vid: true}
	for _, sb := range []agentclient.Sandbox{restored, forked[0]} {
		if len(sb.Volumes) != 1 || seen[sb.Volumes[0].VolumeID] || sb.Volumes[0].MountPath != "/data" || sb.Volumes[0].ReadOnly {
			t.Fatalf("volumes of %s: %+v, want a new one at /data", sb.ID, sb.Volumes)
		}
		seen[sb.Volumes[0].VolumeID] = true
		want := []agentclient.VolumeAttachment{{SandboxID: sb.ID, MountPath: "/data"}}
		if got := must[agentclient.Volume](t, "get a copy")(k.c.GetVolume(ctx(), sb.Volumes[0].VolumeID)); got.SizeMiB != 24 || !slices.Equal(got.Attachments, want) {
			t.Errorf("volume copy %+v, want 24 MiB attached %+v", got, want)
		}
		k.wantFile(t, sb.ID, "/data/kept", "on the volume")
	}
	if _, err := k.read(restored.ID, "/data/later"); err == nil {
		t.Errorf("a sandbox made from the snapshot sees a file written after it")
	}
	k.wantFile(t, forked[0].ID, "/data/later", "after the snapshot")
	k.write(t, restored.ID, "/data/kept", "restored")
	k.write(t, forked[0].ID, "/data/kept", "forked")
	k.wantFile(t, id, "/data/kept", "on the volume")
	for _, sb := range []agentclient.Sandbox{restored, forked[0]} {
		if err := k.c.KillSandbox(ctx(), sb.ID); err != nil {
			t.Fatalf("kill: %v", err)
		}
		if err := k.c.DeleteVolume(ctx(), sb.Volumes[0].VolumeID); err != nil { // it outlived its sandbox, detached
			t.Errorf("delete the copy %s: %v", sb.Volumes[0].VolumeID, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// kill: the sandbox is gone from the agent; killing it again is not an error.
func (k *contract) kill(t *testing.T) {
	id := k.main.ID
	for range 2 {
		if err := k.c.KillSandbox(ctx(), id); err != nil {
			t.Errorf("kill: %v", err)
		}
	}
	_, err := k.c.GetSandbox(ctx(), id)
	wantErr(t, "get a killed sandbox", err, 404, "not_found")
	_, err = k.c.Exec(ctx(), id, agentclient.ExecRequest{Cmd: "echo"})
	wantErr(t, "exec in a killed sandbox", err, 404, "not_found")
	k.checkCounts(t)
}
