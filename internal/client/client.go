// Package client is a Go client of PandaStack's public /v1 API (docs/openapi.yaml). The CLI
// verbs, the benchmarks and the end-to-end tests use it. It reads PANDASTACK_API_KEY (or
// PANDASTACK_TOKEN) and PANDASTACK_BASE_URL when not given them explicitly.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/httpjson"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// DefaultBaseURL is used when neither an argument nor PANDASTACK_BASE_URL names a server.
const DefaultBaseURL = "https://api.pandastack.ai"

// Client calls one PandaStack server.
type Client struct {
	BaseURL string
	APIKey  string
	HTTP    *http.Client
}

// New returns a client; an empty baseURL or apiKey falls back to the environment, then (for the
// URL) to DefaultBaseURL. An explicit argument beats the environment.
func New(baseURL, apiKey string) *Client {
	if baseURL == "" {
		baseURL = os.Getenv("PANDASTACK_BASE_URL")
	}
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	if apiKey == "" {
		apiKey = os.Getenv("PANDASTACK_API_KEY")
	}
	if apiKey == "" {
		apiKey = os.Getenv("PANDASTACK_TOKEN")
	}
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), APIKey: apiKey, HTTP: &http.Client{}}
}

// APIError is an error answer of the API.
type APIError struct {
	Status    int
	Code      string
	Message   string
	RequestID string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d, request %s)", e.Message, e.Code, e.Status, e.RequestID)
}

// ConnError is a failure to reach the server at all.
type ConnError struct {
	BaseURL string
	Err     error
}

func (e *ConnError) Error() string {
	hint := ""
	if e.BaseURL == DefaultBaseURL && os.Getenv("PANDASTACK_BASE_URL") == "" {
		hint = "; for a local server set PANDASTACK_BASE_URL to the URL `pandastack up` printed"
	}
	return fmt.Sprintf("cannot reach PandaStack at %s: %v%s", e.BaseURL, e.Err, hint)
}

func (e *ConnError) Unwrap() error { return e.Err }

// The API's objects, as internal/wire/v1 defines them.
type (
	Sandbox             = v1.Sandbox
	CreateRequest       = v1.CreateRequest
	VolumeMount         = v1.VolumeMount
	Volume              = v1.Volume
	VolumeAttachment    = v1.VolumeAttachment
	Snapshot            = v1.Snapshot
	ExecRequest         = v1.ExecRequest
	ExecResult          = v1.ExecResult
	ExecEvent           = v1.ExecEvent
	Process             = v1.Process
	SandboxMetrics      = v1.SandboxMetrics
	ProcessEvent        = v1.ProcessEvent
	StartProcessRequest = v1.StartProcessRequest
	TermSize            = v1.TermSize
	Stat                = v1.Stat
	Template            = v1.Template
	Key                 = v1.Key
	Team                = v1.Team
	Info                = v1.Info
	InfoRange           = v1.Range
)

// endpoint is the server as the shared request plumbing sees it.
func (c *Client) endpoint() httpjson.Endpoint {
	return httpjson.Endpoint{BaseURL: c.BaseURL, Token: c.APIKey, HTTP: c.HTTP, Fail: apiError,
		Unreachable: func(err error) error { return &ConnError{BaseURL: c.BaseURL, Err: err} }}
}

// apiError is a non-2xx answer: the API's error envelope, else its text.
func apiError(resp *http.Response, b []byte) error {
	ae := &APIError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var env v1.ErrorBody
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		ae.Code, ae.Message = env.Error.Code, env.Error.Message
	} else {
		ae.Code, ae.Message = "internal", strings.TrimSpace(string(b))
		if ae.Message == "" {
			ae.Message = resp.Status
		}
	}
	return ae
}

// Do sends a request and returns a 2xx response with its body open; other answers become
// *APIError and transport failures *ConnError.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body io.Reader, size int64, contentType, accept string) (*http.Response, error) {
	hdr := http.Header{}
	if contentType != "" {
		hdr.Set("Content-Type", contentType)
	}
	if accept != "" {
		hdr.Set("Accept", accept)
	}
	return c.endpoint().Do(ctx, method, path, query, body, size, hdr)
}

// call sends JSON in (if not nil) and decodes a JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.endpoint().Call(ctx, method, path, query, in, out, nil)
}

// Seconds is a timeout for ExecRequest.TimeoutSeconds.
func Seconds(s float64) *float64 { return &s }

// send is call for an answer of type T.
func send[T any](ctx context.Context, c *Client, method, path string, query url.Values, in any) (T, error) {
	var out T
	return out, c.call(ctx, method, path, query, in, &out)
}

func sbPath(id string, sub string) string { return "/v1/sandboxes/" + url.PathEscape(id) + sub }

// objPath is the path of one object of a collection (/v1/snapshots, /v1/volumes…).
func objPath(collection, id string) string { return collection + "/" + url.PathEscape(id) }

// pageQuery adds a list's limit and cursor to q.
func pageQuery(q url.Values, limit int, cursor string) url.Values {
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// next is a page's next_cursor, "" at the end.
func next(cursor *string) string {
	if cursor == nil {
		return ""
	}
	return *cursor
}

// Info returns the deployment's rules.
func (c *Client) Info(ctx context.Context) (Info, error) {
	return send[Info](ctx, c, "GET", "/v1/info", nil, nil)
}

// Usage is the caller's team's use against its quotas.
func (c *Client) Usage(ctx context.Context) (v1.Usage, error) {
	return send[v1.Usage](ctx, c, "GET", "/v1/usage", nil, nil)
}

// SetQuota sets a team's own limits (admin keys); it returns the team's use against them.
func (c *Client) SetQuota(ctx context.Context, teamID string, q v1.QuotaRequest) (v1.Usage, error) {
	return send[v1.Usage](ctx, c, "PUT", objPath("/v1/teams", teamID)+"/quota", nil, q)
}

// CreateSandbox creates a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (Sandbox, error) {
	return send[Sandbox](ctx, c, "POST", "/v1/sandboxes", nil, req)
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	return send[Sandbox](ctx, c, "GET", sbPath(id, ""), nil, nil)
}

// SandboxMetrics returns a running sandbox's resource use now (a hibernated one: a 409 error).
func (c *Client) SandboxMetrics(ctx context.Context, id string) (SandboxMetrics, error) {
	return send[SandboxMetrics](ctx, c, "GET", sbPath(id, "/metrics"), nil, nil)
}

// ListOptions filters a list.
type ListOptions struct {
	State    string // comma-separated states, or "all"
	Metadata map[string]string
	Limit    int
	Cursor   string
}

// ListSandboxes returns one page and the next page's cursor ("" at the end).
func (c *Client) ListSandboxes(ctx context.Context, o ListOptions) ([]Sandbox, string, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	for k, v := range o.Metadata {
		q.Set("metadata."+k, v)
	}
	p, err := send[v1.SandboxPage](ctx, c, "GET", "/v1/sandboxes", pageQuery(q, o.Limit, o.Cursor), nil)
	return p.Sandboxes, next(p.NextCursor), err
}

// KillSandbox kills a sandbox (idempotent).
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sbPath(id, ""), nil, nil, nil)
}

// SetTTL makes the sandbox expire ttlSeconds from now.
func (c *Client) SetTTL(ctx context.Context, id string, ttlSeconds int64) (Sandbox, error) {
	return send[Sandbox](ctx, c, "POST", sbPath(id, "/ttl"), nil, v1.TTLRequest{TTLSeconds: ttlSeconds})
}

// Exec runs a command and returns its buffered result.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	return send[ExecResult](ctx, c, "POST", sbPath(id, "/exec"), nil, req)
}

// stream sends body and reads the NDJSON answer line by line (blank lines skipped, lines up to
// maxLine bytes) into each, until each says it is done; a stream that ends first is the error
// unfinished.
func (c *Client) stream(ctx context.Context, path string, body []byte, contentType, unfinished string, maxLine int, each func(line []byte, rid string) (done bool, err error)) error {
	return c.streamRequest(ctx, "POST", path, nil, bytes.NewReader(body), int64(len(body)), contentType, unfinished, maxLine, each)
}

// streamRequest is stream for any method, query and body (nil: none).
func (c *Client) streamRequest(ctx context.Context, method, path string, query url.Values, body io.Reader, size int64, contentType, unfinished string, maxLine int, each func(line []byte, rid string) (done bool, err error)) error {
	resp, err := c.Do(ctx, method, path, query, body, size, contentType, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rid := resp.Header.Get("X-Request-Id")
	ended, err := httpjson.Lines(resp.Body, maxLine, func(line []byte) (bool, error) { return each(line, rid) })
	if ended || err != nil {
		return err
	}
	return errors.New(unfinished)
}

// streamError is the error line that ends a stream.
func streamError(e *v1.ErrorDetail, rid string) error {
	return &APIError{Status: 200, Code: e.Code, Message: e.Message, RequestID: rid}
}

// ExecStream runs a command, calling onOutput for each chunk of stdout or stderr as it arrives,
// and returns the final result (Stdout and Stderr empty: they went to onOutput).
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, err
	}
	var res ExecResult
	err = c.stream(ctx, sbPath(id, "/exec"), b, "application/json", "exec stream ended without an exit code", 64<<20, func(line []byte, rid string) (bool, error) {
		var ev ExecEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return false, fmt.Errorf("bad line in exec stream: %w", err)
		}
		switch {
		case ev.Stdout != nil:
			onOutput("stdout", *ev.Stdout)
		case ev.Stderr != nil:
			onOutput("stderr", *ev.Stderr)
		case ev.Error != nil:
			return true, streamError(ev.Error, rid)
		case ev.ExitCode != nil:
			res = ExecResult{ExitCode: *ev.ExitCode, TimedOut: ev.TimedOut, DurationMS: ev.DurationMS}
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return ExecResult{}, err
	}
	return res, nil
}

// Events follows GET /v1/events, calling each for every event (pings included) until each
// returns true or an error, ctx ends (nil then), or the stream ends (its key revoked: an error).
func (c *Client) Events(ctx context.Context, each func(ev v1.Event) (done bool, err error)) error {
	err := c.streamRequest(ctx, "GET", "/v1/events", nil, nil, -1, "", "the events stream ended (key revoked or expired?)", 1<<20,
		func(line []byte, _ string) (bool, error) {
			var ev v1.Event
			if err := json.Unmarshal(line, &ev); err != nil {
				return false, fmt.Errorf("bad line in the events stream: %w", err)
			}
			return each(ev)
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ReadFile opens a file of the sandbox; the caller closes it.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, int64, error) {
	resp, err := c.Do(ctx, "GET", sbPath(id, "/files"), url.Values{"path": {path}}, nil, -1, "", "")
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteFile streams r into path (creating parents); size < 0 sends it chunked.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, size int64) (Stat, error) {
	var st Stat
	return st, c.endpoint().Upload(ctx, "PUT", sbPath(id, "/files"), url.Values{"path": {path}}, r, size, &st)
}

// ListFiles lists a directory (depth >= 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]Stat, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	out, err := send[v1.Entries](ctx, c, "GET", sbPath(id, "/files/list"), q, nil)
	return out.Entries, err
}

// StatFile describes a path.
func (c *Client) StatFile(ctx context.Context, id, path string) (Stat, error) {
	return send[Stat](ctx, c, "GET", sbPath(id, "/files/stat"), url.Values{"path": {path}}, nil)
}

// Mkdir creates a directory and its parents.
func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return c.call(ctx, "POST", sbPath(id, "/files/mkdir"), nil, v1.PathRequest{Path: path}, nil)
}

// Remove deletes a path (recursive for a non-empty directory).
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.call(ctx, "DELETE", sbPath(id, "/files"), q, nil, nil)
}

// Move renames a path.
func (c *Client) Move(ctx context.Context, id, from, to string) error {
	return c.call(ctx, "POST", sbPath(id, "/files/move"), nil, v1.MoveRequest{From: from, To: to}, nil)
}

// Fork makes count children of a sandbox (0 means the server's default, one); each starts from
// the parent's memory and files at one instant.
func (c *Client) Fork(ctx context.Context, id string, count int) ([]Sandbox, error) {
	return c.ForkTo(ctx, id, count, "")
}

// ForkTo is Fork with the children on host (admin keys; "": the parent's host). Another host than
// the parent's needs a blob store the hosts share.
func (c *Client) ForkTo(ctx context.Context, id string, count int, host string) ([]Sandbox, error) {
	var in any
	if count > 0 || host != "" {
		in = v1.ForkRequest{Count: max(count, 1), Host: host}
	}
	out, err := send[v1.Sandboxes](ctx, c, "POST", sbPath(id, "/fork"), nil, in)
	return out.Sandboxes, err
}

// Hibernate saves a sandbox's memory to disk and stops its VM; any later call wakes it.
func (c *Client) Hibernate(ctx context.Context, id string) (Sandbox, error) {
	return send[Sandbox](ctx, c, "POST", sbPath(id, "/hibernate"), nil, nil)
}

// Wake restores a hibernated sandbox.
func (c *Client) Wake(ctx context.Context, id string) (Sandbox, error) {
	return send[Sandbox](ctx, c, "POST", sbPath(id, "/wake"), nil, nil)
}

// CreateSnapshot snapshots a sandbox (memory and disk); it keeps running.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID string) (Snapshot, error) {
	return send[Snapshot](ctx, c, "POST", sbPath(sandboxID, "/snapshots"), nil, nil)
}

// SnapshotListOptions filters a snapshot list.
type SnapshotListOptions struct {
	SandboxID string
	Limit     int
	Cursor    string
}

// ListSnapshots returns one page of the team's snapshots, newest first, and the next page's
// cursor ("" at the end).
func (c *Client) ListSnapshots(ctx context.Context, o SnapshotListOptions) ([]Snapshot, string, error) {
	q := url.Values{}
	if o.SandboxID != "" {
		q.Set("sandbox_id", o.SandboxID)
	}
	p, err := send[v1.SnapshotPage](ctx, c, "GET", "/v1/snapshots", pageQuery(q, o.Limit, o.Cursor), nil)
	return p.Snapshots, next(p.NextCursor), err
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return send[Snapshot](ctx, c, "GET", objPath("/v1/snapshots", id), nil, nil)
}

// DeleteSnapshot deletes a snapshot; sandboxes made from it keep working.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/snapshots", id), nil, nil, nil)
}

// CreateVolume makes a volume of sizeMiB (name may be empty).
func (c *Client) CreateVolume(ctx context.Context, sizeMiB int64, name string) (Volume, error) {
	return send[Volume](ctx, c, "POST", "/v1/volumes", nil, v1.CreateVolumeRequest{Name: name, SizeMiB: sizeMiB})
}

// ListHosts returns the host agents with their live sandboxes (admin keys).
func (c *Client) ListHosts(ctx context.Context) ([]v1.Host, error) {
	out, err := send[v1.Hosts](ctx, c, "GET", "/v1/hosts", nil, nil)
	return out.Hosts, err
}

// DrainHost stops placements on a host and hibernates its sandboxes so each wakes on another host
// on its next call (admin keys).
func (c *Client) DrainHost(ctx context.Context, id string) (v1.DrainReport, error) {
	return send[v1.DrainReport](ctx, c, "POST", "/v1/hosts/"+url.PathEscape(id)+"/drain", nil, nil)
}

// HostDoctor reports what crashes left on a host, or removes it when repair (admin keys).
func (c *Client) HostDoctor(ctx context.Context, id string, repair bool) (v1.DoctorReport, error) {
	if repair {
		return send[v1.DoctorReport](ctx, c, "POST", "/v1/hosts/"+url.PathEscape(id)+"/doctor/repair", nil, nil)
	}
	return send[v1.DoctorReport](ctx, c, "GET", "/v1/hosts/"+url.PathEscape(id)+"/doctor", nil, nil)
}

// UndrainHost ends a host's drain: sandboxes are placed there again (admin keys).
func (c *Client) UndrainHost(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/hosts/"+url.PathEscape(id)+"/drain", nil, nil, nil)
}

// ListVolumes returns the team's volumes, newest first.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	out, err := send[v1.Volumes](ctx, c, "GET", "/v1/volumes", nil, nil)
	return out.Volumes, err
}

// GetVolume returns one volume.
func (c *Client) GetVolume(ctx context.Context, id string) (Volume, error) {
	return send[Volume](ctx, c, "GET", objPath("/v1/volumes", id), nil, nil)
}

// ResizeVolume grows a volume that no sandbox has mounted.
func (c *Client) ResizeVolume(ctx context.Context, id string, sizeMiB int64) (Volume, error) {
	return send[Volume](ctx, c, "POST", objPath("/v1/volumes", id)+"/resize", nil, v1.ResizeVolumeRequest{SizeMiB: sizeMiB})
}

// DeleteVolume deletes a volume that no sandbox has mounted, and its data.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/volumes", id), nil, nil, nil)
}

// Templates lists the catalog and the team's own templates.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	out, err := send[v1.Templates](ctx, c, "GET", "/v1/templates", nil, nil)
	return out.Templates, err
}

// Template returns one template: the team's own by that name, else the catalog's (aliases
// resolve).
func (c *Client) Template(ctx context.Context, name string) (Template, error) {
	return send[Template](ctx, c, "GET", objPath("/v1/templates", name), nil, nil)
}

// BuildTemplate builds a team template from spec (YAML or JSON, files[].src already read),
// calling onProgress (may be nil) with each line of the build log as it comes. A build that
// fails is an *APIError (code build_failed for a failing step or ready check).
func (c *Client) BuildTemplate(ctx context.Context, spec []byte, onProgress func(line string)) (Template, error) {
	var t Template
	err := c.stream(ctx, "/v1/templates", spec, "application/yaml", "build stream ended without a result", 16<<20, func(line []byte, rid string) (bool, error) {
		var ev v1.BuildEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return false, fmt.Errorf("bad line in build stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return true, streamError(ev.Error, rid)
		case ev.Template != nil:
			t = *ev.Template
			return true, nil
		case ev.Progress != nil && onProgress != nil:
			onProgress(*ev.Progress)
		}
		return false, nil
	})
	if err != nil {
		return Template{}, err
	}
	return t, nil
}

// DeleteTemplate deletes one of the team's templates (not while sandboxes or snapshots use it).
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", objPath("/v1/templates", name), nil, nil, nil)
}

// CreateKey makes a key for the caller's team.
func (c *Client) CreateKey(ctx context.Context, name string, admin bool) (Key, error) {
	return c.CreateKeyWith(ctx, v1.CreateKeyRequest{Admin: admin, Name: name})
}

// CreateKeyWith creates a key of the caller's team as req says (scopes, expiry).
func (c *Client) CreateKeyWith(ctx context.Context, req v1.CreateKeyRequest) (Key, error) {
	return send[Key](ctx, c, "POST", "/v1/keys", nil, req)
}

// ListKeys lists the caller's team's keys.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	out, err := send[v1.Keys](ctx, c, "GET", "/v1/keys", nil, nil)
	return out.Keys, err
}

// RevokeKey revokes a key of the caller's team.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/keys", id), nil, nil, nil)
}

// CreateTeam makes a team and its first key (admin keys only).
func (c *Client) CreateTeam(ctx context.Context, name string) (Team, Key, error) {
	out, err := send[v1.NewTeam](ctx, c, "POST", "/v1/teams", nil, v1.CreateTeamRequest{Name: name})
	return out.Team, out.Key, err
}

// StartProcess starts a background process and returns its pid (docs/processes.md).
func (c *Client) StartProcess(ctx context.Context, id string, req StartProcessRequest) (int, error) {
	p, err := send[v1.ProcessStarted](ctx, c, "POST", sbPath(id, "/processes"), nil, req)
	return p.Pid, err
}

// ListProcesses lists the sandbox's background processes, running and recently exited.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]Process, error) {
	p, err := send[v1.Processes](ctx, c, "GET", sbPath(id, "/processes"), nil, nil)
	return p.Processes, err
}

func procPath(id string, pid int, sub string) string {
	return sbPath(id, "/processes/"+strconv.Itoa(pid)+sub)
}

// ProcessOutput reads a process's output from offset, calling onOutput for each chunk (stream
// "stdout" or "stderr", its offset), and returns the stream's end line: the exit (ExitCode set),
// or, not following, Running. Resume a dropped stream from the last chunk's Next.
func (c *Client) ProcessOutput(ctx context.Context, id string, pid int, offset int64, follow bool, onOutput func(ev ProcessEvent)) (ProcessEvent, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if follow {
		q.Set("follow", "1")
	}
	var end ProcessEvent
	err := c.streamRequest(ctx, "GET", procPath(id, pid, "/output"), q, nil, -1, "", "process output ended without an end line", 8<<20,
		func(line []byte, rid string) (bool, error) {
			var ev ProcessEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return false, fmt.Errorf("bad line in process output: %w", err)
			}
			switch {
			case ev.Error != nil:
				return true, streamError(ev.Error, rid)
			case ev.Stdout != nil || ev.Stderr != nil:
				onOutput(ev)
				return false, nil
			}
			end = ev
			return true, nil
		})
	return end, err
}

// WriteStdin writes data to a process's stdin (at most 1 MiB a call), closing it after if eof.
func (c *Client) WriteStdin(ctx context.Context, id string, pid int, data string, eof bool) error {
	return c.call(ctx, "POST", procPath(id, pid, "/stdin"), nil, v1.StdinRequest{Data: data, EOF: eof}, nil)
}

// SignalProcess sends a signal (TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT) to a
// process's group.
func (c *Client) SignalProcess(ctx context.Context, id string, pid int, signal string) error {
	return c.call(ctx, "POST", procPath(id, pid, "/signal"), nil, v1.SignalRequest{Signal: signal}, nil)
}

// ResizeProcess sets a PTY process's terminal size.
func (c *Client) ResizeProcess(ctx context.Context, id string, pid, cols, rows int) error {
	return c.call(ctx, "POST", procPath(id, pid, "/resize"), nil, v1.TermSize{Cols: cols, Rows: rows}, nil)
}

// KillProcess kills a process's whole tree and returns it after.
func (c *Client) KillProcess(ctx context.Context, id string, pid int) (Process, error) {
	return send[Process](ctx, c, "DELETE", procPath(id, pid, ""), nil, nil)
}
