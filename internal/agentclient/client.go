// Package agentclient is the control plane's HTTP client for a host agent's API
// (docs/hostagent-api.md). JSON calls decode into the types below; exec streams and file bodies
// are handed back as open response bodies so callers can pass them through without buffering.
package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/httpjson"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// ProxyTokenHeader carries the agent token on proxied requests (hostapi.ProxyTokenHeader).
const ProxyTokenHeader = hostapi.ProxyTokenHeader

// Client talks to one host agent. The zero value is not usable: use New.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// sharedTransport keeps connections to agents alive across calls and clients; no overall timeout
// because exec streams and file transfers may run long (callers bound calls with contexts). Its
// idle connections are bounded per host and in all by MaxIdleAgentConns: a fleet of 1,000 hosts,
// each called now and then, must not evict one host's connection to make room for another's
// (every create would then dial its host afresh).
var sharedTransport = &http.Transport{
	Proxy:                 nil, // agents are reached directly, never through an HTTP proxy
	DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:          MaxIdleAgentConns,
	MaxIdleConnsPerHost:   64,
	IdleConnTimeout:       90 * time.Second,
	ExpectContinueTimeout: time.Second,
}

// MaxIdleAgentConns bounds the idle connections kept to all agents together: room for a few to
// each host of a fleet of several thousand (an idle connection costs a few KiB on each side).
const MaxIdleAgentConns = 16384

// New returns a client for the agent at baseURL with bearer token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Transport: sharedTransport}}
}

// Error is an error answer from the agent, in the public API's shape.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("host agent: %s (%d): %s", e.Code, e.Status, e.Message)
}

// Def is e as an internal/errdefs error: the kind its code names (else its status; a stream's
// error has no status), with its code and message kept. Callers that go by kind use it.
func (e *Error) Def() *errdefs.Error { return errdefs.FromHTTP(e.Status, e.Code, e.Message) }

// Kind is e's internal/errdefs kind.
func (e *Error) Kind() errdefs.Kind { return e.Def().Kind }

// Unreachable wraps a transport failure (the agent did not answer at all).
type Unreachable struct{ Err error }

func (e *Unreachable) Error() string { return "host agent unreachable: " + e.Err.Error() }
func (e *Unreachable) Unwrap() error { return e.Err }

// The API's bodies are internal/wire/hostapi's; these names keep the control plane's callers
// (and the fake agent) as they were.
type (
	Health              = hostapi.Health
	Template            = hostapi.Template
	Info                = hostapi.Info
	Sandbox             = hostapi.Sandbox
	CreateRequest       = hostapi.CreateRequest
	VolumeMount         = hostapi.VolumeMount
	VolumeAttachment    = hostapi.VolumeAttachment
	Volume              = hostapi.Volume
	CreateVolumeRequest = hostapi.CreateVolumeRequest
	ResizeVolumeRequest = hostapi.ResizeVolumeRequest
	Snapshot            = hostapi.Snapshot
	SnapshotVolume      = hostapi.SnapshotVolume
	ExecRequest         = hostapi.ExecRequest
	ExecResult          = hostapi.ExecResult
	Stat                = hostapi.Stat
	StartProcessRequest = hostapi.StartProcessRequest
	Process             = hostapi.Process
	SandboxMetrics      = hostapi.SandboxMetrics
	StdinRequest        = hostapi.StdinRequest
)

// Agent-side sandbox states (internal/sandboxstate's; a killed sandbox is gone from the agent).
const (
	StateRunning    = string(sandboxstate.Running)
	StateHibernated = string(sandboxstate.Hibernated)
	StateError      = string(sandboxstate.Error)
)

// Limits of the API (docs/hostagent-api.md).
const (
	MaxForkCount         = hostapi.MaxForkCount
	MaxVolumesPerSandbox = hostapi.MaxVolumesPerSandbox
)

// Raw sends a request and returns the response of a 2xx answer with its body open (the caller
// closes it). A non-2xx answer is read and returned as *Error; a transport failure as
// *Unreachable. contentLength < 0 means unknown.
func (c *Client) Raw(ctx context.Context, method, path string, query url.Values, body io.Reader, contentLength int64, hdr http.Header) (*http.Response, error) {
	return c.endpoint().Do(ctx, method, path, query, body, contentLength, hdr)
}

// endpoint is the agent as the shared request plumbing sees it.
func (c *Client) endpoint() httpjson.Endpoint {
	return httpjson.Endpoint{BaseURL: c.BaseURL, Token: c.Token, HTTP: c.HTTP, Fail: decodeError,
		Unreachable: func(err error) error { return &Unreachable{err} }}
}

// decodeError is a non-2xx answer: the error envelope, else its text under a code for its status.
func decodeError(resp *http.Response, b []byte) error {
	var env hostapi.ErrorBody
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		return &Error{Status: resp.StatusCode, Code: env.Error.Code, Message: env.Error.Message}
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = resp.Status
	}
	return &Error{Status: resp.StatusCode, Code: codeFor(resp.StatusCode), Message: msg}
}

func codeFor(status int) string {
	switch status {
	case 400:
		return "invalid_request"
	case 401:
		return "unauthorized"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 413:
		return "payload_too_large"
	case 503:
		return "capacity"
	case 504:
		return "timeout"
	case 507:
		return "no_space"
	}
	return "internal"
}

// call does a JSON request and decodes a JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	return c.callQ(ctx, method, path, nil, in, out)
}

// callQ is call with a query.
func (c *Client) callQ(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.endpoint().Call(ctx, method, path, query, in, out, func(err error) error {
		return fmt.Errorf("host agent: bad answer to %s %s: %w", method, path, err)
	})
}

// Health calls GET /healthz.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, "GET", "/healthz", nil, &h)
}

// Info calls GET /v1/info.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	return i, c.call(ctx, "GET", "/v1/info", nil, &i)
}

// Doctor calls GET /v1/doctor, or POST /v1/doctor/repair when repair: the host's leftovers.
func (c *Client) Doctor(ctx context.Context, repair bool) (hostapi.DoctorReport, error) {
	var out hostapi.DoctorReport
	if repair {
		return out, c.call(ctx, "POST", "/v1/doctor/repair", nil, &out)
	}
	return out, c.call(ctx, "GET", "/v1/doctor", nil, &out)
}

// Templates calls GET /v1/templates.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var out hostapi.TemplateList
	return out.Templates, c.call(ctx, "GET", "/v1/templates", nil, &out)
}

// MaxBuildLine bounds one line of a build stream (progress lines are short; the final template
// object carries env and metadata).
const MaxBuildLine = 1 << 20

// BuildTemplate calls POST /v1/templates with spec (JSON) and reads the NDJSON answer: each
// {"progress": line} goes to onProgress (may be nil) as it arrives, and the stream ends with
// {"template": …} or {"error": …}. An error before the stream (an invalid spec, a catalog name)
// is an *Error with its HTTP status; an error in the stream is an *Error with Status 0 (the
// build started and failed, e.g. code build_failed).
func (c *Client) BuildTemplate(ctx context.Context, spec any, onProgress func(string)) (Template, error) {
	body, size, hdr, err := httpjson.JSON(spec)
	if err != nil {
		return Template{}, err
	}
	resp, err := c.Raw(ctx, "POST", "/v1/templates", nil, body, size, hdr)
	if err != nil {
		return Template{}, err
	}
	defer resp.Body.Close()
	var tpl Template
	ended, err := httpjson.Lines(resp.Body, MaxBuildLine, func(line []byte) (bool, error) {
		var ev hostapi.BuildEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return false, fmt.Errorf("host agent: bad build stream line: %w", err)
		}
		switch {
		case ev.Error != nil:
			if ev.Error.Code == "" {
				ev.Error.Code = "build_failed"
			}
			return false, &Error{Code: ev.Error.Code, Message: ev.Error.Message}
		case ev.Template != nil:
			tpl = *ev.Template
			return true, nil
		case ev.Progress != nil && onProgress != nil:
			onProgress(*ev.Progress)
		}
		return false, nil
	})
	broke := (*httpjson.ReadError)(nil)
	switch {
	case ended:
		return tpl, nil
	case err == nil:
		return Template{}, &Unreachable{errors.New("build stream ended without a result")}
	case !errors.As(err, &broke):
		return Template{}, err // the stream's own error line, or a bad line
	case ctx.Err() != nil:
		return Template{}, ctx.Err()
	}
	return Template{}, &Unreachable{fmt.Errorf("build stream broke: %w", broke.Err)}
}

// DeleteTemplate calls DELETE /v1/templates/{name}.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", "/v1/templates/"+url.PathEscape(name), nil, nil)
}

// CreateSandbox calls POST /v1/sandboxes.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", "/v1/sandboxes", req, &sb)
}

// GetSandbox calls GET /v1/sandboxes/{id}.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id), nil, &sb)
}

// ListSandboxes calls GET /v1/sandboxes.
func (c *Client) ListSandboxes(ctx context.Context) ([]Sandbox, error) {
	var out hostapi.SandboxList
	return out.Sandboxes, c.call(ctx, "GET", "/v1/sandboxes", nil, &out)
}

// KillSandbox calls DELETE /v1/sandboxes/{id} (idempotent on the agent too).
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

// SandboxMetrics calls GET /v1/sandboxes/{id}/metrics: a running sandbox's resource figures.
func (c *Client) SandboxMetrics(ctx context.Context, id string) (SandboxMetrics, error) {
	var out SandboxMetrics
	return out, c.call(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id)+"/metrics", nil, &out)
}

// Fork calls POST /v1/sandboxes/{id}/fork: count children of a running (or hibernated) sandbox,
// all or none.
func (c *Client) Fork(ctx context.Context, id string, count int) ([]Sandbox, error) {
	var out hostapi.SandboxList
	err := c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/fork", hostapi.ForkRequest{Count: &count}, &out)
	return out.Sandboxes, err
}

// Hibernate calls POST /v1/sandboxes/{id}/hibernate.
func (c *Client) Hibernate(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/hibernate", nil, &sb)
}

// Wake calls POST /v1/sandboxes/{id}/wake.
func (c *Client) Wake(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/wake", nil, &sb)
}

// CreateSnapshot calls POST /v1/sandboxes/{id}/snapshots.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID string) (Snapshot, error) {
	var sn Snapshot
	return sn, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", nil, &sn)
}

// CreateForkSnapshot calls POST /v1/sandboxes/{id}/snapshots?for=fork: a snapshot a fork onto
// another host restores at once and then deletes, taken without the guest's sync (an agent that
// does not know the parameter syncs: slower, as correct).
func (c *Client) CreateForkSnapshot(ctx context.Context, sandboxID string) (Snapshot, error) {
	var sn Snapshot
	return sn, c.callQ(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(sandboxID)+"/snapshots", url.Values{"for": {"fork"}}, nil, &sn)
}

// ListSnapshots calls GET /v1/snapshots.
func (c *Client) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	var out hostapi.SnapshotList
	return out.Snapshots, c.call(ctx, "GET", "/v1/snapshots", nil, &out)
}

// GetSnapshot calls GET /v1/snapshots/{id}.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var sn Snapshot
	return sn, c.call(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id), nil, &sn)
}

// DeleteSnapshot calls DELETE /v1/snapshots/{id}; sandboxes restored from it keep working.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// CreateVolume calls POST /v1/volumes.
func (c *Client) CreateVolume(ctx context.Context, req CreateVolumeRequest) (Volume, error) {
	var v Volume
	return v, c.call(ctx, "POST", "/v1/volumes", req, &v)
}

// ListVolumes calls GET /v1/volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out hostapi.VolumeList
	return out.Volumes, c.call(ctx, "GET", "/v1/volumes", nil, &out)
}

// GetVolume calls GET /v1/volumes/{id}.
func (c *Client) GetVolume(ctx context.Context, id string) (Volume, error) {
	var v Volume
	return v, c.call(ctx, "GET", "/v1/volumes/"+url.PathEscape(id), nil, &v)
}

// ResizeVolume calls POST /v1/volumes/{id}/resize (grow only; refused while attached).
func (c *Client) ResizeVolume(ctx context.Context, id string, sizeMiB int64) (Volume, error) {
	var v Volume
	return v, c.call(ctx, "POST", "/v1/volumes/"+url.PathEscape(id)+"/resize", ResizeVolumeRequest{SizeMiB: sizeMiB}, &v)
}

// DeleteVolume calls DELETE /v1/volumes/{id} (refused while attached).
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/volumes/"+url.PathEscape(id), nil, nil)
}

// Exec runs a command and waits for its buffered result.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	return r, c.call(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/exec", req, &r)
}

// ExecStream runs a command with `Accept: application/x-ndjson` and returns the open NDJSON body.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest) (io.ReadCloser, error) {
	body, size, hdr, err := httpjson.JSON(req)
	if err != nil {
		return nil, err
	}
	hdr.Set("Accept", "application/x-ndjson")
	resp, err := c.Raw(ctx, "POST", "/v1/sandboxes/"+url.PathEscape(id)+"/exec", nil, body, size, hdr)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func filesPath(id, sub string) string { return "/v1/sandboxes/" + url.PathEscape(id) + "/files" + sub }

// Files are a sandbox's file calls made as one guest account (FilesAs).
type Files struct {
	c    *Client
	user string // "": the guest's default account
}

// FilesAs is the file calls made as user ("" the guest's default account).
func (c *Client) FilesAs(user string) Files { return Files{c: c, user: user} }

// query is path's query, with the account when one is named.
func (f Files) query(path string) url.Values {
	q := url.Values{"path": {path}}
	if f.user != "" {
		q.Set("user", f.user)
	}
	return q
}

// Read opens a file's bytes; the caller closes the body. Content-Length is on the response.
func (f Files) Read(ctx context.Context, id, path string) (*http.Response, error) {
	return f.c.Raw(ctx, "GET", filesPath(id, ""), f.query(path), nil, -1, nil)
}

// Write streams body into a file (creating parents) and returns its stat.
func (f Files) Write(ctx context.Context, id, path string, body io.Reader, size int64) (Stat, error) {
	var st Stat
	return st, f.c.endpoint().Upload(ctx, "PUT", filesPath(id, ""), f.query(path), body, size, &st)
}

// List lists a directory, depth levels deep (0: the agent's default, 1).
func (f Files) List(ctx context.Context, id, path string, depth int) ([]Stat, error) {
	q := f.query(path)
	if depth > 0 {
		q.Set("depth", fmt.Sprint(depth))
	}
	var out hostapi.StatList
	return out.Entries, f.c.callQ(ctx, "GET", filesPath(id, "/list"), q, nil, &out)
}

// Stat stats a path.
func (f Files) Stat(ctx context.Context, id, path string) (Stat, error) {
	var st Stat
	return st, f.c.callQ(ctx, "GET", filesPath(id, "/stat"), f.query(path), nil, &st)
}

// Mkdir creates a directory (and parents).
func (f Files) Mkdir(ctx context.Context, id, path string) error {
	return f.c.call(ctx, "POST", filesPath(id, "/mkdir"), hostapi.MkdirRequest{Path: path, User: f.user}, nil)
}

// Remove deletes a path.
func (f Files) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := f.query(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return f.c.callQ(ctx, "DELETE", filesPath(id, ""), q, nil, nil)
}

// Move renames a path.
func (f Files) Move(ctx context.Context, id, from, to string) error {
	return f.c.call(ctx, "POST", filesPath(id, "/move"), hostapi.MoveRequest{From: from, To: to, User: f.user}, nil)
}

// Watch streams a directory's changes (NDJSON hostapi.WatchEvent lines, "ready" first) until ctx
// ends; the caller closes the body.
func (f Files) Watch(ctx context.Context, id, path string, recursive bool) (io.ReadCloser, error) {
	q := f.query(path)
	if recursive {
		q.Set("recursive", "1")
	}
	resp, err := f.c.Raw(ctx, "GET", filesPath(id, "/watch"), q, nil, -1, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ArchiveGet streams a directory as a tar (format "" or "tar") or a tar.gz ("tar.gz").
func (f Files) ArchiveGet(ctx context.Context, id, path, format string) (io.ReadCloser, error) {
	q := f.query(path)
	if format != "" {
		q.Set("format", format)
	}
	resp, err := f.c.Raw(ctx, "GET", filesPath(id, "/archive"), q, nil, -1, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ArchivePut unpacks a tar or tar.gz into a directory (made if missing).
func (f Files) ArchivePut(ctx context.Context, id, path string, body io.Reader, size int64) (hostapi.ArchiveResult, error) {
	var out hostapi.ArchiveResult
	return out, f.c.endpoint().Upload(ctx, "PUT", filesPath(id, "/archive"), f.query(path), body, size, &out)
}

// ReadFile, WriteFile, ListFiles, StatFile, Mkdir, Remove and Move are the file calls as the
// guest's default account.
func (c *Client) ReadFile(ctx context.Context, id, path string) (*http.Response, error) {
	return c.FilesAs("").Read(ctx, id, path)
}

func (c *Client) WriteFile(ctx context.Context, id, path string, body io.Reader, size int64) (Stat, error) {
	return c.FilesAs("").Write(ctx, id, path, body, size)
}

func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]Stat, error) {
	return c.FilesAs("").List(ctx, id, path, depth)
}

func (c *Client) StatFile(ctx context.Context, id, path string) (Stat, error) {
	return c.FilesAs("").Stat(ctx, id, path)
}

func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return c.FilesAs("").Mkdir(ctx, id, path)
}

func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	return c.FilesAs("").Remove(ctx, id, path, recursive)
}

func (c *Client) Move(ctx context.Context, id, from, to string) error {
	return c.FilesAs("").Move(ctx, id, from, to)
}

func processPath(id string, pid int, sub string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id) + "/processes"
	if pid > 0 {
		p += "/" + strconv.Itoa(pid)
	}
	return p + sub
}

// StartProcess calls POST /v1/sandboxes/{id}/processes and returns the pid.
func (c *Client) StartProcess(ctx context.Context, id string, req StartProcessRequest) (int, error) {
	var out hostapi.ProcessStarted
	return out.Pid, c.call(ctx, "POST", processPath(id, 0, ""), req, &out)
}

// ListProcesses calls GET /v1/sandboxes/{id}/processes.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]Process, error) {
	var out hostapi.ProcessList
	return out.Processes, c.call(ctx, "GET", processPath(id, 0, ""), nil, &out)
}

// ProcessExits returns the processes that ended on the host's sandboxes after cursor after
// (GET /v1/process-exits).
func (c *Client) ProcessExits(ctx context.Context, after int64) (hostapi.ProcessExits, error) {
	var out hostapi.ProcessExits
	return out, c.callQ(ctx, "GET", "/v1/process-exits", url.Values{"after": {strconv.FormatInt(after, 10)}}, nil, &out)
}

// ProcessOutput opens GET …/processes/{pid}/output (NDJSON hostapi.ProcessEvent lines); the
// caller closes the body.
func (c *Client) ProcessOutput(ctx context.Context, id string, pid int, offset int64, follow bool) (io.ReadCloser, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.Raw(ctx, "GET", processPath(id, pid, "/output"), q, nil, -1, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteStdin calls POST …/processes/{pid}/stdin.
func (c *Client) WriteStdin(ctx context.Context, id string, pid int, req StdinRequest) error {
	return c.call(ctx, "POST", processPath(id, pid, "/stdin"), req, nil)
}

// SignalProcess calls POST …/processes/{pid}/signal.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, signal string) error {
	return c.call(ctx, "POST", processPath(id, pid, "/signal"), hostapi.SignalRequest{Signal: signal}, nil)
}

// ResizeProcess calls POST …/processes/{pid}/resize: a PTY process's terminal size.
func (c *Client) ResizeProcess(ctx context.Context, id string, pid, cols, rows int) error {
	return c.call(ctx, "POST", processPath(id, pid, "/resize"), hostapi.TermSize{Cols: cols, Rows: rows}, nil)
}

// KillProcess calls DELETE …/processes/{pid}: the process after its tree was killed.
func (c *Client) KillProcess(ctx context.Context, id string, pid int) (Process, error) {
	var out Process
	return out, c.call(ctx, "DELETE", processPath(id, pid, ""), nil, &out)
}
