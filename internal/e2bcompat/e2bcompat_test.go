package e2bcompat_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/api"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/e2bcompat"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/filesystem"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/filesystem/filesystemconnect"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process/processconnect"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// These tests run the facade over the real control plane (store, sandbox service, API server's
// checks) with the fake host agent (no VMs): the wire shapes the SDKs depend on, auth and bad
// input. sdk/e2b-test runs the stock npm SDKs against `up` on real microVMs.

type env struct {
	t        *testing.T
	st       *store.Store
	srv      *api.Server
	teamID   string
	url      string
	key      string // an E2B key of team A
	otherKey string // an E2B key of team B
	pdsKey   string // team A's /v1 admin key
}

func newEnv(t *testing.T, opts ...func(*api.Config)) *env {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	agent := agenttest.New("host-a", "agent-secret", "base", "code-interpreter")
	t.Cleanup(agent.Close)
	st := testenv.SQLiteStore(t)
	sched := scheduler.New(scheduler.Config{Store: st, Logger: log})
	sched.AddStaticAgent(agent.URL(), "agent-secret")
	if err := sched.PollStatic(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Store: st, Scheduler: sched, Logger: log}
	for _, o := range opts {
		o(&cfg)
	}
	srv := api.New(cfg)
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(e2bcompat.New(srv.E2BBackend()))
	t.Cleanup(hs.Close)
	admin, _, err := auth.Bootstrap(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := (&auth.Authenticator{Store: st}).Authenticate(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := auth.IssueE2B(ctx, st, store.APIKey{TeamID: a.TeamID, Name: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	team, _, _, err := auth.CreateTeam(ctx, st, "other")
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := auth.IssueE2B(ctx, st, store.APIKey{TeamID: team.ID, Name: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, srv: srv, teamID: a.TeamID, url: hs.URL, key: key, otherKey: other, pdsKey: admin}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d is not JSON: %s", a.status, a.body)
	}
}

// errorBody checks an E2B error answer: status and {"code": status, "message"}.
func (a answer) wantError(t *testing.T, status int) {
	t.Helper()
	var b struct {
		Code    int
		Message string
	}
	a.decode(t, &b)
	if a.status != status || b.Code != status || b.Message == "" {
		t.Fatalf("want %d with {code: %d, message}, got %d: %s", status, status, a.status, a.body)
	}
}

func (e *env) do(method, path, key string, body any, hdr ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, testenv.Body(e.t, body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, b := testenv.Send(e.t, req)
	return answer{resp.StatusCode, resp.Header, b}
}

type sandbox struct {
	TemplateID, SandboxID, ClientID, EnvdVersion, EnvdAccessToken string
}

func (e *env) create(body any) sandbox {
	e.t.Helper()
	a := e.do("POST", "/v2/sandboxes", e.key, body)
	if a.status != http.StatusCreated {
		e.t.Fatalf("create: %d %s", a.status, a.body)
	}
	var sb sandbox
	a.decode(e.t, &sb)
	return sb
}

func TestControlAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// v2 create with no timeout (the server defaults it), then the v1 path.
	sb := e.create(map[string]any{"templateID": "base", "metadata": map[string]string{"app": "x"}, "envVars": map[string]string{"A": "1"}})
	if sb.TemplateID != "base" || sb.ClientID == "" || sb.EnvdVersion != e2bcompat.EnvdVersion || sb.EnvdAccessToken == "" {
		t.Fatalf("create answered %+v", sb)
	}
	for _, c := range sb.SandboxID {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			t.Fatalf("sandbox id %q is not lowercase [a-z0-9]", sb.SandboxID)
		}
	}
	old := e.do("POST", "/sandboxes", e.key, map[string]any{"templateID": "code-interpreter-v1", "timeout": 60, "secure": true})
	if old.status != http.StatusCreated {
		t.Fatalf("v1 create: %d %s", old.status, old.body)
	}

	var d struct {
		SandboxID, State, StartedAt, EndAt string
		CPUCount, MemoryMB                 int
		Metadata                           map[string]string
	}
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.key, nil).decode(t, &d)
	if d.SandboxID != sb.SandboxID || d.State != "running" || d.CPUCount == 0 || d.MemoryMB == 0 || d.Metadata["app"] != "x" {
		t.Fatalf("detail %+v", d)
	}
	var listed []struct{ SandboxID string }
	l := e.do("GET", "/v2/sandboxes?metadata=app%3Dx", e.key, nil)
	l.decode(t, &listed)
	if len(listed) != 1 || listed[0].SandboxID != sb.SandboxID || l.header.Get("X-Next-Token") != "" {
		t.Fatalf("list by metadata: %s (next %q)", l.body, l.header.Get("X-Next-Token"))
	}
	if a := e.do("GET", "/v2/sandboxes?limit=1", e.key, nil); a.header.Get("X-Next-Token") == "" {
		t.Fatalf("a first page of one has no X-Next-Token: %s", a.body)
	}

	if a := e.do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", e.key, map[string]any{"timeout": 120}); a.status != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", a.status, a.body)
	}
	// Metrics: the figures of now while it runs, none while paused (and asking does not wake it).
	type metric struct {
		Timestamp                                        string
		TimestampUnix                                    int64
		CPUCount                                         int
		CPUUsedPct                                       float64
		MemUsed, MemTotal, MemCache, DiskUsed, DiskTotal int64
	}
	var ms []metric
	e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", e.key, nil).decode(t, &ms)
	if len(ms) != 1 || ms[0].CPUCount < 1 || ms[0].MemUsed <= 0 || ms[0].MemTotal < ms[0].MemUsed || ms[0].DiskUsed <= 0 ||
		ms[0].DiskTotal < ms[0].DiskUsed || ms[0].TimestampUnix < time.Now().Unix()-60 || ms[0].Timestamp == "" {
		t.Fatalf("metrics: %+v", ms)
	}
	e.do("GET", fmt.Sprintf("/sandboxes/%s/metrics?start=1&end=%d", sb.SandboxID, time.Now().Add(-time.Hour).Unix()), e.key, nil).decode(t, &ms)
	if len(ms) != 0 {
		t.Fatalf("metrics of an hour ago: %+v", ms)
	}
	e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics?start=x", e.key, nil).wantError(t, http.StatusBadRequest)
	e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", e.otherKey, nil).wantError(t, http.StatusNotFound)
	if a := e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", e.key, nil); a.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", a.status, a.body)
	}
	e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", e.key, nil).decode(t, &ms)
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.key, nil).decode(t, &d)
	if len(ms) != 0 || d.State != "paused" {
		t.Fatalf("metrics of a paused sandbox: %+v (state %s)", ms, d.State)
	}
	e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", e.key, nil).wantError(t, http.StatusConflict)
	if a := e.do("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", e.key, map[string]any{"timeout": 300}); a.status != http.StatusCreated {
		t.Fatalf("connect of a paused sandbox: %d %s", a.status, a.body)
	}
	if a := e.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", e.key, map[string]any{"timeout": 300}); a.status != http.StatusOK {
		t.Fatalf("connect of a running sandbox: %d %s", a.status, a.body)
	}
	// A connect never shortens a running sandbox's life.
	e.do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", e.key, map[string]any{"timeout": 3000})
	e.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", e.key, map[string]any{"timeout": 60})
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.key, nil).decode(t, &d)
	if end, err := time.Parse(time.RFC3339Nano, d.EndAt); err != nil || time.Until(end) < 2000*time.Second {
		t.Fatalf("endAt %s after a connect with a shorter timeout", d.EndAt)
	}
	var forked []struct{ Sandbox *sandbox }
	f := e.do("POST", "/sandboxes/"+sb.SandboxID+"/fork", e.key, map[string]any{"count": 2})
	f.decode(t, &forked)
	if f.status != http.StatusCreated || len(forked) != 2 || forked[0].Sandbox == nil || forked[0].Sandbox.EnvdAccessToken == "" {
		t.Fatalf("fork: %d %s", f.status, f.body)
	}
	var snap struct{ SnapshotID string }
	sn := e.do("POST", "/sandboxes/"+sb.SandboxID+"/snapshots", e.key, map[string]any{})
	sn.decode(t, &snap)
	if sn.status != http.StatusCreated || snap.SnapshotID == "" {
		t.Fatalf("snapshot: %d %s", sn.status, sn.body)
	}
	if fromSnap := e.create(map[string]any{"templateID": snap.SnapshotID}); fromSnap.SandboxID == "" {
		t.Fatal("create from a snapshot id")
	}
	if a := e.do("GET", "/snapshots?sandboxID="+sb.SandboxID, e.key, nil); !strings.Contains(string(a.body), snap.SnapshotID) {
		t.Fatalf("snapshots: %s", a.body)
	}

	// Bad input, always in E2B's error shape.
	e.do("GET", "/sandboxes/"+sb.SandboxID, "", nil).wantError(t, http.StatusUnauthorized)
	e.do("GET", "/sandboxes/"+sb.SandboxID, "e2b_"+strings.Repeat("0", 40), nil).wantError(t, http.StatusUnauthorized)
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.pdsKey, nil).wantError(t, http.StatusUnauthorized)
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.otherKey, nil).wantError(t, http.StatusNotFound)
	e.do("DELETE", "/sandboxes/"+sb.SandboxID, e.otherKey, nil).wantError(t, http.StatusNotFound)
	e.do("GET", "/sandboxes/NOT-AN-ID", e.key, nil).wantError(t, http.StatusNotFound)
	e.do("POST", "/v2/sandboxes", e.key, map[string]any{"templateID": "no-such-template"}).wantError(t, http.StatusBadRequest)
	e.do("POST", "/v2/sandboxes", e.key, "{not json").wantError(t, http.StatusBadRequest)
	e.do("POST", "/v2/sandboxes", e.key, map[string]any{"envVars": map[string]string{"1X": "y"}}).wantError(t, http.StatusBadRequest)
	e.do("POST", "/v2/sandboxes", e.key, map[string]any{"timeout": 0}).wantError(t, http.StatusBadRequest)
	e.do("POST", "/v3/templates", e.key, map[string]any{}).wantError(t, http.StatusNotImplemented)
	e.do("GET", "/volumes", e.key, nil).wantError(t, http.StatusNotImplemented)
	e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.key, map[string]any{"allowOut": []string{"1.1.1.1"}}).wantError(t, http.StatusNotImplemented)
	e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.otherKey, map[string]any{}).wantError(t, http.StatusNotFound)

	if a := e.do("DELETE", "/sandboxes/"+sb.SandboxID, e.key, nil); a.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", a.status, a.body)
	}
	e.do("DELETE", "/sandboxes/"+sb.SandboxID, e.key, nil).wantError(t, http.StatusNotFound)
	e.do("GET", "/sandboxes/"+sb.SandboxID, e.key, nil).wantError(t, http.StatusNotFound)
}

// rpc returns Connect clients (JSON codec, as the SDKs) for a sandbox's envd with token.
func (e *env) rpc(sb sandbox, token string) (processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hdr := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("E2b-Sandbox-Id", sb.SandboxID)
			req.Header().Set("X-Access-Token", token)
			return next(ctx, req)
		}
	})
	opts := []connect.ClientOption{connect.WithProtoJSON(), connect.WithInterceptors(hdr, streamHeaders{sb.SandboxID, token})}
	return processconnect.NewProcessClient(http.DefaultClient, e.url, opts...),
		filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, opts...)
}

// streamHeaders adds the data-plane headers to streaming calls.
type streamHeaders struct{ id, token string }

func (h streamHeaders) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (h streamHeaders) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("E2b-Sandbox-Id", h.id)
		c.RequestHeader().Set("X-Access-Token", h.token)
		return c
	}
}
func (h streamHeaders) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// upload writes a file as the SDK does by default: multipart, the destination as the filename.
func (e *env) upload(sb sandbox, path, data string) answer {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, _ := mw.CreateFormFile("file", path)
	part.Write([]byte(data))
	mw.Close()
	return e.do("POST", "/files", "", body.Bytes(), "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken, "Content-Type", mw.FormDataContentType())
}

func TestEnvd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.create(map[string]any{"templateID": "base"})
	ctx := context.Background()
	proc, fs := e.rpc(sb, sb.EnvdAccessToken)

	// Start streams start, data, end.
	st, err := proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "echo", Args: []string{"hi"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var out bytes.Buffer
	for st.Receive() {
		switch ev := st.Msg().GetEvent(); {
		case ev.GetStart() != nil:
			kinds = append(kinds, "start")
		case ev.GetData() != nil:
			out.Write(ev.GetData().GetStdout())
		case ev.GetEnd() != nil:
			kinds = append(kinds, "end")
			if !ev.GetEnd().GetExited() || ev.GetEnd().GetExitCode() != 0 {
				t.Fatalf("end %v", ev.GetEnd())
			}
		}
	}
	if err := st.Err(); err != nil || strings.Join(kinds, ",") != "start,end" || out.String() != "hi\n" {
		t.Fatalf("start stream: %v %v %q", err, kinds, out.String())
	}
	// Bad environment variables are refused as /v1 refuses them.
	bad, _ := proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "true", Envs: map[string]string{"BAD NAME": "x"}}}))
	if bad.Receive() || connect.CodeOf(bad.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("a bad env name: %v", bad.Err())
	}
	// A non-zero exit.
	st, _ = proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "false"}}))
	var code int32 = -100
	for st.Receive() {
		if end := st.Msg().GetEvent().GetEnd(); end != nil {
			code = end.GetExitCode()
		}
	}
	if code != 1 {
		t.Fatalf("false exited %d (%v)", code, st.Err())
	}
	// A background process with a tag: listed with it, signalled by it; an unknown pid or tag is
	// not_found.
	tag := "napper"
	bg, _ := proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}, Tag: &tag}))
	if !bg.Receive() || bg.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", bg.Err())
	}
	pid := bg.Msg().GetEvent().GetStart().GetPid()
	ls, err := proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil || len(ls.Msg.GetProcesses()) != 1 || ls.Msg.GetProcesses()[0].GetPid() != pid || ls.Msg.GetProcesses()[0].GetTag() != tag {
		t.Fatalf("list: %v %v", ls, err)
	}
	byTag := func(tag string) *process.ProcessSelector {
		return &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}
	}
	_, err = proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: byTag("nobody"), Signal: process.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("signal of an unknown tag: %v", err)
	}
	badTag := "a\x00b"
	if st, _ := proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "true"}, Tag: &badTag})); st.Receive() || connect.CodeOf(st.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("a tag with a NUL: %v", st.Err())
	}
	if _, err := proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: byTag(tag), Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	for bg.Receive() {
	}
	bg.Close()
	_, err = proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 99999}}, Signal: process.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("signal of an unknown pid: %v", err)
	}

	// Files: multipart upload (the SDK's default) to the part's filename, read, stat, list, mkdir.
	w := e.upload(sb, "/home/user/dir/a.txt", "hello")
	if w.status != http.StatusOK || !strings.Contains(string(w.body), `"path":"/home/user/dir/a.txt"`) {
		t.Fatalf("upload: %d %s", w.status, w.body)
	}
	if r := e.do("GET", "/files?path=dir/a.txt", "", nil, "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken); r.status != http.StatusOK || string(r.body) != "hello" {
		t.Fatalf("read (a relative path): %d %s", r.status, r.body)
	}
	e.do("GET", "/files?path=/nope", "", nil, "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken).wantError(t, http.StatusNotFound)
	stat, err := fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/dir/a.txt"}))
	if err != nil || stat.Msg.GetEntry().GetType() != filesystem.FileType_FILE_TYPE_FILE || stat.Msg.GetEntry().GetSize() != 5 {
		t.Fatalf("stat: %v %v", stat, err)
	}
	if _, err := fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/none"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("stat of a missing file: %v", err)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/home/user/new"})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/home/user/new"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("second mkdir: %v", err)
	}
	ld, err := fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/home/user/dir"}))
	if err != nil || len(ld.Msg.GetEntries()) != 1 || ld.Msg.GetEntries()[0].GetName() != "a.txt" {
		t.Fatalf("list: %v %v", ld, err)
	}

	// A watch sees a file created after it started.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch, err := fs.WatchDir(wctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "/home/user/new"}))
	if err != nil || !watch.Receive() || watch.Msg().GetStart() == nil {
		t.Fatalf("watch start: %v %v", err, watch.Err())
	}
	e.upload(sb, "/home/user/new/w.txt", "x")
	for watch.Receive() && watch.Msg().GetFilesystem() == nil {
	}
	if ev := watch.Msg().GetFilesystem(); ev == nil || ev.GetName() != "w.txt" || ev.GetType() != filesystem.EventType_EVENT_TYPE_CREATE {
		t.Fatalf("watch event %v (%v)", ev, watch.Err())
	}
	stopWatch()
	// The polling trio (the Python sync SDK): what changed between calls.
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/new"}))
	if err != nil {
		t.Fatal(err)
	}
	wid := cw.Msg.GetWatcherId()
	e.upload(sb, "/home/user/new/polled.txt", "y")
	evs, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid}))
	if err != nil || len(evs.Msg.GetEvents()) != 1 || evs.Msg.GetEvents()[0].GetName() != "polled.txt" {
		t.Fatalf("watcher events: %v %v", evs, err)
	}
	if evs, err = fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); err != nil || len(evs.Msg.GetEvents()) != 0 {
		t.Fatalf("second poll: %v %v", evs, err)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: wid})); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: wid})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a removed watcher: %v", err)
	}

	// Wrong or missing access token: 401 (unauthenticated); health needs none.
	badProc, _ := e.rpc(sb, "wrong")
	if _, err := badProc.List(ctx, connect.NewRequest(&process.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	e.do("GET", "/files?path=/home/user/dir/a.txt", "", nil, "E2b-Sandbox-Id", sb.SandboxID).wantError(t, http.StatusUnauthorized)
	if h := e.do("GET", "/health", "", nil, "E2b-Sandbox-Id", sb.SandboxID); h.status != http.StatusNoContent {
		t.Fatalf("health: %d", h.status)
	}
	// The same by host routing, <port>-<id>.<domain>.
	if h := e.do("GET", "/health", "", nil, "Host", "49983-"+sb.SandboxID+".sandbox.example"); h.status != http.StatusNoContent {
		t.Fatalf("health by host: %d %s", h.status, h.body)
	}
	// Another sandbox's token does not open this one; an unknown sandbox is a 502.
	other := e.create(map[string]any{"templateID": "base"})
	e.do("GET", "/files?path=/home/user/dir/a.txt", "", nil, "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", other.EnvdAccessToken).wantError(t, http.StatusUnauthorized)
	e.do("GET", "/health", "", nil, "E2b-Sandbox-Id", "nosuchsandbox").wantError(t, http.StatusBadGateway)

	// Malformed Connect input: a clear error, no crash.
	connectPost := func(path, ctype string, body []byte) answer {
		return e.do("POST", path, "", body, "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken,
			"Content-Type", ctype, "Connect-Protocol-Version", "1")
	}
	if a := connectPost("/process.Process/Start", "application/connect+json", []byte("garbage")); a.status == http.StatusOK && !strings.Contains(string(a.body), "error") || a.status >= 500 {
		t.Fatalf("malformed envelope: %d %q", a.status, a.body)
	}
	huge := make([]byte, 5)
	binary.BigEndian.PutUint32(huge[1:], 1<<30)
	if a := connectPost("/process.Process/Start", "application/connect+json", append(huge, '{', '}')); !strings.Contains(string(a.body), "resource_exhausted") {
		t.Fatalf("oversize frame: %d %q", a.status, a.body)
	}
	if a := connectPost("/filesystem.Filesystem/Stat", "application/json", []byte("{bad")); a.status != http.StatusBadRequest {
		t.Fatalf("malformed unary JSON: %d %q", a.status, a.body)
	}
	var ce *connect.Error
	_, err = proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}}))
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("update of a process without a pty: %v", err)
	}
}

func TestRateLimitAndAudit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.RateLimit = api.RateLimit{PerSecond: 0.001, Burst: 2} })
	sb := e.create(map[string]any{"templateID": "base"})
	// The data plane (no key: the sandbox's token) takes from its team's bucket, of the same size.
	if a := e.upload(sb, "/home/user/secret.txt", "not-in-the-log"); a.status != http.StatusOK {
		t.Fatalf("upload: %d %s", a.status, a.body)
	}
	read := func() answer {
		return e.do("GET", "/files?path=/home/user/secret.txt", "", nil, "E2b-Sandbox-Id", sb.SandboxID, "X-Access-Token", sb.EnvdAccessToken)
	}
	if a := read(); a.status != http.StatusOK {
		t.Fatalf("read: %d %s", a.status, a.body)
	}
	if a := read(); a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" {
		t.Fatalf("a third data-plane call with a burst of 2: %d %s", a.status, a.body)
	}
	if a := e.do("DELETE", "/sandboxes/"+sb.SandboxID, e.key, nil); a.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", a.status, a.body)
	}
	a := e.do("GET", "/v2/sandboxes", e.key, nil)
	a.wantError(t, http.StatusTooManyRequests)
	if a.header.Get("Retry-After") == "" {
		t.Fatal("a 429 without Retry-After")
	}
	// Another key has its own bucket.
	if a := e.do("GET", "/v2/sandboxes", e.otherKey, nil); a.status != http.StatusOK {
		t.Fatalf("another key: %d %s", a.status, a.body)
	}
	entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{TeamID: e.teamID, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, en := range entries {
		routes = append(routes, en.Method+" "+en.Route+" "+en.ResourceID+" key="+en.KeyID)
	}
	// The upload is recorded on the sandbox, with no key and nothing of its content; reads are not.
	sbID, _ := e2bcompat.FromE2B(sb.SandboxID)
	if got := strings.Join(routes, ","); !strings.Contains(got, "POST e2b /v2/sandboxes") || !strings.Contains(got, "DELETE e2b /sandboxes/{id} "+sb.SandboxID) ||
		!strings.Contains(got, "POST e2b envd /files "+sbID+" key=,") || strings.Contains(got, "GET") || strings.Contains(got, "secret") {
		t.Fatalf("audit log: %s", got)
	}
}

// A sandbox created with autoPause (lifecycle.onTimeout "pause") is hibernated at its timeout,
// not killed, and a connect wakes it; one without is killed.
func TestAutoPause(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock(time.Now().UTC())
	e := newEnv(t, func(c *api.Config) { c.Now = clock.Now })
	paused := e.create(map[string]any{"templateID": "base", "timeout": 60, "autoPause": true})
	killed := e.create(map[string]any{"templateID": "base", "timeout": 60})
	var d struct {
		State     string
		Lifecycle struct{ OnTimeout string }
	}
	e.do("GET", "/sandboxes/"+paused.SandboxID, e.key, nil).decode(t, &d)
	if d.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("lifecycle %+v", d)
	}
	clock.Add(61 * time.Second)
	if _, err := e.srv.ReapOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/sandboxes/"+paused.SandboxID, e.key, nil).decode(t, &d)
	if d.State != "paused" {
		t.Fatalf("an autoPause sandbox at its timeout: %+v", d)
	}
	e.do("GET", "/sandboxes/"+killed.SandboxID, e.key, nil).wantError(t, http.StatusNotFound)
	if a := e.do("POST", "/sandboxes/"+paused.SandboxID+"/connect", e.key, map[string]any{"timeout": 60}); a.status != http.StatusCreated {
		t.Fatalf("connect of the paused sandbox: %d %s", a.status, a.body)
	}
}

// The code interpreter's port against the fake host's toy code server (a run answers the id of
// the context that ran it): a restart puts a fresh context behind the id the SDK keeps; an
// unsupported language is the execution's error.
func TestCodeContexts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.create(map[string]any{"templateID": "code-interpreter-v1"})
	code := func(method, path string, body any) answer {
		return e.do(method, path, "", body, "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49999", "X-Access-Token", sb.EnvdAccessToken)
	}
	ranIn := func(ctxID string) string {
		t.Helper()
		a := code("POST", "/execute", map[string]any{"code": "1", "context_id": ctxID})
		for _, l := range strings.Split(strings.TrimSpace(string(a.body)), "\n") {
			var line struct{ Type, Text string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Type == "result" {
				return line.Text
			}
		}
		t.Fatalf("execute in %s: %d %s", ctxID, a.status, a.body)
		return ""
	}
	var c struct{ ID, Language, Cwd string }
	code("POST", "/contexts", map[string]any{"cwd": "/tmp"}).decode(t, &c)
	if c.ID == "" || c.Cwd != "/tmp" || c.Language != "python" || ranIn(c.ID) != c.ID {
		t.Fatalf("context %+v", c)
	}
	if a := code("POST", "/contexts/"+c.ID+"/restart", nil); a.status != http.StatusOK {
		t.Fatalf("restart: %d %s", a.status, a.body)
	}
	fresh := ranIn(c.ID)
	if fresh == c.ID || fresh == "" {
		t.Fatalf("after a restart, %s still runs in %s", c.ID, fresh)
	}
	if again := code("POST", "/contexts/"+c.ID+"/restart", nil); again.status != http.StatusOK || ranIn(c.ID) == fresh {
		t.Fatalf("a second restart: %d %s", again.status, again.body)
	}
	var list []struct{ ID, Cwd string }
	code("GET", "/contexts", nil).decode(t, &list)
	ids := map[string]string{}
	for _, l := range list {
		ids[l.ID] = l.Cwd
	}
	if len(list) != 2 || ids[c.ID] != "/tmp" || ids["default"] == "" {
		t.Fatalf("contexts after restarts: %+v", list)
	}
	// The default context is reset in place.
	if a := code("POST", "/contexts/default/restart", nil); a.status != http.StatusOK || ranIn("default") != "default" {
		t.Fatalf("restart of the default context: %d %s", a.status, a.body)
	}
	if a := code("DELETE", "/contexts/"+c.ID, nil); a.status != http.StatusOK {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	code("GET", "/contexts", nil).decode(t, &list)
	if len(list) != 1 || list[0].ID != "default" {
		t.Fatalf("contexts after the delete: %+v", list)
	}
	code("POST", "/contexts/"+c.ID+"/restart", nil).wantError(t, http.StatusNotFound)

	// A language the kernels do not run: an execution error that says so; a context: 400.
	a := code("POST", "/execute", map[string]any{"code": "x <- 1", "language": "r"})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"name":"UnsupportedLanguageError"`) || !strings.Contains(string(a.body), `language \"r\" is not supported`) {
		t.Fatalf("execute in r: %d %s", a.status, a.body)
	}
	code("POST", "/contexts", map[string]any{"language": "r"}).wantError(t, http.StatusBadRequest)
	if ranIn("") != "default" {
		t.Fatal("an execution without a context runs in the default one")
	}
}
