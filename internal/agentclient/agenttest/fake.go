// Package fakeagent is a TEST DOUBLE ONLY: an in-memory HTTP server that speaks the host agent
// contract of docs/hostagent-api.md closely enough for the control plane's own tests (api,
// scheduler, CLI) to run without VMs. It boots nothing; "exec" interprets a handful of toy
// commands, "files" live in a map, and a sandbox's "memory" is one integer counter (the toy
// command `inc`), which snapshots, forks and hibernation carry along like the real agent carries
// guest memory. Never use it outside tests; the real agent is internal/hostagent, and the
// end-to-end tests run against that.
package agenttest

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
	"github.com/pandastack/pandastack/internal/template"
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
	poolTotal   int64 // MiB; volumes take their whole size (the real agent's default)
	maxVCPUs    int64
	creates     int
	kills       int
	createErr   *agentclient.Error
	createDelay time.Duration
	forkErr     *agentclient.Error
	forkIDs     []string
	snapshots   map[string]*snapshot
	volumes     map[string]*volume
	seq         int
	srv         *httptest.Server
	built       map[string]template.Spec // templates built through the API, by name
	buildGate   chan struct{}            // HoldBuilds
}

type sandbox struct {
	agentclient.Sandbox
	files   map[string][]byte
	dirs    map[string]bool
	counter int  // the toy "memory": what `inc` counts
	noWake  bool // the next wake fails as if its memory files were gone
	mounts  []agentclient.VolumeMount
}

// volume is a fake volume: its files are copied into a sandbox's files under the mount path at
// create, and back out of a read-write mount when the sandbox is killed (the real agent flushes
// the guest's writes before its VMM goes).
type volume struct {
	agentclient.Volume
	files map[string][]byte // relative to the mount point ("/x" is MOUNT/x)
}

// MaxVolumeMiB is the largest volume the fake agent makes (the real agent's default maximum).
const MaxVolumeMiB = 1 << 20

type snapshot struct {
	agentclient.Snapshot
	files   map[string][]byte
	dirs    map[string]bool
	counter int
	deleted bool
}

func copyFiles(f map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(f))
	for k, v := range f {
		out[k] = append([]byte(nil), v...)
	}
	return out
}

func copyDirs(d map[string]bool) map[string]bool {
	out := make(map[string]bool, len(d))
	for k, v := range d {
		out[k] = v
	}
	return out
}

// New starts a fake agent with the given templates (all baked) and 8 slots.
func New(hostID, token string, templates ...string) *Agent {
	a := &Agent{HostID: hostID, Token: token, sandboxes: map[string]*sandbox{}, snapshots: map[string]*snapshot{}, volumes: map[string]*volume{}, built: map[string]template.Spec{}, slotsTotal: 8, memTotal: 8192, maxVCPUs: 8, poolTotal: 64 << 20}
	for _, t := range templates {
		at := agentclient.Template{Name: t, Baked: true, VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024}
		if cs, ok := template.CatalogSpec(t); ok { // reported like the real agent reports its catalog
			at.Description, at.Aliases, at.Metadata = cs.Description, cs.Aliases, cs.Metadata
		}
		a.templates = append(a.templates, at)
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

// SetPool changes the size of the disk pool (MiB) that volumes are admitted against.
func (a *Agent) SetPool(mib int64) { a.mu.Lock(); a.poolTotal = mib; a.mu.Unlock() }

// poolFree is what the pool still admits, in MiB; a.mu held.
func (a *Agent) poolFree() int64 {
	free := a.poolTotal
	for _, v := range a.volumes {
		free -= v.SizeMiB
	}
	return free
}

// SetMaxVCPUs changes the largest VM (vCPUs) reported by /v1/info; max_memory_mib is half the memory.
func (a *Agent) SetMaxVCPUs(n int64) { a.mu.Lock(); a.maxVCPUs = n; a.mu.Unlock() }

// FailCreates makes every create answer err (nil to stop).
func (a *Agent) FailCreates(err *agentclient.Error) { a.mu.Lock(); a.createErr = err; a.mu.Unlock() }

// SetCreateDelay makes creates take d (to widen race windows).
func (a *Agent) SetCreateDelay(d time.Duration) { a.mu.Lock(); a.createDelay = d; a.mu.Unlock() }

// FailForks makes every fork answer err (nil to stop); no child is made.
func (a *Agent) FailForks(err *agentclient.Error) { a.mu.Lock(); a.forkErr = err; a.mu.Unlock() }

// ForkIDs makes the next fork name its children ids (in order) instead of fresh ones.
func (a *Agent) ForkIDs(ids ...string) { a.mu.Lock(); a.forkIDs = ids; a.mu.Unlock() }

// Hibernate hibernates a running sandbox behind the control plane's back, as the real agent's
// --idle-hibernate does.
func (a *Agent) Hibernate(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.sandboxes[id]; ok && sb.State == agentclient.StateRunning {
		sb.State = agentclient.StateHibernated
	}
}

// BreakWake makes the next wake of a sandbox fail as if its memory files were missing: it then
// goes to state error with the reason, like the real agent.
func (a *Agent) BreakWake(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.sandboxes[id]; ok {
		sb.noWake = true
	}
}

// State returns a sandbox's state on this host ("" when the host does not have it).
func (a *Agent) State(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.sandboxes[id]; ok {
		return sb.State
	}
	return ""
}

// Snapshots returns the ids of the snapshots this host keeps (not deleted), sorted.
func (a *Agent) Snapshots() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, sn := range a.snapshots {
		if !sn.deleted {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Volumes returns the ids of the volumes this host keeps, sorted.
func (a *Agent) Volumes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id := range a.volumes {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Mounts returns the volumes a sandbox on this host was created with.
func (a *Agent) Mounts(id string) []agentclient.VolumeMount {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.sandboxes[id]; ok {
		return append([]agentclient.VolumeMount(nil), sb.mounts...)
	}
	return nil
}

// All returns the ids of every sandbox this host has, in any state, sorted.
func (a *Agent) All() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id := range a.sandboxes {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Running returns the ids of running sandboxes, sorted.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id, sb := range a.sandboxes {
		if sb.State == agentclient.StateRunning {
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
	a.sandboxes[id] = &sandbox{Sandbox: agentclient.Sandbox{ID: id, Template: template, State: agentclient.StateRunning}, files: map[string][]byte{}, dirs: map[string]bool{"/": true}}
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
	authed.HandleFunc("POST /v1/templates", a.buildTemplate)
	authed.HandleFunc("DELETE /v1/templates/{name}", a.deleteTemplate)
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
		// A killed sandbox is gone from the agent (its files too, hibernated or not).
		a.mu.Lock()
		if sb, ok := a.sandboxes[r.PathValue("id")]; ok {
			a.flushVolumes(sb)
			delete(a.sandboxes, r.PathValue("id"))
			a.kills++
		}
		a.mu.Unlock()
		w.WriteHeader(204)
	})
	authed.HandleFunc("POST /v1/sandboxes/{id}/fork", a.fork)
	authed.HandleFunc("POST /v1/sandboxes/{id}/hibernate", a.hibernate)
	authed.HandleFunc("POST /v1/sandboxes/{id}/wake", func(w http.ResponseWriter, r *http.Request) {
		if sb := a.awake(w, r); sb != nil {
			a.mu.Lock()
			defer a.mu.Unlock()
			writeJSON(w, 200, sb.Sandbox)
		}
	})
	authed.HandleFunc("POST /v1/sandboxes/{id}/snapshots", a.snapshot)
	authed.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		out := []agentclient.Snapshot{}
		for _, sn := range a.snapshots {
			if !sn.deleted {
				out = append(out, sn.Snapshot)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
		writeJSON(w, 200, map[string]any{"snapshots": out})
	})
	authed.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		sn, ok := a.snapshots[r.PathValue("id")]
		if !ok || sn.deleted {
			writeErr(w, 404, "not_found", "snapshot "+r.PathValue("id")+" not found")
			return
		}
		writeJSON(w, 200, sn.Snapshot)
	})
	authed.HandleFunc("DELETE /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		sn, ok := a.snapshots[r.PathValue("id")]
		if !ok || sn.deleted {
			writeErr(w, 404, "not_found", "snapshot "+r.PathValue("id")+" not found")
			return
		}
		sn.deleted = true // sandboxes made from it keep working: they hold their own copy here
		w.WriteHeader(204)
	})
	authed.HandleFunc("POST /v1/volumes", a.createVolume)
	authed.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		out := []agentclient.Volume{}
		for _, v := range a.volumes {
			out = append(out, a.volumeView(v))
		}
		sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
		writeJSON(w, 200, map[string]any{"volumes": out})
	})
	authed.HandleFunc("GET /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if v := a.volume(w, r); v != nil {
			writeJSON(w, 200, a.volumeView(v))
		}
	})
	authed.HandleFunc("POST /v1/volumes/{id}/resize", a.resizeVolume)
	authed.HandleFunc("DELETE /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		v := a.volume(w, r)
		if v == nil {
			return
		}
		if att := a.attachments(v.ID); len(att) > 0 {
			writeErr(w, 409, "conflict", "volume "+v.ID+" is attached to sandbox "+att[0].SandboxID)
			return
		}
		delete(a.volumes, v.ID)
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
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if t := r.Header.Get(agentclient.ProxyTokenHeader); t != "" {
			got = "Bearer " + t
			r.Header.Del(agentclient.ProxyTokenHeader)
		}
		if got != "Bearer "+a.Token {
			writeErr(w, 401, "unauthorized", "bad agent token")
			return
		}
		// Proxied requests skip the mux, as on the real agent: their path passes through as sent.
		if id, port, rest, ok := agentclient.PortPath(r.URL.EscapedPath()); ok {
			a.port(w, r, id, port, rest)
			return
		}
		authed.ServeHTTP(w, r)
	})
	mux.Handle("/", root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, _, ok := agentclient.PortPath(r.URL.EscapedPath()); ok {
			root.ServeHTTP(w, r) // before the mux, which would clean the path and redirect
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (a *Agent) info(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var running int64
	for _, sb := range a.sandboxes {
		if sb.State == agentclient.StateRunning {
			running++
		}
	}
	// Every sandbox holds a slot, hibernated ones too (like the real agent); only running ones
	// hold memory.
	// Limits like the real agent's defaults: half the memory per VM, 2 × the memory committed.
	writeJSON(w, 200, agentclient.Info{HostID: a.HostID, Accel: "tcg", MemMiBTotal: a.memTotal, MemMiBFree: a.memTotal - 256*running,
		SlotsTotal: a.slotsTotal, SlotsUsed: int64(len(a.sandboxes)), Templates: a.templates,
		MaxVCPUs: a.maxVCPUs, MaxMemoryMiB: a.memTotal / 2, MemoryOvercommit: 2, MemMiBCommitted: 256 * running,
		MemMiBCommitLimit: 2 * a.memTotal, MemMiBWatermark: 512,
		PoolMiBTotal: a.poolTotal, PoolMiBFree: a.poolFree()})
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
	sb := &sandbox{files: map[string][]byte{}, dirs: map[string]bool{"/": true}}
	switch {
	case req.SnapshotID != "":
		sn, ok := a.snapshots[req.SnapshotID]
		if !ok || sn.deleted {
			writeErr(w, 404, "not_found", "snapshot "+req.SnapshotID+" not found")
			return
		}
		if req.Template != "" && req.Template != sn.Template {
			writeErr(w, 400, "invalid_request", "snapshot "+sn.ID+" is of template "+sn.Template+", not "+req.Template)
			return
		}
		req.Template = sn.Template
		sb.files, sb.dirs, sb.counter = copyFiles(sn.files), copyDirs(sn.dirs), sn.counter
		sb.SnapshotID = sn.ID
	case req.Template != "":
		req.Template = template.Canonical(req.Template) // like the real agent, it takes aliases
		known := false
		for _, t := range a.templates {
			known = known || t.Name == req.Template
		}
		if !known {
			writeErr(w, 404, "not_found", "template "+req.Template+" not found")
			return
		}
	default:
		writeErr(w, 400, "invalid_request", "template (or snapshot_id) is required")
		return
	}
	if int64(len(a.sandboxes)) >= a.slotsTotal {
		writeErr(w, 503, "capacity", "no free slot")
		return
	}
	if status, code, msg := a.checkMounts(req.Volumes); status != 0 {
		writeErr(w, status, code, msg)
		return
	}
	if req.ID == "" {
		req.ID = a.newID()
	}
	if _, dup := a.sandboxes[req.ID]; dup {
		writeErr(w, 409, "conflict", "sandbox "+req.ID+" exists")
		return
	}
	sb.Sandbox = agentclient.Sandbox{ID: req.ID, Template: req.Template, State: agentclient.StateRunning,
		CreatedAt: time.Now().UTC().Format(time.RFC3339), MemoryMiB: 256, VCPUs: 1, SnapshotID: sb.SnapshotID}
	// Env is visible to exec through the toy `env NAME` command.
	for k, v := range req.Env {
		sb.files["/.env/"+k] = []byte(v)
	}
	sb.mounts = req.Volumes
	for _, m := range req.Volumes {
		sb.mkdirAll(m.MountPath)
		for rel, b := range a.volumes[m.VolumeID].files {
			p := m.MountPath + rel
			sb.mkdirAll(path.Dir(p))
			sb.files[p] = append([]byte(nil), b...)
		}
	}
	a.sandboxes[req.ID] = sb
	a.creates++
	writeJSON(w, 201, sb.Sandbox)
}

func (a *Agent) newID() string {
	a.seq++
	return fmt.Sprintf("sb_fake%d", a.seq)
}

// get returns a sandbox in any state, or writes the error.
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

// awake returns the sandbox, waking it first when it is hibernated (every exec, files, fork and
// snapshot call does, as on the real agent). A wake that fails leaves it in state error.
func (a *Agent) awake(w http.ResponseWriter, r *http.Request) *sandbox {
	sb := a.get(w, r)
	if sb == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb.State != agentclient.StateHibernated {
		return sb
	}
	if sb.noWake {
		sb.noWake = false
		sb.State, sb.Error = agentclient.StateError, "wake failed: sandbox "+sb.ID+": snapshot files missing"
		writeErr(w, 409, "conflict", "sandbox "+sb.ID+" could not be woken: snapshot files missing")
		return nil
	}
	sb.State = agentclient.StateRunning
	return sb
}

// live is awake for calls that need a running guest.
func (a *Agent) live(w http.ResponseWriter, r *http.Request) *sandbox {
	sb := a.awake(w, r)
	if sb == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb.State != agentclient.StateRunning {
		msg := "sandbox " + sb.ID + " is " + sb.State
		if sb.Error != "" {
			msg = "sandbox " + sb.ID + " is in state error: " + sb.Error
		}
		writeErr(w, 409, "conflict", msg)
		return nil
	}
	return sb
}

func (a *Agent) hibernate(w http.ResponseWriter, r *http.Request) {
	sb := a.get(w, r)
	if sb == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch sb.State {
	case agentclient.StateHibernated:
	case agentclient.StateRunning:
		sb.State = agentclient.StateHibernated
	default:
		writeErr(w, 409, "conflict", "sandbox "+sb.ID+" is "+sb.State)
		return
	}
	writeJSON(w, 200, sb.Sandbox)
}

func (a *Agent) snapshot(w http.ResponseWriter, r *http.Request) {
	sb := a.live(w, r)
	if sb == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(sb.mounts) > 0 {
		writeErr(w, 409, "conflict", "sandbox "+sb.ID+" has volumes: it cannot be snapshotted")
		return
	}
	a.seq++
	sn := &snapshot{Snapshot: agentclient.Snapshot{ID: fmt.Sprintf("snap_fake%d", a.seq), SandboxID: sb.ID, Template: sb.Template,
		CreatedAt: time.Now().UTC(), VCPUs: 1, MemoryMiB: 256}, files: copyFiles(sb.files), dirs: copyDirs(sb.dirs), counter: sb.counter}
	sn.SizeBytes = 4096
	for _, b := range sn.files {
		sn.SizeBytes += int64(len(b))
	}
	a.snapshots[sn.ID] = sn
	writeJSON(w, 201, sn.Snapshot)
}

func (a *Agent) fork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count *int `json:"count"`
	}
	if r.ContentLength != 0 {
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeErr(w, 400, "invalid_request", err.Error())
			return
		}
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > agentclient.MaxForkCount {
		writeErr(w, 400, "invalid_request", fmt.Sprintf("count must be 1-%d", agentclient.MaxForkCount))
		return
	}
	parent := a.live(w, r)
	if parent == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(parent.mounts) > 0 {
		writeErr(w, 409, "conflict", "sandbox "+parent.ID+" has volumes: it cannot be forked")
		return
	}
	if a.forkErr != nil {
		writeErr(w, a.forkErr.Status, a.forkErr.Code, a.forkErr.Message)
		return
	}
	if int64(len(a.sandboxes)+count) > a.slotsTotal {
		writeErr(w, 503, "capacity", "no room for the children")
		return
	}
	ids := make([]string, count)
	for i := range ids {
		if len(a.forkIDs) > 0 {
			ids[i], a.forkIDs = a.forkIDs[0], a.forkIDs[1:]
		} else {
			ids[i] = a.newID()
		}
		if _, dup := a.sandboxes[ids[i]]; dup {
			writeErr(w, 409, "conflict", "fork of "+parent.ID+" failed, no child kept: sandbox "+ids[i]+" exists")
			return
		}
	}
	children := make([]agentclient.Sandbox, count)
	for i, id := range ids {
		c := &sandbox{Sandbox: agentclient.Sandbox{ID: id, Template: parent.Template, State: agentclient.StateRunning,
			CreatedAt: time.Now().UTC().Format(time.RFC3339), MemoryMiB: 256, VCPUs: 1, ForkOf: parent.ID},
			files: copyFiles(parent.files), dirs: copyDirs(parent.dirs), counter: parent.counter}
		a.sandboxes[id] = c
		children[i] = c.Sandbox
	}
	writeJSON(w, 201, map[string]any{"sandboxes": children})
}

// exec understands: `echo WORDS`, `stderr WORDS`, `exit N`, `env NAME`, `cat` (echoes stdin),
// `sleep MS`, `lines N` (N stdout lines, 20 ms apart, for streaming tests) and `inc` (adds one
// to the sandbox's in-memory counter and prints it).
func (a *Agent) exec(w http.ResponseWriter, r *http.Request) {
	sb := a.live(w, r)
	if sb == nil {
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
	case "inc":
		a.mu.Lock()
		sb.counter++
		n := sb.counter
		a.mu.Unlock()
		chunks = append(chunks, chunk{"stdout", strconv.Itoa(n) + "\n"})
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
	sb := a.live(w, r)
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
	a.mu.Lock()
	roErr := sb.readOnly(p)
	a.mu.Unlock()
	if roErr {
		writeErr(w, 403, "forbidden", "read-only file system: "+p)
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
	if sb.readOnly(p) {
		writeErr(w, 403, "forbidden", "read-only file system: "+p)
		return
	}
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
	if sb.readOnly(from) || sb.readOnly(to) {
		writeErr(w, 403, "forbidden", "read-only file system")
		return
	}
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

// port stands in for the agent's port proxy: instead of a guest server it describes the request
// it got, so tests can check what the control plane forwarded.
func (a *Agent) port(w http.ResponseWriter, r *http.Request, id, port, rest string) {
	a.mu.Lock()
	_, ok := a.sandboxes[id]
	a.mu.Unlock()
	if !ok {
		writeErr(w, 404, "not_found", "no such sandbox")
		return
	}
	body, _ := io.ReadAll(r.Body)
	writeJSON(w, 200, map[string]any{"method": r.Method, "port": port, "path": rest,
		"query": r.URL.RawQuery, "host": r.Host, "authorization": r.Header.Get("Authorization"), "body": string(body)})
}

// volume returns the volume named in the path, or writes 404. Callers hold a.mu.
func (a *Agent) volume(w http.ResponseWriter, r *http.Request) *volume {
	v, ok := a.volumes[r.PathValue("id")]
	if !ok {
		writeErr(w, 404, "not_found", "volume "+r.PathValue("id")+" not found")
		return nil
	}
	return v
}

// attachments lists the sandboxes on this host (in any state) that have the volume mounted,
// sorted by sandbox id. Callers hold a.mu.
func (a *Agent) attachments(volumeID string) []agentclient.VolumeAttachment {
	out := []agentclient.VolumeAttachment{}
	for _, sb := range a.sandboxes {
		for _, m := range sb.mounts {
			if m.VolumeID == volumeID {
				out = append(out, agentclient.VolumeAttachment{SandboxID: sb.ID, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SandboxID < out[j].SandboxID })
	return out
}

func (a *Agent) volumeView(v *volume) agentclient.Volume {
	out := v.Volume
	out.Attachments = a.attachments(v.ID)
	return out
}

func (a *Agent) createVolume(w http.ResponseWriter, r *http.Request) {
	var req agentclient.CreateVolumeRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	if !strings.HasPrefix(req.ID, "vol_") {
		writeErr(w, 400, "invalid_request", "id must start with vol_")
		return
	}
	if req.SizeMiB < 1 || req.SizeMiB > MaxVolumeMiB {
		writeErr(w, 400, "invalid_request", fmt.Sprintf("size_mib must be between 1 and %d", MaxVolumeMiB))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.volumes[req.ID]; dup {
		writeErr(w, 409, "conflict", "volume "+req.ID+" exists")
		return
	}
	if free := a.poolFree(); req.SizeMiB > free {
		writeErr(w, 507, "no_space", fmt.Sprintf("volume %s (%d MiB) needs %d MiB of the host's disk pool but only %d MiB are available", req.ID, req.SizeMiB, req.SizeMiB, max(free, 0)))
		return
	}
	v := &volume{Volume: agentclient.Volume{ID: req.ID, SizeMiB: req.SizeMiB, CreatedAt: time.Now().UTC()}, files: map[string][]byte{}}
	a.volumes[v.ID] = v
	writeJSON(w, 201, a.volumeView(v))
}

func (a *Agent) resizeVolume(w http.ResponseWriter, r *http.Request) {
	var req agentclient.ResizeVolumeRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, 400, "invalid_request", err.Error())
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.volume(w, r)
	if v == nil {
		return
	}
	if req.SizeMiB < v.SizeMiB || req.SizeMiB > MaxVolumeMiB {
		writeErr(w, 400, "invalid_request", fmt.Sprintf("size_mib must be between the current %d and %d (volumes only grow)", v.SizeMiB, MaxVolumeMiB))
		return
	}
	if att := a.attachments(v.ID); len(att) > 0 {
		writeErr(w, 409, "conflict", "volume "+v.ID+" is attached to sandbox "+att[0].SandboxID)
		return
	}
	if free := a.poolFree(); req.SizeMiB-v.SizeMiB > free {
		writeErr(w, 507, "no_space", fmt.Sprintf("growing volume %s needs %d MiB of the host's disk pool but only %d MiB are available", v.ID, req.SizeMiB-v.SizeMiB, max(free, 0)))
		return
	}
	v.SizeMiB = req.SizeMiB
	writeJSON(w, 200, a.volumeView(v))
}

// checkMounts applies the agent's attach rules to a create's volumes: 0 when they may be
// mounted, else the error answer. Callers hold a.mu.
func (a *Agent) checkMounts(ms []agentclient.VolumeMount) (int, string, string) {
	if len(ms) > agentclient.MaxVolumesPerSandbox {
		return 400, "invalid_request", fmt.Sprintf("at most %d volumes per sandbox", agentclient.MaxVolumesPerSandbox)
	}
	paths := map[string]bool{}
	for _, m := range ms {
		if !strings.HasPrefix(m.MountPath, "/") || path.Clean(m.MountPath) != m.MountPath || m.MountPath == "/" {
			return 400, "invalid_request", "mount_path " + m.MountPath + " must be absolute, normalised and not /"
		}
		if paths[m.MountPath] {
			return 400, "invalid_request", "two volumes at " + m.MountPath
		}
		paths[m.MountPath] = true
		if _, ok := a.volumes[m.VolumeID]; !ok {
			return 404, "not_found", "volume " + m.VolumeID + " not found"
		}
		for _, at := range a.attachments(m.VolumeID) {
			if !m.ReadOnly || !at.ReadOnly {
				return 409, "conflict", "volume " + m.VolumeID + " is attached to sandbox " + at.SandboxID
			}
		}
	}
	return 0, "", ""
}

// flushVolumes copies what a going sandbox has under its read-write mounts back into the
// volumes. Callers hold a.mu.
func (a *Agent) flushVolumes(sb *sandbox) {
	for _, m := range sb.mounts {
		v, ok := a.volumes[m.VolumeID]
		if !ok || m.ReadOnly {
			continue
		}
		v.files = map[string][]byte{}
		for p, b := range sb.files {
			if strings.HasPrefix(p, m.MountPath+"/") {
				v.files[strings.TrimPrefix(p, m.MountPath)] = append([]byte(nil), b...)
			}
		}
	}
}

// readOnly reports whether p is under one of the sandbox's read-only mounts.
func (sb *sandbox) readOnly(p string) bool {
	for _, m := range sb.mounts {
		if m.ReadOnly && (p == m.MountPath || strings.HasPrefix(p, m.MountPath+"/")) {
			return true
		}
	}
	return false
}
