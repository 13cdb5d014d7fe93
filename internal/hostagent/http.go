package hostagent

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// maxJSONBody bounds every JSON request body.
const maxJSONBody = 1 << 20

// Handler serves the host agent API (docs/hostagent-api.md).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.Health{OK: true, Version: Version, Accel: a.rt.Accel()})
	})
	mux.HandleFunc("GET /v1/info", a.handleInfo)
	mux.HandleFunc("GET /v1/templates", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.TemplateList{Templates: a.templates.List()})
	})
	mux.HandleFunc("POST /v1/templates/{name}/bake", a.handleBake)
	mux.HandleFunc("POST /v1/templates", a.handleBuild)
	mux.HandleFunc("DELETE /v1/templates/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.templates.Delete(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes", a.handleCreate)
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.SandboxList{Sandboxes: a.sandboxes.List()})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Get(r.PathValue("id")))
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.sandboxes.Kill(r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", a.busy(a.handleExec))
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusCreated)(a.sandboxes.SnapshotSandbox(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", a.handleFork)
	mux.HandleFunc("POST /v1/sandboxes/{id}/hibernate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Hibernate(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/wake", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.sandboxes.Wake(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.CreateVolumeRequest
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		answer(w, http.StatusCreated)(a.volumes.Create(r.Context(), req.ID, req.SizeMiB))
	})
	mux.HandleFunc("GET /v1/volumes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.VolumeList{Volumes: a.volumes.List()})
	})
	mux.HandleFunc("GET /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.volumes.Get(r.PathValue("id")))
	})
	mux.HandleFunc("POST /v1/volumes/{id}/resize", func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.ResizeVolumeRequest
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		answer(w, 200)(a.volumes.Resize(r.PathValue("id"), req.SizeMiB))
	})
	mux.HandleFunc("DELETE /v1/volumes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.volumes.Delete(r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, hostapi.SnapshotList{Snapshots: a.snapshots.List()})
	})
	mux.HandleFunc("GET /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200)(a.snapshots.Get(r.PathValue("id")))
	})
	mux.HandleFunc("DELETE /v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.snapshots.Delete(r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", a.busy(a.handleReadFile))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", a.busy(a.handleWriteFile))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", a.busy(a.handleRemove))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", a.busy(a.handleList))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", a.busy(a.handleStat))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", a.busy(a.handleMkdir))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/move", a.busy(a.handleMove))
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
		SlotsTotal: int64(maxSlots(limit)), SlotsUsed: int64(len(a.sandboxes.List())), Templates: a.templates.List(),
		MaxVCPUs: int64(a.cfg.MaxVCPUs), MaxMemoryMiB: int64(a.cfg.MaxMemoryMiB), MemoryOvercommit: a.cfg.MemoryOvercommit,
		MemMiBCommitted: int64(committed), MemMiBCommitLimit: int64(limit), MemMiBWatermark: int64(a.cfg.MemoryWatermarkMiB),
		PoolMiBTotal: sp.TotalMiB, PoolMiBFree: sp.FreeMiB,
	})
}

// maxSlots bounds how many sandboxes this host counts: its commit limit over the smallest guest
// a template may have. Placement goes by committed memory; slots only cap the count.
func maxSlots(commitLimitMiB int) int {
	return max(1, commitLimitMiB/template.MinMemoryMiB)
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

func (a *Agent) handleExec(w http.ResponseWriter, r *http.Request) {
	var req hostapi.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		a.streamExec(w, r, id, req)
		return
	}
	stdout := &cappedBuffer{max: a.cfg.ExecOutputLimit}
	stderr := &cappedBuffer{max: a.cfg.ExecOutputLimit}
	res, err := a.sandboxes.Exec(r.Context(), id, req, stdout, stderr)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, hostapi.ExecResult{
		Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: res.ExitCode, TimedOut: res.TimedOut,
		DurationMS: res.DurationMs, Signal: res.Signal, StdoutTruncated: stdout.truncated, StderrTruncated: stderr.truncated,
	})
}

// streamExec answers with NDJSON lines as output is produced. Errors after the first byte can no
// longer change the status code, so they travel as an {"error": ...} line.
func (a *Agent) streamExec(w http.ResponseWriter, r *http.Request, id string, req hostapi.ExecRequest) {
	if err := a.sandboxes.WithGuest(r.Context(), id, func(*guest.Client) error { return nil }); err != nil {
		writeError(w, err)
		return
	}
	nd := newNDJSON(w)
	stdout := &utf8Lines{nd: nd, chunk: func(s string) hostapi.ExecChunk { return hostapi.ExecChunk{Stdout: s} }}
	stderr := &utf8Lines{nd: nd, chunk: func(s string) hostapi.ExecChunk { return hostapi.ExecChunk{Stderr: s} }}
	res, err := a.sandboxes.Exec(r.Context(), id, req, stdout, stderr)
	stdout.flush()
	stderr.flush()
	if err != nil {
		nd.send(errorBody(err))
		return
	}
	nd.send(hostapi.ExecEnd{ExitCode: res.ExitCode, TimedOut: res.TimedOut, DurationMS: res.DurationMs, Signal: res.Signal})
}

// fileUser returns the `user` query parameter (files run with that user's permissions).
func fileUser(r *http.Request) string { return r.URL.Query().Get("user") }

func filePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", errdefs.Invalidf("path is required")
	}
	return p, nil
}

func (a *Agent) handleReadFile(w http.ResponseWriter, r *http.Request) {
	path, err := filePath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var body io.ReadCloser
	var fi guest.FileInfo
	if err := a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) (err error) {
		body, fi, err = c.ReadFile(r.Context(), path, fileUser(r))
		return err
	}); err != nil {
		writeError(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.WriteHeader(200)
	io.Copy(w, body)
}

func (a *Agent) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	path, err := filePath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var mode os.FileMode
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			writeError(w, errdefs.Invalidf("mode %q: give octal permission bits such as 0644", m))
			return
		}
		mode = os.FileMode(v)
	}
	if r.ContentLength > a.cfg.MaxUpload {
		writeError(w, errdefs.New(errdefs.TooLarge, "file is larger than the %d-byte limit", a.cfg.MaxUpload))
		return
	}
	var fi guest.FileInfo
	if err := a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) (err error) {
		fi, err = c.WriteFile(r.Context(), path, fileUser(r), mode, http.MaxBytesReader(w, r.Body, a.cfg.MaxUpload))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = errdefs.New(errdefs.TooLarge, "file is larger than the %d-byte limit", a.cfg.MaxUpload)
		}
		return err
	}); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, wireStat(fi))
}

// wireStat is the API's view of a guest file.
func wireStat(fi guest.FileInfo) hostapi.Stat {
	return hostapi.Stat{Name: fi.Name, Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, MTime: hostapi.Time(fi.Mtime), Target: fi.Target}
}

func (a *Agent) handleStat(w http.ResponseWriter, r *http.Request) {
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		fi, err := c.Stat(ctx, path, user)
		return wireStat(fi), err
	})
}

func (a *Agent) handleList(w http.ResponseWriter, r *http.Request) {
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		v, err := strconv.Atoi(d)
		if err != nil || v < 1 || v > 10 {
			writeError(w, errdefs.Invalidf("depth must be 1-10"))
			return
		}
		depth = v
	}
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		entries, err := c.List(ctx, path, user, depth)
		out := hostapi.StatList{Entries: make([]hostapi.Stat, len(entries))}
		for i, fi := range entries {
			out.Entries[i] = wireStat(fi)
		}
		return out, err
	})
}

func (a *Agent) handleRemove(w http.ResponseWriter, r *http.Request) {
	recursive := r.URL.Query().Get("recursive") == "true"
	a.fileCall(w, r, func(ctx context.Context, c *guest.Client, path, user string) (any, error) {
		return nil, c.Remove(ctx, path, user, recursive)
	})
}

func (a *Agent) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var body hostapi.MkdirRequest
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		if body.Path == "" {
			return nil, errdefs.Invalidf("path is required")
		}
		return nil, c.Mkdir(ctx, body.Path, body.User)
	})
}

func (a *Agent) handleMove(w http.ResponseWriter, r *http.Request) {
	var body hostapi.MoveRequest
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		if body.From == "" || body.To == "" {
			return nil, errdefs.Invalidf("from and to are required")
		}
		return nil, c.Move(ctx, body.From, body.To, body.User)
	})
}

// fileCall runs a call that takes ?path= and ?user=; a nil result answers 204.
func (a *Agent) fileCall(w http.ResponseWriter, r *http.Request, call func(context.Context, *guest.Client, string, string) (any, error)) {
	path, err := filePath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		return call(ctx, c, path, fileUser(r))
	})
}

func (a *Agent) guestCall(w http.ResponseWriter, r *http.Request, call func(context.Context, *guest.Client) (any, error)) {
	var out any
	if err := a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) (err error) {
		out, err = call(r.Context(), c)
		return err
	}); err != nil {
		writeError(w, err)
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, 200, out)
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
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(200)
		n.started = true
	}
	b, _ := json.Marshal(v)
	n.w.Write(append(b, '\n'))
	if f, ok := n.w.(http.Flusher); ok {
		f.Flush()
	}
}

// utf8Lines turns an output stream into NDJSON events, holding back an incomplete UTF-8 sequence
// at a chunk's end so a character split across reads is not mangled.
type utf8Lines struct {
	nd    *ndjson
	chunk func(string) hostapi.ExecChunk // the line for some output
	hold  []byte
}

func (u *utf8Lines) Write(p []byte) (int, error) {
	buf := append(u.hold, p...)
	cut := len(buf)
	for i := 1; i <= 3 && i <= len(buf); i++ { // find a trailing partial rune
		if utf8.RuneStart(buf[len(buf)-i]) {
			if !utf8.FullRune(buf[len(buf)-i:]) {
				cut = len(buf) - i
			}
			break
		}
	}
	if cut > 0 {
		u.nd.send(u.chunk(string(buf[:cut])))
	}
	u.hold = append([]byte(nil), buf[cut:]...)
	return len(p), nil
}

func (u *utf8Lines) flush() {
	if len(u.hold) > 0 {
		u.nd.send(u.chunk(string(u.hold)))
		u.hold = nil
	}
}

// cappedBuffer keeps the first max bytes and notes that more were dropped, so a command printing
// without end cannot exhaust the agent's memory and the caller is told the output is cut.
type cappedBuffer struct {
	bytes.Buffer
	max       int64
	truncated bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.max - int64(c.Len())
	if int64(len(p)) > room {
		c.truncated = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
