package api

// End-to-end tests: the control plane over real HTTP with real host agents (internal/hostagent)
// booting real microVMs. Slow; they run only with PANDASTACK_VM_TESTS=1 (make test sets it) and
// need root, QEMU and the guest image tools (`make setup`).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// vmHost is one real host agent on its own data dir, served over loopback HTTP.
type vmHost struct {
	t     *testing.T
	dir   string
	token string
	cfg   hostagent.Config
	agent *hostagent.Agent
	srv   *httptest.Server
}

func startVMHost(t *testing.T) *vmHost { return startVMHostWith(t, nil) }

// startVMHostWith is startVMHost with the agent's configuration tuned by tune (if non-nil).
func startVMHostWith(t *testing.T, tune func(*hostagent.Config)) *vmHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "pandastack-e2e-agent-")
	if err != nil {
		t.Fatal(err)
	}
	h := &vmHost{t: t, dir: dir, token: "e2e-agent-token"}
	cfg := hostagent.Config{DataDir: dir, Token: h.token, Logger: quietLogger(),
		GuestAgent: testenv.GuestAgent(t), ImageCacheDir: testenv.ImageCache(), DiskReserveMiB: testenv.DiskReserveMiB}
	if tune != nil {
		tune(&cfg)
	}
	if cfg.TemplateStore == "" && cfg.BlobStore == "" { // a test of the blob store sees its own bakes travel
		cfg.TemplateStore = testenv.BakeStore()
	}
	h.cfg = cfg
	h.start()
	t.Cleanup(func() {
		a := h.agent
		for _, sb := range a.List() {
			a.Kill(sb.ID)
		}
		h.stop()
		// Agents leave their loop-mounted pool in place for a successor; tests tear it down.
		if p, err := storage.Open(dir, 0, 0); err == nil {
			if err := p.Close(); err != nil {
				t.Logf("pool close: %v", err)
			}
		}
		os.RemoveAll(dir)
	})
	return h
}

// start starts the host's agent on its data dir (a successor adopts the VMs its predecessor left
// running) and serves it on a new loopback URL.
func (h *vmHost) start() {
	a, err := hostagent.New(context.Background(), h.cfg)
	if err != nil {
		h.t.Fatalf("host agent: %v", err)
	}
	h.agent = a
	h.srv = httptest.NewServer(a.Handler())
}

// stop ends the agent's HTTP server (the host "dies" as far as the control plane can tell).
func (h *vmHost) stop() {
	if h.srv != nil {
		h.srv.Close()
		h.srv = nil
		h.agent.Close()
	}
}

func (h *vmHost) client() *agentclient.Client { return agentclient.New(h.srv.URL, h.token) }

func (h *vmHost) running() map[string]bool {
	out := map[string]bool{}
	for _, sb := range h.agent.List() {
		if sb.State == "running" {
			out[sb.ID] = true
		}
	}
	return out
}

// bake makes the template ready on the host (the first bake also builds the guest image).
func (h *vmHost) bake(ctx context.Context, name string) {
	h.t.Helper()
	resp, err := h.client().Raw(ctx, "POST", "/v1/templates/"+name+"/bake", nil, nil, -1, nil)
	if err != nil {
		h.t.Fatalf("bake %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || strings.Contains(string(b), `"error"`) {
		h.t.Fatalf("bake %s failed: %v %s", name, err, b)
	}
}

// e2eCP is a control plane over SQLite in dir, using the given hosts.
type e2eCP struct {
	t      *testing.T
	dbPath string
	st     *store.Store
	sched  *scheduler.Scheduler
	srv    *Server
	hs     *httptest.Server
	cancel context.CancelFunc
	admin  string
}

func startCP(t *testing.T, dbPath string, schedCfg scheduler.Config, cfg Config, hosts ...*vmHost) *e2eCP {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	schedCfg.Store, schedCfg.Logger = st, quietLogger()
	sched := scheduler.New(schedCfg)
	for _, h := range hosts {
		sched.AddStaticAgent(h.srv.URL, h.token)
	}
	if err := sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Scheduler, cfg.Logger = st, sched, quietLogger()
	srv := New(cfg)
	rctx, cancel := context.WithCancel(ctx)
	go sched.Run(rctx)
	go srv.RunReaper(rctx)
	cp := &e2eCP{t: t, dbPath: dbPath, st: st, sched: sched, srv: srv, hs: httptest.NewServer(srv.Handler()), cancel: cancel}
	key, _, err := auth.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	cp.admin = key
	t.Cleanup(cp.stop)
	return cp
}

func (cp *e2eCP) stop() {
	if cp.hs != nil {
		cp.hs.Close()
		cp.cancel()
		cp.st.Close()
		cp.hs = nil
	}
}

func (cp *e2eCP) client(key string) *client.Client { return client.New(cp.hs.URL, key) }

func apiCode(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%d %s", ae.Status, ae.Code)
	}
	return fmt.Sprint(err)
}

func TestE2EFlow(t *testing.T) {
	testenv.NeedVMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	host := startVMHost(t)
	dbPath := filepath.Join(t.TempDir(), "state.db")
	cp := startCP(t, dbPath, scheduler.Config{}, Config{ReapInterval: 200 * time.Millisecond}, host)
	c := cp.client(cp.admin)

	// The whole flow, as the seeds use it.
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 600,
		Metadata: map[string]string{"task": "e2e"}, Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb.State != "running" || sb.Host == "" {
		t.Fatalf("created %+v", sb)
	}
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "python -c 'print(2 ** 10)'", TimeoutSeconds: client.Seconds(30)})
	if err != nil || r.Stdout != "1024\n" || r.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", r, err)
	}
	if r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo $GREETING"}); err != nil || r.Stdout != "hello\n" {
		t.Fatalf("create env: %+v %v", r, err)
	}
	var chunks []string
	var times []time.Time
	sr, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: "for i in 1 2 3; do echo $i; sleep 0.4; done; exit 4"},
		func(stream, data string) {
			chunks = append(chunks, data)
			times = append(times, time.Now())
		})
	if err != nil || sr.ExitCode != 4 || strings.Join(chunks, "") != "1\n2\n3\n" {
		t.Fatalf("stream: %+v %q %v", sr, chunks, err)
	}
	if times[len(times)-1].Sub(times[0]) < 500*time.Millisecond {
		t.Fatalf("stream output was not streamed: chunks at %v", times)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/e2e/note.txt", strings.NewReader("checkpoint"), 10); err != nil {
		t.Fatal(err)
	}
	body, _, err := c.ReadFile(ctx, sb.ID, "/tmp/e2e/note.txt")
	if err != nil {
		t.Fatal(err)
	}
	content, err := io.ReadAll(body)
	body.Close()
	if err != nil || string(content) != "checkpoint" {
		t.Fatalf("read back %q %v", content, err)
	}
	if err := c.Mkdir(ctx, sb.ID, "/tmp/e2e/sub"); err != nil {
		t.Fatal(err)
	}
	if err := c.Move(ctx, sb.ID, "/tmp/e2e/note.txt", "/tmp/e2e/sub/note.txt"); err != nil {
		t.Fatal(err)
	}
	ents, err := c.ListFiles(ctx, sb.ID, "/tmp/e2e/sub", 1)
	if err != nil || len(ents) != 1 || ents[0].Name != "note.txt" {
		t.Fatalf("list: %+v %v", ents, err)
	}
	if err := c.Remove(ctx, sb.ID, "/tmp/e2e/sub", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, sb.ID, "/tmp/e2e/sub"); apiCode(err) != "404 not_found" {
		t.Fatalf("stat removed dir: %v", err)
	}

	// Team isolation: another team's key sees a 404 and an empty list.
	_, kb, err := c.CreateTeam(ctx, "e2e-beta")
	if err != nil {
		t.Fatal(err)
	}
	cb := cp.client(kb.Key)
	if _, err := cb.GetSandbox(ctx, sb.ID); apiCode(err) != "404 not_found" {
		t.Fatalf("team B get: %v", err)
	}
	if _, err := cb.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); apiCode(err) != "404 not_found" {
		t.Fatalf("team B exec: %v", err)
	}
	if l, _, err := cb.ListSandboxes(ctx, client.ListOptions{State: "all"}); err != nil || len(l) != 0 {
		t.Fatalf("team B list: %v %v", l, err)
	}

	// Revoked key: 401.
	k, err := c.CreateKey(ctx, "short-lived", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cp.client(k.Key).ListSandboxes(ctx, client.ListOptions{}); apiCode(err) != "401 unauthorized" {
		t.Fatalf("revoked key: %v", err)
	}

	// Bad input: 4xx and nothing created, here or on the host.
	before := len(host.agent.List())
	for _, req := range []client.CreateRequest{{Template: "base", TTLSeconds: 86401}, {Template: "no-such-template"},
		{Template: "base", Metadata: map[string]string{"k": strings.Repeat("v", 513)}}} {
		if _, err := c.CreateSandbox(ctx, req); !strings.HasPrefix(apiCode(err), "400") {
			t.Fatalf("bad create %+v: %v", req, err)
		}
	}
	if _, err := c.Do(ctx, "POST", "/v1/sandboxes", nil, strings.NewReader(`{"template": "base", "ttl_seconds": -1}`), -1, "application/json", ""); !strings.HasPrefix(apiCode(err), "400") {
		t.Fatalf("negative ttl: %v", err)
	}
	if after := len(host.agent.List()); after != before {
		t.Fatalf("bad input created sandboxes on the host: %d -> %d", before, after)
	}

	// The reaper kills an expired sandbox on its host.
	short, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the reaper to kill "+short.ID, func() bool {
		got, err := c.GetSandbox(ctx, short.ID)
		return err == nil && got.State == "killed" && !host.running()[short.ID]
	})

	// A server restart keeps sandboxes, which still exec.
	cp.stop()
	cp2 := startCP(t, dbPath, scheduler.Config{}, Config{}, host)
	c2 := cp2.client(cp.admin)
	got, err := c2.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != "running" {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if r, err := c2.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo still here"}); err != nil || r.Stdout != "still here\n" {
		t.Fatalf("exec after restart: %+v %v", r, err)
	}

	// Kill: the VM goes, the record stays, killed.
	if err := c2.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := c2.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("second kill: %v", err)
	}
	if host.running()[sb.ID] {
		t.Fatal("killed sandbox still runs on the host")
	}
	if _, err := c2.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "true"}); apiCode(err) != "409 conflict" {
		t.Fatalf("exec on killed: %v", err)
	}
}

func TestE2ETwoAgents(t *testing.T) {
	testenv.NeedVMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	a, b := startVMHost(t), startVMHost(t)
	// Bake on both first: placement prefers hosts that have the template baked.
	a.bake(ctx, "base")
	b.bake(ctx, "base")
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"),
		scheduler.Config{HeartbeatTimeout: 3 * time.Second, PollInterval: 500 * time.Millisecond}, Config{}, a, b)
	c := cp.client(cp.admin)

	perHost := map[string][]string{}
	for i := 0; i < 4; i++ {
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base"})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		perHost[sb.Host] = append(perHost[sb.Host], sb.ID)
	}
	if len(perHost) != 2 {
		t.Fatalf("sandboxes did not spread over both hosts: %v", perHost)
	}
	for hostID, ids := range perHost {
		for _, id := range ids {
			if r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "echo ok"}); err != nil || r.Stdout != "ok\n" {
				t.Fatalf("exec on %s/%s: %+v %v", hostID, id, r, err)
			}
		}
	}

	// Stop b: it misses its heartbeats, is marked down, and its sandboxes are lost.
	infoB, err := b.client().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	waitFor(t, 20*time.Second, "host b to be marked down", func() bool {
		h, err := cp.st.GetHost(ctx, infoB.HostID)
		return err == nil && h.State == store.HostDown
	})
	for _, id := range perHost[infoB.HostID] {
		got, err := c.GetSandbox(ctx, id)
		if err != nil || got.State != "lost" {
			t.Fatalf("sandbox %s on the stopped host: %+v %v", id, got, err)
		}
	}
	// New sandboxes go to the host that is left.
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base"})
	if err != nil || sb.Host == infoB.HostID {
		t.Fatalf("create after b went down: %+v %v", sb, err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestForkLimitMatchesHostAgent(t *testing.T) {
	// The control plane validates fork counts before asking a host: its limit must be the agent's.
	if agentclient.MaxForkCount != hostagent.MaxForkCount {
		t.Fatalf("agentclient.MaxForkCount %d, hostagent.MaxForkCount %d", agentclient.MaxForkCount, hostagent.MaxForkCount)
	}
}

// e2eCounter starts a python3 process in the guest that keeps a number in its memory only and
// serves it on 127.0.0.1:7777: a line "inc" adds one and answers the new value, "get" answers it.
// It stands for any in-memory state a sandbox warms up (a REPL, a loaded model).
const e2eCounter = `nohup setsid python3 -c '
import socketserver
n = 0
class H(socketserver.StreamRequestHandler):
    def handle(self):
        global n
        if self.rfile.readline().strip() == b"inc":
            n += 1
        self.wfile.write(str(n).encode())
socketserver.TCPServer.allow_reuse_address = True
socketserver.TCPServer(("127.0.0.1", 7777), H).serve_forever()
' </dev/null >/dev/null 2>&1 &
for i in $(seq 300); do
  if (exec 3<>/dev/tcp/127.0.0.1/7777 && printf "get\n" >&3 && cat <&3) 2>/dev/null; then exit 0; fi
  sleep 0.1
done
exit 1`

func e2eInc(t *testing.T, ctx context.Context, c *client.Client, id string) string {
	t.Helper()
	r, err := c.Exec(ctx, id, client.ExecRequest{Argv: []string{"bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/7777 && printf "inc\n" >&3 && cat <&3`},
		TimeoutSeconds: client.Seconds(60)})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("inc in %s: %+v %v", id, r, err)
	}
	return r.Stdout
}

// startE2E starts one real host agent and a control plane over it for a test that may take up to
// d, and returns the test's context, the control plane and an admin client of it.
func startE2E(t *testing.T, d time.Duration) (context.Context, *vmHost, *e2eCP, *client.Client) {
	testenv.NeedVMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	host := startVMHost(t)
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{}, Config{}, host)
	return ctx, host, cp, cp.client(cp.admin)
}

func TestE2EForkSnapshotHibernate(t *testing.T) {
	ctx, host, cp, c := startE2E(t, 30*time.Minute)

	parent, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 1800, Metadata: map[string]string{"task": "e2e-fork"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if r, err := c.Exec(ctx, parent.ID, client.ExecRequest{Argv: []string{"bash", "-c", e2eCounter}, TimeoutSeconds: client.Seconds(120)}); err != nil || r.ExitCode != 0 || r.Stdout != "0" {
		t.Fatalf("start the counter: %+v %v", r, err)
	}
	for i, want := range []string{"1", "2", "3"} {
		if got := e2eInc(t, ctx, c, parent.ID); got != want {
			t.Fatalf("parent inc %d: %q, want %s", i, got, want)
		}
	}
	if _, err := c.WriteFile(ctx, parent.ID, "/home/user/before-fork.txt", strings.NewReader("written before the fork"), -1); err != nil {
		t.Fatal(err)
	}

	// Another team can neither fork the parent nor see what comes of it.
	_, kb, err := c.CreateTeam(ctx, "e2e-fork-beta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.client(kb.Key).Fork(ctx, parent.ID, 1); apiCode(err) != "404 not_found" {
		t.Fatalf("team B fork: %v", err)
	}

	// fork(3) through the public API: every child continues from the parent's counter, then
	// diverges; the parent keeps its own.
	kids, err := c.Fork(ctx, parent.ID, 3)
	if err != nil || len(kids) != 3 {
		t.Fatalf("fork: %+v %v", kids, err)
	}
	for i, k := range kids {
		if k.ForkOf != parent.ID || k.Host != parent.Host || k.State != "running" || k.Metadata["task"] != "e2e-fork" {
			t.Fatalf("child %d: %+v", i, k)
		}
		for j := 0; j <= i; j++ {
			if got, want := e2eInc(t, ctx, c, k.ID), fmt.Sprint(4+j); got != want {
				t.Fatalf("child %d inc %d: %q, want %s", i, j, got, want)
			}
		}
		body, _, err := c.ReadFile(ctx, k.ID, "/home/user/before-fork.txt")
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		b, _ := io.ReadAll(body)
		body.Close()
		if string(b) != "written before the fork" {
			t.Fatalf("child %d file: %q", i, b)
		}
	}
	if _, err := c.WriteFile(ctx, kids[0].ID, "/home/user/child0.txt", strings.NewReader("mine"), -1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{parent.ID, kids[1].ID} {
		if _, err := c.StatFile(ctx, id, "/home/user/child0.txt"); apiCode(err) != "404 not_found" {
			t.Fatalf("child 0's file seen in %s: %v", id, err)
		}
	}
	if got := e2eInc(t, ctx, c, parent.ID); got != "4" {
		t.Fatalf("parent after the fork: %q", got)
	}
	if _, err := c.Fork(ctx, parent.ID, 17); apiCode(err) != "400 invalid_request" {
		t.Fatalf("fork of 17: %v", err)
	}

	// Snapshot the parent, kill it, and start a new sandbox from the snapshot.
	snap, err := c.CreateSnapshot(ctx, parent.ID)
	if err != nil || snap.SandboxID != parent.ID || snap.Template != "base" || snap.SizeBytes <= 0 {
		t.Fatalf("snapshot: %+v %v", snap, err)
	}
	if err := c.KillSandbox(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fork(ctx, parent.ID, 1); apiCode(err) != "409 conflict" {
		t.Fatalf("fork of a killed sandbox: %v", err)
	}
	seeded, err := c.CreateSandbox(ctx, client.CreateRequest{SnapshotID: snap.ID})
	if err != nil || seeded.SnapshotID != snap.ID || seeded.Host != parent.Host {
		t.Fatalf("create from snapshot: %+v %v", seeded, err)
	}
	if got := e2eInc(t, ctx, c, seeded.ID); got != "5" {
		t.Fatalf("from the snapshot: %q, want 5", got)
	}
	if l, _, err := c.ListSnapshots(ctx, client.SnapshotListOptions{}); err != nil || len(l) != 1 || l[0].ID != snap.ID {
		t.Fatalf("list snapshots: %+v %v", l, err)
	}
	if err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSnapshot(ctx, snap.ID); apiCode(err) != "404 not_found" {
		t.Fatalf("deleted snapshot: %v", err)
	}
	if got := e2eInc(t, ctx, c, seeded.ID); got != "6" {
		t.Fatalf("after its snapshot was deleted: %q", got)
	}

	// Hibernate: GET says so and the VMM is gone; an exec wakes it with its memory.
	child := kids[0].ID // at 4
	hb, err := c.Hibernate(ctx, child)
	if err != nil || hb.State != "hibernated" {
		t.Fatalf("hibernate: %+v %v", hb, err)
	}
	if got, err := c.GetSandbox(ctx, child); err != nil || got.State != "hibernated" {
		t.Fatalf("get hibernated: %+v %v", got, err)
	}
	if info, err := host.agent.Get(child); err != nil || info.State != "hibernated" || info.PID != 0 {
		t.Fatalf("on the host: %+v %v", info, err)
	}
	if got := e2eInc(t, ctx, c, child); got != "5" {
		t.Fatalf("exec on hibernated: %q, want 5", got)
	}
	if got, err := c.GetSandbox(ctx, child); err != nil || got.State != "running" {
		t.Fatalf("get after the exec: %+v %v", got, err)
	}
	if _, err := c.Hibernate(ctx, child); err != nil {
		t.Fatal(err)
	}
	if w, err := c.Wake(ctx, child); err != nil || w.State != "running" {
		t.Fatalf("wake: %+v %v", w, err)
	}
	if got := e2eInc(t, ctx, c, child); got != "6" {
		t.Fatalf("after wake: %q, want 6", got)
	}
	// Kill of a hibernated sandbox frees it on the host.
	if _, err := c.Hibernate(ctx, kids[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := c.KillSandbox(ctx, kids[1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := host.agent.Get(kids[1].ID); err == nil {
		t.Fatal("killed hibernated sandbox still on the host")
	}
}
