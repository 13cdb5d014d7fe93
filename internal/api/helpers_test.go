package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// These tests cover the control plane alone: host agents are fakeagent test doubles (no VMs).
// The end-to-end tests against the real host agent are in e2e_test.go (PANDASTACK_VM_TESTS=1).

const agentToken = "agent-secret"
const clusterToken = "cluster-secret"

type env struct {
	t      *testing.T
	dbPath string
	st     *store.Store
	sched  *scheduler.Scheduler
	srv    *Server
	hs     *httptest.Server
	admin  string
	agent  *agenttest.Agent
	clock  *testenv.Clock
	cfg    Config
}

type envOpt func(*Config)

func quietLogger() *slog.Logger {
	if os.Getenv("PANDASTACK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newEnv starts a server over SQLite with one fake agent (templates base and code-interpreter)
// and returns it with a bootstrap admin key.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, dbPath: filepath.Join(t.TempDir(), "state.db"), clock: testenv.NewClock(time.Now().UTC())}
	e.agent = agenttest.New("host-a", agentToken, "base", "code-interpreter")
	t.Cleanup(e.agent.Close)
	e.cfg = Config{ClusterToken: clusterToken, Now: e.clock.Now, Logger: quietLogger()}
	for _, o := range opts {
		o(&e.cfg)
	}
	e.start()
	if err := e.sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	admin, created, err := auth.Bootstrap(context.Background(), e.st, "")
	if err != nil || !created {
		t.Fatalf("bootstrap: %v", err)
	}
	e.admin = admin
	return e
}

// start (re)opens the store and serves a fresh Server over it.
func (e *env) start() {
	t := e.t
	st, err := store.OpenSQLite(context.Background(), e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	e.sched = scheduler.New(scheduler.Config{Store: st, Logger: quietLogger()})
	e.sched.AddStaticAgent(e.agent.URL(), agentToken)
	cfg := e.cfg
	cfg.Store, cfg.Scheduler = st, e.sched
	e.srv = New(cfg)
	e.hs = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.hs != nil {
		e.hs.Close()
		e.hs = nil
	}
	if e.st != nil {
		e.st.Close()
		e.st = nil
	}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer is not a JSON object (%d): %s", r.status, r.body)
	}
	return m
}

// apiError is the error object of an error answer (empty if none).
func (r resp) apiError() struct{ Code, Message string } {
	var m struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(r.body, &m)
	return m.Error
}

// errCode returns error.code of an error answer ("" if none).
func (r resp) errCode() string { return r.apiError().Code }

func (r resp) errMessage() string { return r.apiError().Message }

// do sends a request; body may be nil, a string/[]byte (sent raw) or a value (sent as JSON).
func (e *env) do(method, path, key string, body any, hdr ...string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.hs.URL+path, testenv.Body(e.t, body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, b := testenv.Send(e.t, req)
	return resp{res.StatusCode, res.Header, b}
}

func (e *env) mustStatus(r resp, want int) resp {
	e.t.Helper()
	if r.status != want {
		e.t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	return r
}

// listIDs GETs path, a page of a list whose objects are under field ("sandboxes", "snapshots"),
// and returns their ids in order and the next cursor (nil on the last page).
func (e *env) listIDs(key, path, field string) ([]string, *string) {
	e.t.Helper()
	var page map[string]json.RawMessage
	json.Unmarshal(e.mustStatus(e.do("GET", path, key, nil), 200).body, &page)
	var objs []struct {
		ID string `json:"id"`
	}
	json.Unmarshal(page[field], &objs)
	var ids []string
	for _, o := range objs {
		ids = append(ids, o.ID)
	}
	var next *string
	json.Unmarshal(page["next_cursor"], &next)
	return ids, next
}

// wantErr fails the test unless r is the error status with code and a message containing msg.
func (e *env) wantErr(r resp, status int, code, msg string) {
	e.t.Helper()
	if r.status != status || r.errCode() != code || !strings.Contains(r.errMessage(), msg) {
		e.t.Fatalf("%d %s, want %d %s containing %q", r.status, r.body, status, code, msg)
	}
}

// create makes a sandbox and returns its object.
func (e *env) create(key string, body map[string]any) SandboxView {
	e.t.Helper()
	return decodeAs[SandboxView](e.t, e.mustStatus(e.do("POST", "/v1/sandboxes", key, body), 201))
}

// decodeAs is r's JSON body as a T.
func decodeAs[T any](t *testing.T, r resp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (e *env) sandboxCount() int {
	e.t.Helper()
	c, err := e.st.CountSandboxesByState(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, v := range c {
		n += int(v)
	}
	return n
}

// refusal is a call that must be answered status with an error message containing says.
type refusal struct {
	method, path, key string
	body              any
	status            int
	says              string
}

// wantRefusals makes each call and checks its refusal.
func (e *env) wantRefusals(cases []refusal) {
	e.t.Helper()
	for _, c := range cases {
		r := e.do(c.method, c.path, c.key, c.body)
		if r.status != c.status || !strings.Contains(r.errMessage(), c.says) {
			e.t.Errorf("%s %s: %d %s, want %d saying %q", c.method, c.path, r.status, r.body, c.status, c.says)
		}
	}
}
