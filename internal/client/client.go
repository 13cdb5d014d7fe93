// Package client is a Go client of PandaStack's public /v1 API (shared/design/API.md). The CLI
// verbs, the benchmarks and the end-to-end tests use it. It reads PANDASTACK_API_KEY (or
// PANDASTACK_TOKEN) and PANDASTACK_BASE_URL when not given them explicitly.
package client

import (
	"bufio"
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

	"github.com/pandastack/pandastack/internal/network"
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

// Sandbox is the public sandbox object.
type Sandbox struct {
	ID        string            `json:"id"`
	Template  string            `json:"template"`
	State     string            `json:"state"`
	CreatedAt string            `json:"created_at"`
	ExpiresAt string            `json:"expires_at"`
	Metadata  map[string]string `json:"metadata"`
	Host      string            `json:"host"`
	IP        string            `json:"ip,omitempty"`
	Error     string            `json:"error,omitempty"`
	// ForkOf names the parent of a fork's child; SnapshotID the snapshot it was made from.
	ForkOf     string `json:"fork_of,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
}

// CreateRequest is the body of a create: from a template, or from a snapshot (SnapshotID; the
// template may then be left empty).
type CreateRequest struct {
	Template   string            `json:"template,omitempty"`
	SnapshotID string            `json:"snapshot_id,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Egress     *network.Egress   `json:"egress,omitempty"`
	Volumes    []VolumeMount     `json:"volumes,omitempty"`
}

// VolumeMount is a volume a create mounts in the sandbox, read-only or not.
type VolumeMount struct {
	VolumeID  string `json:"volume_id"`
	MountPath string `json:"mount_path"`
	ReadOnly  bool   `json:"read_only,omitempty"`
}

// Volume is the public volume object: a persistent disk on one host that outlives sandboxes.
type Volume struct {
	ID          string             `json:"id"`
	Name        string             `json:"name"`
	SizeMiB     int64              `json:"size_mib"`
	HostID      string             `json:"host_id"`
	CreatedAt   string             `json:"created_at"`
	Attachments []VolumeAttachment `json:"attachments"`
}

// VolumeAttachment is a sandbox that has a volume mounted.
type VolumeAttachment struct {
	SandboxID string `json:"sandbox_id"`
	MountPath string `json:"mount_path"`
	ReadOnly  bool   `json:"read_only"`
}

// Snapshot is the public snapshot object: a sandbox's memory and disk at one instant.
type Snapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	CreatedAt string `json:"created_at"`
	SizeBytes int64  `json:"size_bytes"`
}

// ExecRequest is the body of an exec.
type ExecRequest struct {
	Cmd            string            `json:"cmd,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	User           string            `json:"user,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
}

// ExecResult is a finished exec.
type ExecResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        int    `json:"exit_code"`
	TimedOut        bool   `json:"timed_out"`
	DurationMS      int64  `json:"duration_ms"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// Stat describes a file in a sandbox.
type Stat struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"`
}

// Template is a catalog template (Owner "catalog") or one the caller's team built (Owner
// "team").
type Template struct {
	Name        string            `json:"name"`
	Owner       string            `json:"owner"`
	Description string            `json:"description,omitempty"`
	VCPUs       int               `json:"vcpus"`
	MemoryMiB   int               `json:"memory_mib"`
	DiskMiB     int               `json:"disk_mib"`
	SizeBytes   int64             `json:"size_bytes,omitempty"`
	BakeMS      int64             `json:"bake_ms,omitempty"`
	Aliases     []string          `json:"aliases"`
	Metadata    map[string]string `json:"metadata"`
	Available   bool              `json:"available"`
	Baked       bool              `json:"baked"`
	CreatedAt   string            `json:"created_at,omitempty"`
	UpdatedAt   string            `json:"updated_at,omitempty"`
}

// Key is an API key record; Key holds the secret only when just created.
type Key struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Prefix    string  `json:"prefix"`
	Admin     bool    `json:"admin"`
	TeamID    string  `json:"team_id"`
	CreatedAt string  `json:"created_at"`
	RevokedAt *string `json:"revoked_at"`
	Key       string  `json:"key,omitempty"`
}

// Team is a team record.
type Team struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// Do sends a request and returns a 2xx response with its body open; other answers become
// *APIError and transport failures *ConnError.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body io.Reader, size int64, contentType, accept string) (*http.Response, error) {
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil && size >= 0 {
		req.ContentLength = size
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{BaseURL: c.BaseURL, Err: err}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ae := &APIError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var env struct {
		Error struct{ Code, Message string }
	}
	if json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
		ae.Code, ae.Message = env.Error.Code, env.Error.Message
	} else {
		ae.Code, ae.Message = "internal", strings.TrimSpace(string(b))
		if ae.Message == "" {
			ae.Message = resp.Status
		}
	}
	return nil, ae
}

// call sends JSON in (if not nil) and decodes a JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	size := int64(-1)
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, size, ct = bytes.NewReader(b), int64(len(b)), "application/json"
	}
	resp, err := c.Do(ctx, method, path, query, body, size, ct, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func sbPath(id string, sub string) string { return "/v1/sandboxes/" + url.PathEscape(id) + sub }

// Info is GET /v1/info: what the deployment enforces for every team.
type Info struct {
	Version string `json:"version"`
	Egress  struct {
		Blocked []InfoRange `json:"blocked"`
		Private []InfoRange `json:"private"`
		Open    []string    `json:"open"`
		Also    []string    `json:"also_blocked"`
	} `json:"egress"`
}

// InfoRange is a range and why it is special.
type InfoRange struct {
	Range string `json:"range"`
	Why   string `json:"why"`
}

// Info returns the deployment's rules.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	return i, c.call(ctx, "GET", "/v1/info", nil, nil, &i)
}

// CreateSandbox creates a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", "/v1/sandboxes", nil, req, &sb)
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "GET", sbPath(id, ""), nil, nil, &sb)
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
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var out struct {
		Sandboxes  []Sandbox `json:"sandboxes"`
		NextCursor *string   `json:"next_cursor"`
	}
	if err := c.call(ctx, "GET", "/v1/sandboxes", q, nil, &out); err != nil {
		return nil, "", err
	}
	next := ""
	if out.NextCursor != nil {
		next = *out.NextCursor
	}
	return out.Sandboxes, next, nil
}

// KillSandbox kills a sandbox (idempotent).
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", sbPath(id, ""), nil, nil, nil)
}

// SetTTL makes the sandbox expire ttlSeconds from now.
func (c *Client) SetTTL(ctx context.Context, id string, ttlSeconds int64) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", sbPath(id, "/ttl"), nil, map[string]int64{"ttl_seconds": ttlSeconds}, &sb)
}

// Exec runs a command and returns its buffered result.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	return r, c.call(ctx, "POST", sbPath(id, "/exec"), nil, req, &r)
}

// ExecEvent is one line of a streamed exec.
type ExecEvent struct {
	Stdout     *string `json:"stdout,omitempty"`
	Stderr     *string `json:"stderr,omitempty"`
	ExitCode   *int    `json:"exit_code,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	DurationMS int64   `json:"duration_ms,omitempty"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// ExecStream runs a command, calling onOutput for each chunk of stdout or stderr as it arrives,
// and returns the final result (Stdout and Stderr empty: they went to onOutput).
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, onOutput func(stream, data string)) (ExecResult, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, err
	}
	resp, err := c.Do(ctx, "POST", sbPath(id, "/exec"), nil, bytes.NewReader(b), int64(len(b)), "application/json", "application/x-ndjson")
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return ExecResult{}, fmt.Errorf("bad line in exec stream: %w", err)
		}
		switch {
		case ev.Stdout != nil:
			onOutput("stdout", *ev.Stdout)
		case ev.Stderr != nil:
			onOutput("stderr", *ev.Stderr)
		case ev.Error != nil:
			return ExecResult{}, &APIError{Status: 200, Code: ev.Error.Code, Message: ev.Error.Message, RequestID: resp.Header.Get("X-Request-Id")}
		case ev.ExitCode != nil:
			return ExecResult{ExitCode: *ev.ExitCode, TimedOut: ev.TimedOut, DurationMS: ev.DurationMS}, nil
		}
	}
	if err := sc.Err(); err != nil {
		return ExecResult{}, err
	}
	return ExecResult{}, errors.New("exec stream ended without an exit code")
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
	resp, err := c.Do(ctx, "PUT", sbPath(id, "/files"), url.Values{"path": {path}}, r, size, "application/octet-stream", "")
	if err != nil {
		return Stat{}, err
	}
	defer resp.Body.Close()
	var st Stat
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil && !errors.Is(err, io.EOF) {
		return Stat{}, err
	}
	return st, nil
}

// ListFiles lists a directory (depth >= 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]Stat, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out struct {
		Entries []Stat `json:"entries"`
	}
	return out.Entries, c.call(ctx, "GET", sbPath(id, "/files/list"), q, nil, &out)
}

// StatFile describes a path.
func (c *Client) StatFile(ctx context.Context, id, path string) (Stat, error) {
	var st Stat
	return st, c.call(ctx, "GET", sbPath(id, "/files/stat"), url.Values{"path": {path}}, nil, &st)
}

// Mkdir creates a directory and its parents.
func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return c.call(ctx, "POST", sbPath(id, "/files/mkdir"), nil, map[string]string{"path": path}, nil)
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
	return c.call(ctx, "POST", sbPath(id, "/files/move"), nil, map[string]string{"from": from, "to": to}, nil)
}

// Fork makes count children of a sandbox (0 means the server's default, one); each starts from
// the parent's memory and files at one instant.
func (c *Client) Fork(ctx context.Context, id string, count int) ([]Sandbox, error) {
	var in any
	if count > 0 {
		in = map[string]int{"count": count}
	}
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	return out.Sandboxes, c.call(ctx, "POST", sbPath(id, "/fork"), nil, in, &out)
}

// Hibernate saves a sandbox's memory to disk and stops its VM; any later call wakes it.
func (c *Client) Hibernate(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", sbPath(id, "/hibernate"), nil, nil, &sb)
}

// Wake restores a hibernated sandbox.
func (c *Client) Wake(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.call(ctx, "POST", sbPath(id, "/wake"), nil, nil, &sb)
}

// CreateSnapshot snapshots a sandbox (memory and disk); it keeps running.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID string) (Snapshot, error) {
	var sn Snapshot
	return sn, c.call(ctx, "POST", sbPath(sandboxID, "/snapshots"), nil, nil, &sn)
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
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var out struct {
		Snapshots  []Snapshot `json:"snapshots"`
		NextCursor *string    `json:"next_cursor"`
	}
	if err := c.call(ctx, "GET", "/v1/snapshots", q, nil, &out); err != nil {
		return nil, "", err
	}
	next := ""
	if out.NextCursor != nil {
		next = *out.NextCursor
	}
	return out.Snapshots, next, nil
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var sn Snapshot
	return sn, c.call(ctx, "GET", "/v1/snapshots/"+url.PathEscape(id), nil, nil, &sn)
}

// DeleteSnapshot deletes a snapshot; sandboxes made from it keep working.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(id), nil, nil, nil)
}

// CreateVolume makes a volume of sizeMiB (name may be empty).
func (c *Client) CreateVolume(ctx context.Context, sizeMiB int64, name string) (Volume, error) {
	in := map[string]any{"size_mib": sizeMiB}
	if name != "" {
		in["name"] = name
	}
	var v Volume
	return v, c.call(ctx, "POST", "/v1/volumes", nil, in, &v)
}

// ListVolumes returns the team's volumes, newest first.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out struct {
		Volumes []Volume `json:"volumes"`
	}
	return out.Volumes, c.call(ctx, "GET", "/v1/volumes", nil, nil, &out)
}

// GetVolume returns one volume.
func (c *Client) GetVolume(ctx context.Context, id string) (Volume, error) {
	var v Volume
	return v, c.call(ctx, "GET", "/v1/volumes/"+url.PathEscape(id), nil, nil, &v)
}

// ResizeVolume grows a volume that no sandbox has mounted.
func (c *Client) ResizeVolume(ctx context.Context, id string, sizeMiB int64) (Volume, error) {
	var v Volume
	return v, c.call(ctx, "POST", "/v1/volumes/"+url.PathEscape(id)+"/resize", nil, map[string]int64{"size_mib": sizeMiB}, &v)
}

// DeleteVolume deletes a volume that no sandbox has mounted, and its data.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/volumes/"+url.PathEscape(id), nil, nil, nil)
}

// Templates lists the catalog and the team's own templates.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	var out struct {
		Templates []Template `json:"templates"`
	}
	return out.Templates, c.call(ctx, "GET", "/v1/templates", nil, nil, &out)
}

// Template returns one template: the team's own by that name, else the catalog's (aliases
// resolve).
func (c *Client) Template(ctx context.Context, name string) (Template, error) {
	var t Template
	return t, c.call(ctx, "GET", "/v1/templates/"+url.PathEscape(name), nil, nil, &t)
}

// BuildTemplate builds a team template from spec (YAML or JSON, files[].src already read),
// calling onProgress (may be nil) with each line of the build log as it comes. A build that
// fails is an *APIError (code build_failed for a failing step or ready check).
func (c *Client) BuildTemplate(ctx context.Context, spec []byte, onProgress func(line string)) (Template, error) {
	resp, err := c.Do(ctx, "POST", "/v1/templates", nil, bytes.NewReader(spec), int64(len(spec)), "application/yaml", "application/x-ndjson")
	if err != nil {
		return Template{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var ev struct {
			Progress *string   `json:"progress"`
			Template *Template `json:"template"`
			Error    *struct{ Code, Message string }
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return Template{}, fmt.Errorf("bad line in build stream: %w", err)
		}
		switch {
		case ev.Error != nil:
			return Template{}, &APIError{Status: 200, Code: ev.Error.Code, Message: ev.Error.Message, RequestID: resp.Header.Get("X-Request-Id")}
		case ev.Template != nil:
			return *ev.Template, nil
		case ev.Progress != nil && onProgress != nil:
			onProgress(*ev.Progress)
		}
	}
	if err := sc.Err(); err != nil {
		return Template{}, err
	}
	return Template{}, errors.New("build stream ended without a result")
}

// DeleteTemplate deletes one of the team's templates (not while sandboxes or snapshots use it).
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", "/v1/templates/"+url.PathEscape(name), nil, nil, nil)
}

// CreateKey makes a key for the caller's team.
func (c *Client) CreateKey(ctx context.Context, name string, admin bool) (Key, error) {
	var k Key
	return k, c.call(ctx, "POST", "/v1/keys", nil, map[string]any{"name": name, "admin": admin}, &k)
}

// ListKeys lists the caller's team's keys.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out struct {
		Keys []Key `json:"keys"`
	}
	return out.Keys, c.call(ctx, "GET", "/v1/keys", nil, nil, &out)
}

// RevokeKey revokes a key of the caller's team.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// CreateTeam makes a team and its first key (admin keys only).
func (c *Client) CreateTeam(ctx context.Context, name string) (Team, Key, error) {
	var out struct {
		Team Team `json:"team"`
		Key  Key  `json:"key"`
	}
	err := c.call(ctx, "POST", "/v1/teams", nil, map[string]string{"name": name}, &out)
	return out.Team, out.Key, err
}
