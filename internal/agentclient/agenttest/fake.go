// Package agenttest is the host-agent API's test kit: Run, the contract every host agent meets,
// and New, a fake host agent for the control plane's own tests.
//
// The fake is a fake of our own API (docs/hostagent-api.md), not of a machine: an in-memory HTTP
// server that lets the api, scheduler, sandboxes and CLI tests run without VMs. It boots nothing.
// Exec interprets a few toy commands (exec.go), files live in a map (memfs.go), and a sandbox's
// "memory" is one counter (the toy command `inc`) that snapshots, forks and hibernation carry
// along as the real agent carries guest memory. What keeps it honest is the contract suite:
// TestContractFake runs Run against it on every `go test`, TestContractHostAgent runs the same
// checks against the real agent (internal/hostagent, real microVMs), and where the two disagree
// the real agent is right. Never use the fake outside tests.
package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Agent is one fake host agent listening on loopback.
type Agent struct {
	HostID string
	Token  string

	mu        sync.Mutex
	templates []agentclient.Template
	built     map[string]template.Spec // templates built through the API, by name
	sandboxes map[string]*sandbox
	snapshots map[string]*snapshot
	volumes   map[string]*volume
	seq       int // for pids and the order sandboxes are listed in
	creates   int
	kills     int
	refused   int                       // creates refused for want of a free slot
	onKill    func(id string, had bool) // OnKill
	exitLog   []loggedExit              // processes' exits, in the order seen (processes.go)
	exitSeq   int64
	srv       *httptest.Server

	// Knobs the tests turn (the setters below).
	slotsTotal  int64
	memTotal    int64
	poolTotal   int64 // MiB (64 GiB, the real agent's default); volumes take their whole size (ditto)
	maxVCPUs    int64
	createErr   *agentclient.Error
	createDelay time.Duration
	forkErr     *agentclient.Error
	forkIDs     []string
	buildGate   chan struct{} // HoldBuilds
	blob        *Blob         // UseBlob
	portHandler http.Handler  // ServePorts
	relay       bool          // ServeRelay
	relayed     int           // requests the relay carried
}

// Blob is a blob store fake agents share: what one publishes another can pull. It keeps the
// real agent's contract (internal/host/snapshot, internal/host/sandbox/travel.go): a host with a
// store publishes each snapshot it takes and each hibernation, pulls a snapshot it is asked to
// restore and lacks, and adopts a hibernated sandbox from its publication.
type Blob struct {
	snaps      shelf[snapshot]
	hibernated shelf[sandbox] // by publication name
}

// shelf is one kind of publication, handed out as copies (as a pull makes one).
type shelf[T any] struct {
	mu    sync.Mutex
	items map[string]T
	clone func(T) T
}

func (s *shelf[T]) put(name string, v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[name] = s.clone(v)
}

func (s *shelf[T]) get(name string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.items[name]
	if ok {
		v = s.clone(v)
	}
	return v, ok
}

// NewBlob makes an empty shared store.
func NewBlob() *Blob {
	return &Blob{
		snaps: shelf[snapshot]{items: map[string]snapshot{}, clone: func(sn snapshot) snapshot {
			return snapshot{Snapshot: sn.Snapshot, guest: sn.guest.clone()}
		}},
		hibernated: shelf[sandbox]{items: map[string]sandbox{}, clone: func(sb sandbox) sandbox {
			sb.guest = sb.guest.clone()
			return sb
		}},
	}
}

// Published reports whether the store holds snapshot id.
func (b *Blob) Published(id string) bool {
	_, ok := b.snaps.get(id)
	return ok
}

// UseBlob makes b this agent's blob store (nil: none).
func (a *Agent) UseBlob(b *Blob) { a.with(func() { a.blob = b }) }

// sandbox is a fake sandbox: its API view, its guest and what it was created with.
type sandbox struct {
	agentclient.Sandbox
	guest
	order  int
	env    map[string]string // the create's (a fork's parent's)
	mounts []agentclient.VolumeMount
	// carried are the volume copies its published hibernation carries (the blob store's copy only).
	carried []agentclient.SnapshotVolume
	noWake  bool // the next wake fails as if its memory files were gone
	// watches are the open watch streams (filetree.go); moved is the move a change made.
	watches []*fakeWatch
	moved   *[2]string
	// The toy code server's contexts (code.go), for code-interpreter sandboxes.
	code    []codeContext
	codeSeq int
}

// guest is what a VM holds: its files and the toy "memory" counter that `inc` counts. Snapshots,
// forks and hibernation carry it.
type guest struct {
	fs      memFS
	counter int
	procs   map[int]*proc // background processes (processes.go)
}

func (g guest) clone() guest {
	c := guest{fs: g.fs.clone(), counter: g.counter, procs: map[int]*proc{}}
	for pid, p := range g.procs {
		c.procs[pid] = p.clone()
	}
	return c
}

type snapshot struct {
	agentclient.Snapshot
	guest
	deleted bool
}

// New starts a fake agent with the given templates (all baked, 1 vCPU and 256 MiB each: the
// control-plane tests count capacity in those) and 8 slots.
func New(hostID, token string, templates ...string) *Agent {
	a := &Agent{HostID: hostID, Token: token, sandboxes: map[string]*sandbox{}, snapshots: map[string]*snapshot{},
		volumes: map[string]*volume{}, built: map[string]template.Spec{},
		slotsTotal: 8, memTotal: 8192, maxVCPUs: 8, poolTotal: 64 << 10}
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

// with runs fn with the agent's lock held.
func (a *Agent) with(fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn()
}

// SetSlots changes the slot capacity reported by /v1/info.
func (a *Agent) SetSlots(n int64) { a.with(func() { a.slotsTotal = n }) }

// SetMemory changes the total memory reported by /v1/info.
func (a *Agent) SetMemory(mib int64) { a.with(func() { a.memTotal = mib }) }

// SetTemplateVolume gives template name a data volume of sizeMiB at mountPath (ephemeral: each
// sandbox's copy is its own), as the real agent reports a template baked with one: every create
// from it gets a new volume (empty here) there.
func (a *Agent) SetTemplateVolume(name, mountPath string, sizeMiB int64, ephemeral bool) {
	a.with(func() {
		for i := range a.templates {
			if a.templates[i].Name == name {
				a.templates[i].Volumes = []agentclient.SnapshotVolume{{Slot: 0, MountPath: mountPath, SizeMiB: sizeMiB, FS: "ext4", Ephemeral: ephemeral}}
			}
		}
	})
}

// SetPool changes the size of the disk pool (MiB) that volumes are admitted against.
func (a *Agent) SetPool(mib int64) { a.with(func() { a.poolTotal = mib }) }

// SetMaxVCPUs changes the largest VM (vCPUs) reported by /v1/info; max_memory_mib is half the memory.
func (a *Agent) SetMaxVCPUs(n int64) { a.with(func() { a.maxVCPUs = n }) }

// FailCreates makes every create answer err (nil to stop).
func (a *Agent) FailCreates(err *agentclient.Error) { a.with(func() { a.createErr = err }) }

// SetCreateDelay makes creates take d (to widen race windows).
func (a *Agent) SetCreateDelay(d time.Duration) { a.with(func() { a.createDelay = d }) }

// FailForks makes every fork answer err (nil to stop); no child is made.
func (a *Agent) FailForks(err *agentclient.Error) { a.with(func() { a.forkErr = err }) }

// ForkIDs makes the next fork name its children ids (in order) instead of fresh ones.
func (a *Agent) ForkIDs(ids ...string) { a.with(func() { a.forkIDs = ids }) }

// ServePorts makes h answer the port path's requests to live sandboxes in place of the echo
// (a guest's server): h sees the path below the port (/v1/sandboxes/{id}/ports/{port}/x → /x)
// and the sandbox's id in r.Host. nil: the echo again.
func (a *Agent) ServePorts(h http.Handler) { a.with(func() { a.portHandler = h }) }

// ServeRelay makes the fake answer the guest agent relay too (hostapi.RelayPath, a TCP upgrade):
// one HTTP request per connection, answered by the ServePorts handler. Off (the default) it
// answers 404, like an agent from before the relay.
func (a *Agent) ServeRelay(on bool) { a.with(func() { a.relay = on }) }

// Relayed is how many requests the relay carried.
func (a *Agent) Relayed() (n int) {
	a.with(func() { n = a.relayed })
	return n
}

// relayed answers GET /v1/sandboxes/{id}/relay/{port}: the upgrade, then one request to the
// ServePorts handler over the connection.
func (a *Agent) serveRelay(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	_, ok := a.sandboxes[r.PathValue("id")]
	h, on := a.portHandler, a.relay
	a.mu.Unlock()
	switch {
	case !on || h == nil:
		writeErr(w, notFound("no route for %s %s", r.Method, r.URL.Path))
		return
	case !ok:
		writeErr(w, notFound("no such sandbox"))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + hostapi.TCPUpgrade + "\r\n\r\n")
	brw.Flush()
	req, err := http.ReadRequest(brw.Reader)
	if err != nil {
		return
	}
	a.with(func() { a.relayed++ })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	rec.Result().Write(conn)
}

// onSandbox runs fn on sandbox id, if this host has it, with the lock held.
func (a *Agent) onSandbox(id string, fn func(*sandbox)) {
	a.with(func() {
		if sb, ok := a.sandboxes[id]; ok {
			fn(sb)
		}
	})
}

// Hibernate hibernates a running sandbox behind the control plane's back, as the real agent's
// --idle-hibernate does.
func (a *Agent) Hibernate(id string) {
	a.onSandbox(id, func(sb *sandbox) {
		if sb.State == agentclient.StateRunning {
			sb.State, sb.PID = agentclient.StateHibernated, 0
		}
	})
}

// BreakWake makes the next wake of a sandbox fail as if its memory files were missing: it then
// goes to state error with the reason, like the real agent.
func (a *Agent) BreakWake(id string) { a.onSandbox(id, func(sb *sandbox) { sb.noWake = true }) }

// State returns a sandbox's state on this host ("" when the host does not have it).
func (a *Agent) State(id string) (state string) {
	a.onSandbox(id, func(sb *sandbox) { state = sb.State })
	return state
}

// Mounts returns the volumes a sandbox on this host was created with.
func (a *Agent) Mounts(id string) (ms []agentclient.VolumeMount) {
	a.onSandbox(id, func(sb *sandbox) { ms = slices.Clone(sb.mounts) })
	return ms
}

// SandboxTemplate returns the template a sandbox on this host was created from ("" if none).
func (a *Agent) SandboxTemplate(id string) (name string) {
	a.onSandbox(id, func(sb *sandbox) { name = sb.Template })
	return name
}

// keys returns the keys of m whose values pass keep, sorted, with a's lock held.
func keys[V any](a *Agent, m map[string]V, keep func(V) bool) []string {
	var out []string
	a.with(func() {
		for k, v := range m {
			if keep(v) {
				out = append(out, k)
			}
		}
	})
	slices.Sort(out)
	return out
}

// Snapshots returns the ids of the snapshots this host keeps (not deleted), sorted.
func (a *Agent) Snapshots() []string {
	return keys(a, a.snapshots, func(sn *snapshot) bool { return !sn.deleted })
}

// Volumes returns the ids of the volumes this host keeps, sorted.
func (a *Agent) Volumes() []string { return keys(a, a.volumes, func(*volume) bool { return true }) }

// All returns the ids of every sandbox this host has, in any state, sorted.
func (a *Agent) All() []string { return keys(a, a.sandboxes, func(*sandbox) bool { return true }) }

// Running returns the ids of running sandboxes, sorted.
func (a *Agent) Running() []string {
	return keys(a, a.sandboxes, func(sb *sandbox) bool { return sb.State == agentclient.StateRunning })
}

// Counts returns how many creates and kills the agent served.
func (a *Agent) Counts() (creates, kills int) {
	a.with(func() { creates, kills = a.creates, a.kills })
	return creates, kills
}

// Refused returns how many creates the agent refused for want of a free slot. A fleet bench
// counts them as over-commits: the real agent admits beyond its slots (issue 28), the fake does not.
func (a *Agent) Refused() (n int) {
	a.with(func() { n = a.refused })
	return n
}

// OnKill makes every kill call fn with the sandbox id and whether this host had it (a kill of a
// sandbox already gone is a duplicate). fn runs with the agent's lock held: keep it short.
func (a *Agent) OnKill(fn func(id string, had bool)) { a.with(func() { a.onKill = fn }) }

// AddSandbox injects a running sandbox (e.g. one the control plane never recorded).
func (a *Agent) AddSandbox(id, template string) {
	a.with(func() { a.sandboxes[id] = a.newSandbox(id, a.template(template), guest{fs: newFS()}) })
}

// newSandbox is a running sandbox of template tpl with guest g (a.mu held).
func (a *Agent) newSandbox(id string, tpl agentclient.Template, g guest) *sandbox {
	a.seq++
	return &sandbox{Sandbox: agentclient.Sandbox{ID: id, Template: tpl.Name, State: agentclient.StateRunning, PID: 1000 + a.seq,
		CreatedAt: time.Now().UTC().Format(time.RFC3339), MemoryMiB: tpl.MemoryMiB, VCPUs: tpl.VCPUs}, guest: g, order: a.seq}
}

// template returns a template this agent lists; an unknown one is reported with the fake's
// default size (for AddSandbox).
func (a *Agent) template(name string) agentclient.Template {
	for _, t := range a.templates {
		if t.Name == name {
			return t
		}
	}
	return agentclient.Template{Name: name, VCPUs: 1, MemoryMiB: 256}
}

func (a *Agent) knows(name string) bool {
	return slices.ContainsFunc(a.templates, func(t agentclient.Template) bool { return t.Name == name })
}

func (a *Agent) newID(prefix string) string {
	return prefix + strconv.FormatInt(ids.Add(1), 10)
}

// ids numbers what every fake in the process makes: real agents make random ids, so two hosts
// never name two sandboxes alike (a sandbox adopted from another host keeps its id).
var ids atomic.Int64

// Ids the real agent accepts.
var (
	sandboxIDRE = regexp.MustCompile(`^sb_[a-z0-9]{1,60}$`)
	volumeIDRE  = regexp.MustCompile(`^vol_[a-z0-9]{1,60}$`)
)

func apiErr(status int, code, format string, args ...any) *agentclient.Error {
	return &agentclient.Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *agentclient.Error {
	return apiErr(400, "invalid_request", format, args...)
}

func notFound(format string, args ...any) *agentclient.Error {
	return apiErr(404, "not_found", format, args...)
}

func conflict(format string, args ...any) *agentclient.Error {
	return apiErr(409, "conflict", format, args...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, e *agentclient.Error) {
	writeJSON(w, e.Status, map[string]any{"error": map[string]string{"code": e.Code, "message": e.Message}})
}

// decode reads a JSON body strictly, like the real agent.
func decode(r *http.Request, v any) *agentclient.Error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("request body: %v", err)
	}
	return nil
}

// call is one endpoint of the API: it runs with the agent's lock held and answers a body or an
// error. The body's type says the status: nil is 204 No Content, created{v} is v with 201,
// []byte is a file's bytes, anything else JSON with 200.
type call func(r *http.Request) (any, *agentclient.Error)

type created struct{ v any }

func (a *Agent) serve(fn call) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		body, err := fn(r)
		a.mu.Unlock()
		if err != nil {
			writeErr(w, err)
			return
		}
		switch b := body.(type) {
		case nil:
			w.WriteHeader(204)
		case created:
			writeJSON(w, 201, b.v)
		case []byte:
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		default:
			writeJSON(w, 200, b)
		}
	}
}

func (a *Agent) handler() http.Handler {
	api := http.NewServeMux()
	for pattern, fn := range map[string]call{
		"GET /v1/info":                                   a.info,
		"GET /v1/doctor":                                 a.doctor,
		"POST /v1/doctor/repair":                         a.doctor,
		"GET /v1/templates":                              a.listTemplates,
		"DELETE /v1/templates/{name}":                    a.deleteTemplate,
		"GET /v1/sandboxes":                              a.listSandboxes,
		"GET /v1/sandboxes/{id}":                         a.getSandbox,
		"DELETE /v1/sandboxes/{id}":                      a.kill,
		"GET /v1/sandboxes/{id}/metrics":                 a.metrics,
		"POST /v1/sandboxes/{id}/fork":                   a.fork,
		"POST /v1/sandboxes/{id}/hibernate":              a.hibernate,
		"POST /v1/sandboxes/{id}/wake":                   a.wake,
		"POST /v1/sandboxes/{id}/snapshots":              a.snapshot,
		"GET /v1/snapshots":                              a.listSnapshots,
		"GET /v1/snapshots/{id}":                         a.getSnapshot,
		"DELETE /v1/snapshots/{id}":                      a.deleteSnapshot,
		"POST /v1/volumes":                               a.createVolume,
		"GET /v1/volumes":                                a.listVolumes,
		"GET /v1/volumes/{id}":                           a.getVolume,
		"POST /v1/volumes/{id}/resize":                   a.resizeVolume,
		"DELETE /v1/volumes/{id}":                        a.deleteVolume,
		"GET /v1/sandboxes/{id}/files":                   a.fileCall(readFile),
		"PUT /v1/sandboxes/{id}/files":                   a.fileCall(writeFile),
		"DELETE /v1/sandboxes/{id}/files":                a.fileCall(removeFile),
		"GET /v1/sandboxes/{id}/files/list":              a.fileCall(listFiles),
		"GET /v1/sandboxes/{id}/files/stat":              a.fileCall(statFile),
		"POST /v1/sandboxes/{id}/files/mkdir":            a.mkdir,
		"POST /v1/sandboxes/{id}/files/move":             a.move,
		"GET /v1/sandboxes/{id}/files/archive":           a.fileCall(archiveGet),
		"PUT /v1/sandboxes/{id}/files/archive":           a.fileCall(archivePut),
		"GET /healthz":                                   a.health,
		"POST /v1/sandboxes/{id}/processes":              a.startProcess,
		"GET /v1/sandboxes/{id}/processes":               a.listProcesses,
		"POST /v1/sandboxes/{id}/processes/{pid}/stdin":  a.processStdin,
		"POST /v1/sandboxes/{id}/processes/{pid}/signal": a.signalProcess,
		"POST /v1/sandboxes/{id}/processes/{pid}/resize": a.resizeProcess,
		"DELETE /v1/sandboxes/{id}/processes/{pid}":      a.killProcess,
		"GET /v1/process-exits":                          a.processExits,
		"/":                                              a.noRoute,
	} {
		api.HandleFunc(pattern, a.serve(fn))
	}
	api.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		delay := a.createDelay
		a.mu.Unlock()
		time.Sleep(delay)
		a.serve(a.create)(w, r)
	})
	api.HandleFunc("POST /v1/sandboxes/{id}/exec", a.exec)
	api.HandleFunc("GET /v1/sandboxes/{id}/processes/{pid}/output", a.processOutput)
	api.HandleFunc("GET /v1/sandboxes/{id}/files/watch", a.watch)
	api.HandleFunc("POST /v1/templates", a.buildTemplate)
	api.HandleFunc("GET /v1/sandboxes/{id}/relay/{port}", a.serveRelay)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if t := r.Header.Get(agentclient.ProxyTokenHeader); t != "" {
			got = "Bearer " + t
			r.Header.Del(agentclient.ProxyTokenHeader)
		}
		if r.URL.Path != "/healthz" && got != "Bearer "+a.Token {
			writeErr(w, apiErr(401, "unauthorized", "bad agent token"))
			return
		}
		// Proxied requests skip the mux, as on the real agent: their path passes through as sent.
		if id, port, rest, ok := agentclient.PortPath(r.URL.EscapedPath()); ok {
			a.port(w, r, id, port, rest)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (a *Agent) health(*http.Request) (any, *agentclient.Error) {
	return agentclient.Health{OK: true, Version: "fake", Accel: "tcg"}, nil
}

func (a *Agent) noRoute(r *http.Request) (any, *agentclient.Error) {
	return nil, notFound("no route for %s %s", r.Method, r.URL.Path)
}

// info reports a slot for every sandbox, hibernated ones too, and memory for running ones (like
// the real agent), with limits like its defaults: half the memory per VM, 2 × the memory committed.
// doctor finds nothing: a fake host leaks no process, directory, namespace or cgroup.
func (a *Agent) doctor(*http.Request) (any, *agentclient.Error) {
	return hostapi.DoctorReport{Findings: []hostapi.DoctorFinding{}}, nil
}

func (a *Agent) info(*http.Request) (any, *agentclient.Error) {
	var committed int64
	for _, sb := range a.sandboxes {
		if sb.State == agentclient.StateRunning {
			committed += int64(sb.MemoryMiB)
		}
	}
	return agentclient.Info{HostID: a.HostID, Accel: "tcg", MemMiBTotal: a.memTotal, MemMiBFree: a.memTotal - committed,
		SlotsTotal: a.slotsTotal, SlotsUsed: int64(len(a.sandboxes)), Templates: a.templates,
		MaxVCPUs: a.maxVCPUs, MaxMemoryMiB: a.memTotal / 2, MemoryOvercommit: 2, MemMiBCommitted: committed,
		MemMiBCommitLimit: 2 * a.memTotal, MemMiBWatermark: 512,
		PoolMiBTotal: a.poolTotal, PoolMiBFree: a.poolFree()}, nil
}

// port stands in for the agent's port proxy: instead of a guest server it describes the request
// it got, so tests can check what the control plane forwarded.
func (a *Agent) port(w http.ResponseWriter, r *http.Request, id, port, rest string) {
	a.mu.Lock()
	_, ok := a.sandboxes[id]
	h := a.portHandler
	a.mu.Unlock()
	if !ok {
		writeErr(w, notFound("no such sandbox"))
		return
	}
	if h != nil {
		r.URL.Path, r.URL.RawPath, r.Host = rest, "", id
		h.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	writeJSON(w, 200, map[string]any{"method": r.Method, "port": port, "path": rest,
		"query": r.URL.RawQuery, "host": r.Host, "authorization": r.Header.Get("Authorization"), "body": string(body),
		"cookie": r.Header.Get("Cookie"), "traffic_token": r.Header.Get("X-PandaStack-Traffic-Token")})
}
