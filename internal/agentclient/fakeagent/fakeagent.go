// Package fakeagent is a TEST DOUBLE ONLY: an in-memory HTTP server that speaks the host agent
// contract of docs/hostagent-api.md closely enough for the control plane's own tests (api,
// scheduler, CLI) to run without VMs. It boots nothing; "exec" interprets a handful of toy
// commands and "files" live in a map. Never use it outside tests; the real agent is
// internal/hostagent, and the end-to-end tests run against that.
package fakeagent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// Agent is one fake host agent listening on loopback.
type Agent struct {
	HostID string
	Token  string

	mu          sync.Mutex
	templates   []agentclient.Template
	sandboxes   map[string]*sandbox
	slotsTotal  int64
	memTotal    int64
	creates     int
	kills       int
	createErr   *agentclient.Error
	createDelay time.Duration
	srv         *httptest.Server
}

type sandbox struct {
	agentclient.Sandbox
	files map[string][]byte
	dirs  map[string]bool
}

// New starts a fake agent with the given templates (all baked) and 8 slots.
func New(hostID, token string, templates ...string) *Agent {
	a := &Agent{HostID: hostID, Token: token, sandboxes: map[string]*sandbox{}, slotsTotal: 8, memTotal: 8192}
	for _, t := range templates {
		a.templates = append(a.templates, agentclient.Template{Name: t, Baked: true, VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024})
	}
	a.srv = httptest.NewServer(a.handler())
	return a
}

// URL is the agent's base URL.
func (a *Agent) URL() string { return a.srv.URL }

// Close stops the server (as if the host died).
func (a *Agent) Close() { a.srv.CloseClientConnections(); a.srv.Close() }

// SetSlots changes the slot capacity reported by /v1/info.
func (a *Agent) SetSlots(n int64) { a.mu.Lock(); a.slotsTotal = n; a.mu.Unlock() }

// SetMemory changes the total memory reported by /v1/info.
func (a *Agent) SetMemory(mib int64) { a.mu.Lock(); a.memTotal = mib; a.mu.Unlock() }

// FailCreates makes every create answer err (nil to stop).
func (a *Agent) FailCreates(err *agentclient.Error) { a.mu.Lock(); a.createErr = err; a.mu.Unlock() }

// SetCreateDelay makes creates take d (to widen race windows).
func (a *Agent) SetCreateDelay(d time.Duration) { a.mu.Lock(); a.createDelay = d; a.mu.Unlock() }

// Running returns the ids of running sandboxes, sorted.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, sb := range a.sandboxes {
		if sb.State == "running" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Counts returns how many creates and kills the agent served.
func (a *Agent) Counts() (creates, kills int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.creates, a.kills
}

// AddSandbox injects a running sandbox (e.g. one the control plane never recorded).
func (a *Agent) AddSandbox(id, template string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sandboxes[id] = &sandbox{Sandbox: agentclient.Sandbox{ID: id, Template: template, State: "running"}, files: map[string][]byte{}, dirs: map[string]bool{"/": true}}
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"ok": true, "version": "fake", "accel": "tcg"})
	})
	authed := http.NewServeMux()
	authed.HandleFunc("GET /v1/info", a.info)
	authed.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		writeJSON(w, 200, map[string]any{"templates": a.templates})
	})
	authed.HandleFunc("POST /v1/sandboxes", a.create)
	authed.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		out := []agentclient.Sandbox{}
		for _, sb := range a.sandboxes {
			out = append(out, sb.Sandbox)
		}
		writeJSON(w, 200, map[string]any{"sandboxes": out})
	})
	authed.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		sb := a.get(w, r)
		if sb != nil {
			writeJSON(w, 200, sb.Sandbox)
		}
	})
	authed.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		if sb, ok := a.sandboxes[r.PathValue("id")]; ok && sb.State == "running" {
			sb.State = "killed"
			a.kills++
		}
		a.mu.Unlock()
		w.WriteHeader(204)
	})
	authed.HandleFunc("POST /v1/sandboxes/{id}/exec", a.exec)
	authed.HandleFunc("GET /v1/sandboxes/{id}/files", a.readFile)
	authed.HandleFunc("PUT /v1/sandboxes/{id}/files", a.writeFile)
	authed.HandleFunc("DELETE /v1/sandboxes/{id}/files", a.removeFile)
	authed.HandleFunc("GET /v1/sandboxes/{id}/files/list", a.listFiles)
	authed.HandleFunc("GET /v1/sandboxes/{id}/files/stat", a.statFile)
	authed.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", a.mkdir)
	authed.HandleFunc("POST /v1/sandboxes/{id}/files/move", a.move)
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+a.Token {
			writeErr(w, 401, "unauthorized", "bad agent token")
			return
		}
		authed.ServeHTTP(w, r)
	}))
	return mux
}

func (a *Agent) info(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var used int64
	for _, sb := range a.sandboxes {
		if sb.State == "running" {
			used++
		}
	}
	writeJSON(w, 200, agentclient.Info{HostID: a.HostID, Accel: "tcg", MemMiBTotal: a.memTotal, MemMiBFree: a.memTotal - 256*used,
		SlotsTotal: a.slotsTotal, SlotsUsed: used, Templates: a.templates})
}

func (a *Agent) create(w http.ResponseWriter, r *http.Request) {
	var req agentclient.CreateRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	a.mu.Lock()
	delay := a.createDelay
	a.mu.Unlock()
	time.Sleep(delay)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.createErr != nil {
		writeErr(w, a.createErr.Status, a.createErr.Code, a.createErr.Message)
		return
	}
	known := false
	for _, t := range a.templates {
		known = known || t.Name == req.Template
	}
	if !known {
		writeErr(w, 404, "not_found", "template "+req.Template+" not found")
		return
	}
	var used int64
	for _, sb := range a.sandboxes {
		if sb.State == "running" {
			used++
		}
	}
	if used >= a.slotsTotal {
		writeErr(w, 503, "capacity", "no free slot")
		return
	}
	if req.ID == "" {
		req.ID = fmt.Sprintf("sb_fake%d", len(a.sandboxes)+1)
	}
	if _, dup := a.sandboxes[req.ID]; dup {
		writeErr(w, 409, "conflict", "sandbox "+req.ID+" exists")
		return
	}
	sb := &sandbox{Sandbox: agentclient.Sandbox{ID: req.ID, Template: req.Template, State: "running",
		CreatedAt: time.Now().UTC().Format(time.RFC3339), MemoryMiB: 256, VCPUs: 1}, files: map[string][]byte{}, dirs: map[string]bool{"/": true}}
	// Env is visible to exec through the toy `env NAME` command.
	for k, v := range req.Env {
		sb.files["/.env/"+k] = []byte(v)
	}
	a.sandboxes[req.ID] = sb
	a.creates++
	writeJSON(w, 201, sb.Sandbox)
}

// get returns a running sandbox or writes the error.
func (a *Agent) get(w http.ResponseWriter, r *http.Request) *sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	sb, ok := a.sandboxes[r.PathValue("id")]
	if !ok {
		writeErr(w, 404, "not_found", "sandbox "+r.PathValue("id")+" not found")
		return nil
	}
	return sb
}

// exec understands: `echo WORDS`, `stderr WORDS`, `exit N`, `env NAME`, `cat` (echoes stdin),
// `sleep MS` and `lines N` (N stdout lines, 20 ms apart, for streaming tests).
func (a *Agent) exec(w http.ResponseWriter, r *http.Request) {
	sb := a.get(w, r)
	if sb == nil {
		return
	}
	if sb.State != "running" {
		writeErr(w, 409, "conflict", "sandbox is "+sb.State)
		return
	}
	var req agentclient.ExecRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	cmd := req.Cmd
	if cmd == "" {
		cmd = strings.Join(req.Argv, " ")
	}
	verb, arg, _ := strings.Cut(cmd, " ")
	type chunk struct{ stream, data string }
	var chunks []chunk
	exit := 0
	gap := time.Duration(0)
	switch verb {
	case "echo":
		chunks = append(chunks, chunk{"stdout", arg + "\n"})
	case "stderr":
		chunks = append(chunks, chunk{"stderr", arg + "\n"})
	case "exit":
		exit, _ = strconv.Atoi(arg)
	case "env":
		a.mu.Lock()
		v := req.Env[arg]
		if v == "" {
			v = string(sb.files["/.env/"+arg])
		}
		a.mu.Unlock()
		chunks = append(chunks, chunk{"stdout", v + "\n"})
	case "cat":
		if req.Stdin != nil {
			chunks = append(chunks, chunk{"stdout", *req.Stdin})
		}
	case "sleep":
		ms, _ := strconv.Atoi(arg)
		time.Sleep(time.Duration(ms) * time.Millisecond)
	case "lines":
		n, _ := strconv.Atoi(arg)
		for i := 1; i <= n; i++ {
			chunks = append(chunks, chunk{"stdout", fmt.Sprintf("line %d\n", i)})
		}
		gap = 20 * time.Millisecond
	default:
		chunks = append(chunks, chunk{"stderr", verb + ": command not found\n"})
		exit = 127
	}
	start := time.Now()
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(200)
		enc := json.NewEncoder(w)
		for _, c := range chunks {
			enc.Encode(map[string]string{c.stream: c.data})
			http.NewResponseController(w).Flush()
			time.Sleep(gap)
		}
		enc.Encode(map[string]any{"exit_code": exit, "timed_out": false, "duration_ms": time.Since(start).Milliseconds()})
		return
	}
	var res agentclient.ExecResult
	for _, c := range chunks {
		time.Sleep(gap)
		if c.stream == "stdout" {
			res.Stdout += c.data
		} else {
			res.Stderr += c.data
		}
	}
	res.ExitCode = exit
	res.DurationMS = time.Since(start).Milliseconds()
	writeJSON(w, 200, res)
}

func (sb *sandbox) stat(p string) (agentclient.Stat, bool) {
	if b, ok := sb.files[p]; ok {
		return agentclient.Stat{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(b)), Mode: "0644", MTime: "2026-01-01T00:00:00Z"}, true
	}
	if sb.dirs[p] {
		return agentclient.Stat{Name: path.Base(p), Path: p, Type: "dir", Mode: "0755", MTime: "2026-01-01T00:00:00Z"}, true
	}
	return agentclient.Stat{}, false
}

func (sb *sandbox) mkdirAll(p string) {
	for p != "/" && p != "." {
		sb.dirs[p] = true
		p = path.Dir(p)
	}
}

func cleanPath(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	return path.Clean(p), true
}

func (a *Agent) fileReq(w http.ResponseWriter, r *http.Request, p string) (*sandbox, string, bool) {
	sb := a.get(w, r)
	if sb == nil {
		return nil, "", false
	}
	cp, ok := cleanPath(p)
	if !ok {
		writeErr(w, 400, "invalid_request", "path must be absolute")
		return nil, "", false
	}
	return sb, cp, true
}

func (a *Agent) readFile(w http.ResponseWriter, r *http.Request) {
	sb, p, ok := a.fileReq(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	a.mu.Lock()
	b, found := sb.files[p]
	a.mu.Unlock()
	if !found {
		writeErr(w, 404, "not_found", "no such file: "+p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (a *Agent) writeFile(w http.ResponseWriter, r *http.Request) {
	sb, p, ok := a.fileReq(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	a.mu.Lock()
	sb.mkdirAll(path.Dir(p))
	sb.files[p] = b
	st, _ := sb.stat(p)
	a.mu.Unlock()
	writeJSON(w, 200, st)
}

func (a *Agent) removeFile(w http.ResponseWriter, r *http.Request) {
	sb, p, ok := a.fileReq(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, found := sb.stat(p); !found {
		writeErr(w, 404, "not_found", "no such file: "+p)
		return
	}
	delete(sb.files, p)
	delete(sb.dirs, p)
	w.WriteHeader(204)
}

func (a *Agent) listFiles(w http.ResponseWriter, r *http.Request) {
	sb, p, ok := a.fileReq(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !sb.dirs[p] {
		writeErr(w, 404, "not_found", "no such directory: "+p)
		return
	}
	entries := []agentclient.Stat{}
	for f := range sb.files {
		if path.Dir(f) == p && !strings.HasPrefix(f, "/.env/") {
			st, _ := sb.stat(f)
			entries = append(entries, st)
		}
	}
	for d := range sb.dirs {
		if d != p && path.Dir(d) == p {
			st, _ := sb.stat(d)
			entries = append(entries, st)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	writeJSON(w, 200, map[string]any{"entries": entries})
}

func (a *Agent) statFile(w http.ResponseWriter, r *http.Request) {
	sb, p, ok := a.fileReq(w, r, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st, found := sb.stat(p)
	if !found {
		writeErr(w, 404, "not_found", "no such file: "+p)
		return
	}
	writeJSON(w, 200, st)
}

func (a *Agent) mkdir(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path string `json:"path"`
		User string `json:"user"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	sb, p, ok := a.fileReq(w, r, req.Path)
	if !ok {
		return
	}
	a.mu.Lock()
	sb.mkdirAll(p)
	a.mu.Unlock()
	w.WriteHeader(204)
}

func (a *Agent) move(w http.ResponseWriter, r *http.Request) {
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
		User string `json:"user"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	sb, from, ok := a.fileReq(w, r, req.From)
	if !ok {
		return
	}
	to, ok := cleanPath(req.To)
	if !ok {
		writeErr(w, 400, "invalid_request", "path must be absolute")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, found := sb.files[from]
	if !found {
		writeErr(w, 404, "not_found", "no such file: "+from)
		return
	}
	delete(sb.files, from)
	sb.mkdirAll(path.Dir(to))
	sb.files[to] = b
	w.WriteHeader(204)
}
