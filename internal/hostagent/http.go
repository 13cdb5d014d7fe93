package hostagent

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// deleted serves a DELETE of the object named by the path value key: 204, or the error.
func deleted(key string, del func(string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := del(r.PathValue(key)); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// decoded serves a request whose body is the JSON of a T; a body that does not decode is answered
// as the error.
func decoded[T any](serve func(w http.ResponseWriter, r *http.Request, req T)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req T
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		serve(w, r, req)
	}
}

// maxJSONBody bounds every JSON request body.
const maxJSONBody = 1 << 20

// Handler serves the host agent API (docs/hostagent-api.md).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.Health{OK: true, Version: Version, Accel: a.rt.Accel()})
	})
	mux.HandleFunc("GET /v1/info", a.handleInfo)
	mux.HandleFunc("GET /v1/doctor", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, a.Doctor(false)) })
	mux.HandleFunc("POST /v1/doctor/repair", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, a.Doctor(true)) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		a.sandboxes.WriteMetrics(w)
	})
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.TemplateList{Templates: a.templates.List()})
	})
	mux.HandleFunc("POST /v1/templates/{name}/bake", a.handleBake)
	mux.HandleFunc("POST /v1/templates", a.handleBuild)
	mux.HandleFunc("DELETE /v1/templates/{name}", deleted("name", a.templates.Delete))
	mux.HandleFunc("POST /v1/sandboxes", a.handleCreate)
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.SandboxList{Sandboxes: a.sandboxes.List()})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Get(r.PathValue("id")))
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", deleted("id", a.sandboxes.Kill))
	// Not busy: reading the figures is not use (idle hibernation goes on), nor does it wake.
	mux.HandleFunc("GET /v1/sandboxes/{id}/metrics", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Metrics(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", a.busy(a.handleExec))
	mux.HandleFunc("GET /v1/sandboxes/{id}/relay/{port}", a.handleRelay)
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		switch purpose := r.URL.Query().Get("for"); purpose {
		case "fork": // a cross-host fork's: no guest sync
			answer(w, http.StatusCreated)(a.sandboxes.SnapshotForFork(r.Context(), r.PathValue("id")))
		case "":
			answer(w, http.StatusCreated)(a.sandboxes.SnapshotSandbox(r.Context(), r.PathValue("id")))
		default:
			answer(w, http.StatusCreated)(hostapi.Snapshot{}, errdefs.Invalidf("for=%.40q: the only purpose a snapshot takes is fork", purpose))
		}
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", a.handleFork)
	mux.HandleFunc("POST /v1/sandboxes/{id}/hibernate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Hibernate(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/wake", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Wake(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/volumes", decoded(func(w http.ResponseWriter, r *http.Request, req hostapi.CreateVolumeRequest) {
		answer(w, http.StatusCreated)(a.volumes.Create(r.Context(), req.ID, req.SizeMiB))
	}))
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.VolumeList{Volumes: a.volumes.List()})
	})
	mux.HandleFunc("GET /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.volumes.Get(r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/volumes/{id}/resize", decoded(func(w http.ResponseWriter, r *http.Request, req hostapi.ResizeVolumeRequest) {
		answer(w, 200)(a.volumes.Resize(r.PathValue("id"), req.SizeMiB))
	}))
	mux.HandleFunc("DELETE /v1/volumes/{id}", deleted("id", a.volumes.Delete))
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.SnapshotList{Snapshots: a.snapshots.List()})
	})
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.snapshots.Get(r.PathValue("id")))
	})
	mux.HandleFunc("DELETE /v1/snapshots/{id}", deleted("id", a.snapshots.Delete))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", a.busy(a.handleReadFile))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", a.busy(a.handleWriteFile))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", a.busy(a.handleRemove))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", a.busy(a.handleList))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", a.busy(a.handleStat))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", a.busy(decoded(a.handleMkdir)))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/move", a.busy(decoded(a.handleMove)))
	a.processRoutes(mux)
	a.fileTreeRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFoundf("no route for %s %s", r.Method, r.URL.Path))
	})
	return a.auth(a.ports(mux))
}

// busy wraps a handler of /v1/sandboxes/{id}/… so the sandbox counts as in use meanwhile.
func (a *Agent) busy(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer a.sandboxes.InUse(r.PathValue("id"))()
		h(w, r)
	}
}

// ports sends proxied requests (/v1/sandboxes/{id}/ports/{port}/...) to the sandbox before the
// mux sees them: the mux cleans paths and would answer "//etc" or "/a/../b" with a redirect to
// the internal route instead of passing the application's path through as sent.
func (a *Agent) ports(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, rest, ok := agentclient.PortPath(r.URL.EscapedPath()); ok {
			a.handleProxy(w, r, id, port, rest)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// Version is the agent's version string (set by the binary).
var Version = "dev"

func (a *Agent) auth(next http.Handler) http.Handler {
	want := []byte("Bearer " + a.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if t := r.Header.Get(agentclient.ProxyTokenHeader); t != "" {
			got = "Bearer " + t
			r.Header.Del(agentclient.ProxyTokenHeader)
		}
		if a.cfg.Token != "" && r.URL.Path != "/healthz" &&
			subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			writeError(w, errdefs.New(errdefs.Unauthorized, "missing or wrong agent token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) handleInfo(w http.ResponseWriter, r *http.Request) {
	sp := a.disk.Space()
	committed := a.sandboxes.Committed()
	limit := a.sandboxes.CommitLimitMiB()
	writeJSON(w, 200, hostapi.Info{
		HostID: a.hostID, Accel: a.rt.Accel(), MemMiBTotal: int64(a.cfg.HostMemoryMiB), MemMiBFree: int64(a.sandboxes.MemAvailableMiB()),
		SlotsTotal: int64(a.sandboxes.SlotsTotal()), SlotsUsed: int64(len(a.sandboxes.List())), Templates: a.templates.List(),
		MaxVCPUs: int64(a.cfg.MaxVCPUs), MaxMemoryMiB: int64(a.cfg.MaxMemoryMiB), MemoryOvercommit: a.cfg.MemoryOvercommit,
		MemMiBCommitted: int64(committed), MemMiBCommitLimit: int64(limit), MemMiBWatermark: int64(a.cfg.MemoryWatermarkMiB),
		PoolMiBTotal: sp.TotalMiB, PoolMiBFree: sp.FreeMiB,
	})
}

func (a *Agent) handleBake(w http.ResponseWriter, r *http.Request) {
	streamBuild(w, func(progress func(string)) (*bake.Template, error) {
		return a.templates.Ensure(r.Context(), r.PathValue("name"), progress)
	})
}

// streamBuild answers a bake or a build: its progress lines as NDJSON, then the template or the
// error (a status can no longer change once the stream started).
func streamBuild(w http.ResponseWriter, run func(progress func(string)) (*bake.Template, error)) {
	nd := newNDJSON(w)
	info, err := run(func(line string) { nd.send(hostapi.BuildEvent{Progress: &line}) })
	if err != nil {
		nd.send(errorBody(err))
		return
	}
	nd.send(hostapi.BuildEvent{Template: &info.Template})
}

// handleBuild is POST /v1/templates: the body is a spec (JSON); the answer streams the build log
// as NDJSON {"progress": line} events and ends with {"template": …} or {"error": …}.
func (a *Agent) handleBuild(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 2*template.MaxSpecBytes))
	if err != nil {
		writeError(w, errdefs.Invalidf("spec: %v", err))
		return
	}
	spec, err := template.Parse(data)
	if err != nil {
		writeError(w, errdefs.Invalidf("%v", err))
		return
	}
	if err := a.templates.CheckBuild(spec); err != nil { // refused before the stream starts: a plain status
		writeError(w, err)
		return
	}
	streamBuild(w, func(progress func(string)) (*bake.Template, error) {
		return a.templates.Build(r.Context(), spec, progress)
	})
}

// answer writes v with status, or the error.
func answer(w http.ResponseWriter, status int) func(any, error) {
	return func(v any, err error) {
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, status, v)
	}
}

func (a *Agent) handleFork(w http.ResponseWriter, r *http.Request) {
	var body hostapi.ForkRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &body); err != nil {
			writeError(w, err)
			return
		}
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	children, err := a.sandboxes.Fork(r.Context(), r.PathValue("id"), count)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, hostapi.SandboxList{Sandboxes: children})
}

func (a *Agent) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req hostapi.CreateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	info, err := a.sandboxes.Create(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.New(errdefs.TooLarge, "request body is larger than %d bytes", maxJSONBody)
		}
		return errdefs.Invalidf("request body: %v", err)
	}
	if dec.More() {
		return errdefs.Invalidf("request body: more than one JSON value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// errorBody is err as an answer's body (or a stream's last line).
func errorBody(err error) hostapi.ErrorBody {
	e := apiError(err)
	return hostapi.ErrorBody{Error: hostapi.ErrorDetail{Code: e.WireCode(), Message: e.Message}}
}

// writeError answers err with its kind's status and its wire code.
func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, apiError(err).Kind.Status(), errorBody(err))
}

// ndjson writes one JSON value per line and flushes each, for streaming answers.
type ndjson struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	started bool
}

func newNDJSON(w http.ResponseWriter) *ndjson { return &ndjson{w: w} }

func (n *ndjson) send(v any) {
	b, _ := json.Marshal(v)
	n.write(append(b, '\n'))
}

// begin sends the answer's headers now (a stream that may stay quiet a while: its client learns
// it was accepted).
func (n *ndjson) begin() { n.write(nil) }

func (n *ndjson) write(line []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(200)
		n.started = true
	}
	n.w.Write(line)
	if f, ok := n.w.(http.Flusher); ok {
		f.Flush()
	}
}
