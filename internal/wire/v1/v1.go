// Package v1 is the public /v1 API's wire contract, defined once (docs/openapi.yaml describes
// it; internal/api's tests hold the two together): the server (internal/api) encodes these
// types, the Go client (internal/client) and the CLI decode them. The SDKs spell the same JSON by hand, so a field's name, its omitempty and the order of
// fields here are the contract: change them only with the API.
//
// Answers are plain types. Requests a client sends are here too, with omitempty so a zero field
// is left out; where the server must tell a zero from an absent field ("ttl_seconds": 0 is an
// error, no ttl_seconds the default) it decodes a presence-aware form of its own (pointers),
// unless the type here already has one (ExecRequest).
package v1

import (
	"time"

	"github.com/pandastack/pandastack/internal/network"
)

// Timestamp renders t as RFC 3339 UTC with milliseconds, the API's one time format ("" for the
// zero time).
func Timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ErrorBody is every non-2xx answer: {"error": {"code", "message"}}. An NDJSON stream (exec,
// template build) ends with the same object as its last line when it fails after it started.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

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
	// Error is the reason of a sandbox in state error or lost.
	Error string `json:"error,omitempty"`
	// ForkOf names the parent of a fork's child; SnapshotID the snapshot a sandbox was made from.
	ForkOf     string `json:"fork_of,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// PublicPorts: its port proxy needs no token. Otherwise requests carry TrafficToken, which
	// only the create answer shows (a fork's children keep their parent's).
	PublicPorts  bool   `json:"public_ports"`
	TrafficToken string `json:"traffic_token,omitempty"`
}

// SandboxMetrics is GET /v1/sandboxes/{id}/metrics: a running sandbox's resource use now, as its
// guest sees it (CPU, memory, root disk) and as its host sees its VMM (host_*). A hibernated
// sandbox has none (409; the call does not wake it).
type SandboxMetrics struct {
	At    string `json:"at"` // RFC 3339, when the figures were read
	VCPUs int    `json:"vcpus"`
	// CPUUsedPct is the busy share of the guest's CPUs (0-100, all together) since the previous
	// call's figures when they are at most a minute old, else over a quarter of a second.
	CPUUsedPct     float64 `json:"cpu_used_pct"`
	MemTotalBytes  int64   `json:"mem_total_bytes"`
	MemUsedBytes   int64   `json:"mem_used_bytes"`  // total less what the guest counts available
	MemCacheBytes  int64   `json:"mem_cache_bytes"` // page cache and buffers
	DiskTotalBytes int64   `json:"disk_total_bytes"`
	DiskUsedBytes  int64   `json:"disk_used_bytes"` // the root filesystem's
	// HostCPUSeconds is the CPU time the VMM has used on its host since it started (emulation
	// included), HostMemBytes the memory it holds there (its cgroup's, else its resident set).
	HostCPUSeconds float64 `json:"host_cpu_seconds"`
	HostMemBytes   int64   `json:"host_mem_bytes"`
}

// A request to a private port carries the sandbox's traffic token in this header, or in this
// query parameter (the port proxy then sets a cookie of the same name for the page's own requests).
const (
	TrafficTokenHeader = "X-PandaStack-Traffic-Token"
	TrafficTokenParam  = "pandastack_traffic_token"
)

// SandboxPage is GET /v1/sandboxes: one page, and the cursor of the next (null at the end).
type SandboxPage struct {
	NextCursor *string   `json:"next_cursor"`
	Sandboxes  []Sandbox `json:"sandboxes"`
}

// Event is one NDJSON line of GET /v1/events: "ready" once the stream is watching, then
// "sandbox" with a sandbox's record whenever its state, host or error changes (created,
// hibernated, woken, killed, lost), "deployment" with an app deployment's record whenever its
// state, error or release changes (queued, building, deploying, live, failed, superseded: a
// build ending is no call), "process.exited" with a background process's exit, "change" for every
// successful call that changed one of the team's resources (any key's: a volume made, a key
// revoked, a function deployed), and "ping" when nothing happened for a while.
type Event struct {
	Type       string       `json:"type"`
	At         string       `json:"at"`
	Sandbox    *Sandbox     `json:"sandbox,omitempty"`
	Deployment *Deployment  `json:"deployment,omitempty"`
	Change     *Change      `json:"change,omitempty"`
	Process    *ProcessExit `json:"process,omitempty"` // "process.exited"
	// Database is a "database.backed_up", "database.suspended" or "database.restarted" event's
	// database.
	Database *DatabaseEvent `json:"database,omitempty"`
}

// DatabaseEvent is what a database event says: the database (id, name), and for
// "database.backed_up" the backup and what took it (creation, schedule, request), for
// "database.suspended" how long it had had no client, for "database.restarted" why its VM ended
// (vm_failed, vm_killed).
type DatabaseEvent struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	BackupID    string `json:"backup_id,omitempty"`
	Trigger     string `json:"trigger,omitempty"`
	IdleSeconds int64  `json:"idle_seconds,omitempty"`
}

// Change is a call that changed something: its method and route pattern, the resource it named
// or made, the answer's status. A "change" event says only this (not who: an AuditEntry, which
// embeds it, also names the key and the caller's address).
type Change struct {
	Method     string `json:"method"`
	Route      string `json:"route"`
	ResourceID string `json:"resource_id"`
	Status     int    `json:"status"`
}

// TerminalTicket is POST /v1/sandboxes/{id}/pty/ticket's answer: a single-use credential for one
// terminal WebSocket (GET …/pty?ticket=…), for clients that cannot set an Authorization header on
// a WebSocket (browsers). It expires at ExpiresAt (30 s) and is never the key itself.
type TerminalTicket struct {
	Ticket    string `json:"ticket"`
	ExpiresAt string `json:"expires_at"`
}

// Sandboxes is a fork's answer: its children.
type Sandboxes struct {
	Sandboxes []Sandbox `json:"sandboxes"`
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
	// PublicPorts nil: the server's default.
	PublicPorts *bool `json:"public_ports,omitempty"`
	// Host pins the sandbox to one host (admin keys only).
	Host string `json:"host,omitempty"`
}

// VolumeMount is a volume a create mounts in the sandbox, read-only or not.
type VolumeMount struct {
	VolumeID  string `json:"volume_id"`
	MountPath string `json:"mount_path"`
	ReadOnly  bool   `json:"read_only,omitempty"`
}

// TTLRequest is the body of POST /v1/sandboxes/{id}/ttl.
type TTLRequest struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// ForkRequest is the body of a fork (no body: one child).
type ForkRequest struct {
	Count int    `json:"count"`
	Host  string `json:"host,omitempty"` // admin keys: the host the children run on
}

// Host is a host agent as GET /v1/hosts (admin keys) shows it.
type Host struct {
	ID  string `json:"id"`
	URL string `json:"url"` // where the control plane calls it
	// State is up or down (silent past the heartbeat timeout: its sandboxes are lost).
	State     string `json:"state"`
	Accel     string `json:"accel"`     // kvm or tcg
	Sandboxes int64  `json:"sandboxes"` // running and hibernated ones the store places there
	// Room: VM slots and guest memory, as the host last reported them.
	FreeSlots   int64 `json:"free_slots"`
	SlotsTotal  int64 `json:"slots_total"`
	MemMiBTotal int64 `json:"mem_mib_total"`
	MemMiBFree  int64 `json:"mem_mib_free"`
	// Templates it can run; Baked, those ready to restore at once.
	Templates     []string `json:"templates"`
	Baked         []string `json:"baked"`
	LastHeartbeat string   `json:"last_heartbeat"`
	// Draining: an operator drains it (POST /v1/hosts/{id}/drain): nothing new goes there.
	Draining bool `json:"draining"`
}

// DoctorReport is GET /v1/hosts/{id}/doctor (and POST …/doctor/repair): what a crash left on the
// host that nothing owns — the host's own findings (VMM processes, directories, network
// namespaces, cgroups, half-made snapshots) and the control plane's (sandboxes the host runs that
// the store does not know).
type DoctorReport struct {
	Host     string          `json:"host"`
	Findings []DoctorFinding `json:"findings"`
}

// DoctorFinding is one leftover; Repaired when the repair removed it, Error when it could not.
type DoctorFinding struct {
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
	Detail   string `json:"detail"`
	Repaired bool   `json:"repaired"`
	Error    string `json:"error,omitempty"`
}

// DrainReport is POST /v1/hosts/{id}/drain: the host takes nothing new, and its sandboxes were
// hibernated so that each wakes on another host on its next call (moved), except those kept.
type DrainReport struct {
	Host  string        `json:"host"`
	Moved int           `json:"moved"`
	Kept  []KeptSandbox `json:"kept"`
}

// KeptSandbox is a sandbox a drain left on its host, and why.
type KeptSandbox struct {
	SandboxID string `json:"sandbox_id"`
	Reason    string `json:"reason"`
}

// Hosts is GET /v1/hosts.
type Hosts struct {
	Hosts []Host `json:"hosts"`
}

// ExecRequest is the body of an exec: cmd (a shell command line) or argv. TimeoutSeconds is nil
// for the host's default (a given 0 is refused).
type ExecRequest struct {
	Cmd            string            `json:"cmd,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	TimeoutSeconds *float64          `json:"timeout_seconds,omitempty"`
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

// ExecEvent is one line of a streamed exec (Accept: application/x-ndjson): output as it comes,
// then the exit (or an error).
type ExecEvent struct {
	Stdout     *string      `json:"stdout,omitempty"`
	Stderr     *string      `json:"stderr,omitempty"`
	ExitCode   *int         `json:"exit_code,omitempty"`
	TimedOut   bool         `json:"timed_out,omitempty"`
	DurationMS int64        `json:"duration_ms,omitempty"`
	Error      *ErrorDetail `json:"error,omitempty"`
}

// StartProcessRequest is the body of POST /v1/sandboxes/{id}/processes: a background process
// from cmd (a shell command line) or argv; Stdin keeps a pipe to its stdin open.
type StartProcessRequest struct {
	Cmd   string            `json:"cmd,omitempty"`
	Argv  []string          `json:"argv,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"`
	Stdin bool              `json:"stdin,omitempty"`
	// Tag labels the process (printable, at most 256 bytes): listed with it.
	Tag string `json:"tag,omitempty"`
	// PTY runs it on a terminal of its own of this size (stdin types into it; its output is the
	// terminal's, one stream); resize with POST …/processes/{pid}/resize.
	PTY *TermSize `json:"pty,omitempty"`
}

// TermSize is a terminal's size: columns and rows (1–1000; 0: 80×24), also the body of POST
// …/processes/{pid}/resize.
type TermSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ProcessStarted answers a process start: its pid in the sandbox.
type ProcessStarted struct {
	Pid int `json:"pid"`
}

// Process is a background process, running or recently exited (docs/processes.md). The process
// types here are the host agent's too (internal/wire/hostapi aliases them): relayed as they are.
type Process struct {
	Pid         int      `json:"pid"`
	Tag         string   `json:"tag,omitempty"`
	Cmd         string   `json:"cmd,omitempty"`
	Argv        []string `json:"argv,omitempty"`
	Cwd         string   `json:"cwd"`
	User        string   `json:"user"`
	State       string   `json:"state"`
	ExitCode    *int     `json:"exit_code,omitempty"`
	Signal      string   `json:"signal,omitempty"`
	StartedAt   string   `json:"started_at"`
	ExitedAt    string   `json:"exited_at,omitempty"`
	Stdin       bool     `json:"stdin"`
	PTY         bool     `json:"pty,omitempty"`
	OutputStart int64    `json:"output_start"`
	OutputEnd   int64    `json:"output_end"`
}

// Processes is GET /v1/sandboxes/{id}/processes.
type Processes struct {
	Processes []Process `json:"processes"`
}

// ProcessExit is a background process that ended: a "process.exited" event (GET /v1/events,
// webhooks). ExitCode is 128 + the signal's number when a signal (Signal, e.g. "SIGTERM") ended it.
type ProcessExit struct {
	SandboxID string `json:"sandbox_id"`
	Pid       int    `json:"pid"`
	Tag       string `json:"tag,omitempty"`
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	StartedAt string `json:"started_at"`
	ExitedAt  string `json:"exited_at"`
}

// ProcessEvent is one NDJSON line of GET …/processes/{pid}/output: output at Offset, then the
// end (the exit, or Running when not following); Next is where a reader resumes.
type ProcessEvent struct {
	Offset   *int64       `json:"offset,omitempty"`
	Stdout   *string      `json:"stdout,omitempty"`
	Stderr   *string      `json:"stderr,omitempty"`
	Next     *int64       `json:"next,omitempty"`
	Running  bool         `json:"running,omitempty"`
	ExitCode *int         `json:"exit_code,omitempty"`
	Signal   string       `json:"signal,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
}

// StdinRequest is the body of POST …/processes/{pid}/stdin.
type StdinRequest struct {
	Data string `json:"data"`
	EOF  bool   `json:"eof,omitempty"`
}

// SignalRequest is the body of POST …/processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// TerminalMessage is a text message of a terminal's WebSocket (GET /v1/sandboxes/{id}/pty; its
// binary messages are the terminal's bytes): the client sends {"type": "resize", "cols", "rows"};
// the server ends with {"type": "exit", "exit_code", "signal"?} or {"type": "error", "error"}.
type TerminalMessage struct {
	Type     string       `json:"type"`
	Cols     int          `json:"cols,omitempty"`
	Rows     int          `json:"rows,omitempty"`
	ExitCode *int         `json:"exit_code,omitempty"`
	Signal   string       `json:"signal,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
}

// Stat describes a file in a sandbox (the files endpoints relay the host's answer).
type Stat struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Type   string `json:"type"` // "file" | "dir" | "symlink" | "other"
	Size   int64  `json:"size"`
	Mode   string `json:"mode"` // octal permission bits, e.g. "0644"
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"` // a symlink's target
}

// Entries is GET /v1/sandboxes/{id}/files/list.
type Entries struct {
	Entries []Stat `json:"entries"`
}

// PathRequest is the body of POST …/files/mkdir.
type PathRequest struct {
	Path string `json:"path"`
	User string `json:"user,omitempty"`
}

// MoveRequest is the body of POST …/files/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	User string `json:"user,omitempty"`
}

// Snapshot is the public snapshot object: a sandbox's memory and disk at one instant.
type Snapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	CreatedAt string `json:"created_at"`
	SizeBytes int64  `json:"size_bytes"`
	// Published: in the blob store too, so a sandbox made from it can start on any host.
	Published bool `json:"published"`
}

// SnapshotPage is GET /v1/snapshots: one page, newest first, and the next page's cursor.
type SnapshotPage struct {
	NextCursor *string    `json:"next_cursor"`
	Snapshots  []Snapshot `json:"snapshots"`
}

// Template owners in Template.Owner.
const (
	OwnerCatalog = "catalog"
	OwnerTeam    = "team"
)

// Template is a catalog template (Owner "catalog") or one the caller's team built (Owner
// "team", private to the team).
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
	// Available: some host that is up can run it. Baked: some such host has it ready to restore.
	Available bool   `json:"available"`
	Baked     bool   `json:"baked"`
	CreatedAt string `json:"created_at,omitempty"`
	UpdatedAt string `json:"updated_at,omitempty"`
}

// Templates is GET /v1/templates.
type Templates struct {
	Templates []Template `json:"templates"`
}

// BuildEvent is one line of a template build's NDJSON answer: progress lines, then the template
// or an error.
type BuildEvent struct {
	Progress *string      `json:"progress,omitempty"`
	Template *Template    `json:"template,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
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

// Volumes is GET /v1/volumes.
type Volumes struct {
	Volumes []Volume `json:"volumes"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name    string `json:"name,omitempty"`
	SizeMiB int64  `json:"size_mib"`
}

// ResizeVolumeRequest is the body of POST /v1/volumes/{id}/resize.
type ResizeVolumeRequest struct {
	SizeMiB int64 `json:"size_mib"`
}

// Key is an API key record: never the secret, only its display prefix — but Key holds the
// secret in the answer that created it.
type Key struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Prefix    string  `json:"prefix"`
	Admin     bool    `json:"admin"`
	TeamID    string  `json:"team_id"`
	CreatedAt string  `json:"created_at"`
	RevokedAt *string `json:"revoked_at"`
	Key       string  `json:"key,omitempty"`
	// Scopes is what the key may call: all, read, sandboxes, admin (keys made without scopes:
	// admin or all). ExpiresAt is null for a key that does not expire.
	Scopes    []string `json:"scopes"`
	ExpiresAt *string  `json:"expires_at"`
}

// Keys is GET /v1/keys.
type Keys struct {
	Keys []Key `json:"keys"`
}

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	Admin bool   `json:"admin"`
	Name  string `json:"name"`
	// Scopes limit the key (default: all; "admin" is the same as admin: true). ExpiresAt
	// (RFC 3339, in the future) ends it; empty: never.
	Scopes    []string `json:"scopes,omitempty"`
	ExpiresAt string   `json:"expires_at,omitempty"`
	// E2B makes a key of the E2B-compatible API (docs/e2b.md): e2b_ + 40 hex digits, accepted
	// only there (X-API-KEY), never on /v1.
	E2B bool `json:"e2b,omitempty"`
}

// Team is the public team object.
type Team struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt string `json:"created_at"`
}

// CreateTeamRequest is the body of POST /v1/teams.
type CreateTeamRequest struct {
	Name string `json:"name"`
}

// NewTeam is POST /v1/teams's answer: the team and its first key (with its secret).
type NewTeam struct {
	Key  Key  `json:"key"`
	Team Team `json:"team"`
}

// Info is GET /v1/info: what this deployment enforces for every team.
type Info struct {
	Version string     `json:"version"`
	Egress  EgressInfo `json:"egress"`
	// ProxyDomain is where sandbox ports are served: <port>-<sandbox id>.<ProxyDomain>, through
	// the API's own listener (same scheme and port as the API). Empty: no port proxy.
	ProxyDomain string `json:"proxy_domain,omitempty"`
}

// EgressInfo states the egress rules no team can change (docs/security.md).
type EgressInfo struct {
	// Blocked: never reached by any sandbox, whatever its policy or the operator's settings;
	// every host's sandbox links and the hosts' own addresses are blocked too.
	Blocked []Range `json:"blocked"`
	// Private: blocked unless listed in Open.
	Private []Range `json:"private"`
	// Open: private ranges the operator opened for all sandboxes (--egress-open).
	Open []string `json:"open"`
	// Also states the host-specific blocked destinations in words.
	Also []string `json:"also_blocked"`
}

// Range is one range and why it is special.
type Range struct {
	Range string `json:"range"`
	Why   string `json:"why"`
}

// AuditEntry is one mutating call in GET /v1/audit: who (key_id), what (method and route
// pattern), which resource, the answer's status, the request id and the caller's address. It
// never holds request bodies, secrets or file contents.
type AuditEntry struct {
	ID    string `json:"id"`
	KeyID string `json:"key_id"`
	Change
	RequestID string `json:"request_id"`
	Source    string `json:"source"`
	CreatedAt string `json:"created_at"`
}

// AuditPage is GET /v1/audit: the team's entries, newest first.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor *string      `json:"next_cursor"`
}

// Usage is GET /v1/usage (and PUT /v1/teams/{id}/quota's answer): a team's use against its
// quotas. Use counts running and hibernated sandboxes, each at its template's size, live
// volumes at their size, databases, apps, functions, and live snapshots at their size (MiB,
// rounded up).
type Usage struct {
	TeamID    string    `json:"team_id"`
	Sandboxes UsageItem `json:"sandboxes"`
	VCPUs     UsageItem `json:"vcpus"`
	MemoryMiB UsageItem `json:"memory_mib"`
	// Volumes, and their sizes together.
	Volumes   UsageItem `json:"volumes"`
	VolumeMiB UsageItem `json:"volume_mib"`
	// Products, and the snapshots' sizes together.
	Databases   UsageItem `json:"databases"`
	Apps        UsageItem `json:"apps"`
	Functions   UsageItem `json:"functions"`
	SnapshotMiB UsageItem `json:"snapshot_mib"`
}

// Items are u's quotas in the order of Limits.
func (u *Usage) Items() []*UsageItem {
	return []*UsageItem{&u.Sandboxes, &u.VCPUs, &u.MemoryMiB, &u.Volumes, &u.VolumeMiB, &u.Databases, &u.Apps, &u.Functions, &u.SnapshotMiB}
}

// UsageItem is one quota: what is used and the limit (null: none).
type UsageItem struct {
	Used  int64  `json:"used"`
	Limit *int64 `json:"limit"`
}

// QuotaRequest is the body of PUT /v1/teams/{id}/quota (admin keys): the team's own limits. A
// field left out (or null) takes the server's default; 0 means no limit.
type QuotaRequest struct {
	Sandboxes *int64 `json:"sandboxes"`
	VCPUs     *int64 `json:"vcpus"`
	MemoryMiB *int64 `json:"memory_mib"`
	// Volumes, and their sizes together.
	Volumes   *int64 `json:"volumes"`
	VolumeMiB *int64 `json:"volume_mib"`
	// Products, and the snapshots' sizes together.
	Databases   *int64 `json:"databases"`
	Apps        *int64 `json:"apps"`
	Functions   *int64 `json:"functions"`
	SnapshotMiB *int64 `json:"snapshot_mib"`
}

// Limits are r's limits, in the order sandboxes, vcpus, memory_mib, volumes, volume_mib,
// databases, apps, functions, snapshot_mib.
func (r *QuotaRequest) Limits() []**int64 {
	return []**int64{&r.Sandboxes, &r.VCPUs, &r.MemoryMiB, &r.Volumes, &r.VolumeMiB, &r.Databases, &r.Apps, &r.Functions, &r.SnapshotMiB}
}

// CodeRequest is the body of POST /v1/sandboxes/{id}/code: code run in a code context (the
// sandbox's default one without ContextID). TimeoutSeconds nil means the default (300).
type CodeRequest struct {
	Code           string   `json:"code"`
	Language       string   `json:"language,omitempty"` // "python" (the default), "javascript" ("js")
	ContextID      string   `json:"context_id,omitempty"`
	TimeoutSeconds *float64 `json:"timeout_seconds,omitempty"`
}

// CodeResult is one rich result of an execution: the value of its last expression
// (IsMainResult) or something it displayed (a chart). Images are base64; JSON is JSON text.
type CodeResult struct {
	Text         string `json:"text,omitempty"`
	HTML         string `json:"html,omitempty"`
	Markdown     string `json:"markdown,omitempty"`
	PNG          string `json:"png,omitempty"`
	JPEG         string `json:"jpeg,omitempty"`
	SVG          string `json:"svg,omitempty"`
	JSON         string `json:"json,omitempty"`
	LaTeX        string `json:"latex,omitempty"`
	JavaScript   string `json:"javascript,omitempty"`
	IsMainResult bool   `json:"is_main_result"`
}

// CodeError is an exception the code raised (the context lives on).
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// CodeEnd closes an execution.
type CodeEnd struct {
	ExecutionCount *int  `json:"execution_count"`
	DurationMS     int64 `json:"duration_ms"`
}

// CodeEvent is one line of a streamed execution (Accept: application/x-ndjson): exactly one
// field is set. Output comes as it is printed, results and errors as they happen, end last;
// StreamError replaces end when the stream itself broke.
type CodeEvent struct {
	Stdout      *string      `json:"stdout,omitempty"`
	Stderr      *string      `json:"stderr,omitempty"`
	Result      *CodeResult  `json:"result,omitempty"`
	Error       *CodeError   `json:"error,omitempty"`
	End         *CodeEnd     `json:"end,omitempty"`
	StreamError *ErrorDetail `json:"stream_error,omitempty"`
}

// CodeLogs is an execution's output, in the chunks it was printed in.
type CodeLogs struct {
	Stdout []string `json:"stdout"`
	Stderr []string `json:"stderr"`
}

// CodeExecution is the buffered answer of POST /v1/sandboxes/{id}/code.
type CodeExecution struct {
	Results        []CodeResult `json:"results"`
	Logs           CodeLogs     `json:"logs"`
	Error          *CodeError   `json:"error,omitempty"`
	ExecutionCount *int         `json:"execution_count"`
	DurationMS     int64        `json:"duration_ms"`
}

// CodeContext is a kernel with its own variables in a sandbox.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateCodeContextRequest is the body of POST /v1/sandboxes/{id}/code/contexts.
type CreateCodeContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

// CodeContextList is GET /v1/sandboxes/{id}/code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}

// CodeInterruptRequest is the body of POST /v1/sandboxes/{id}/code/interrupt (the default
// context without ContextID).
type CodeInterruptRequest struct {
	ContextID string `json:"context_id,omitempty"`
}

// Add gathers one streamed event into the buffered execution.
func (x *CodeExecution) Add(ev CodeEvent) {
	switch {
	case ev.Stdout != nil:
		x.Logs.Stdout = append(x.Logs.Stdout, *ev.Stdout)
	case ev.Stderr != nil:
		x.Logs.Stderr = append(x.Logs.Stderr, *ev.Stderr)
	case ev.Result != nil:
		x.Results = append(x.Results, *ev.Result)
	case ev.Error != nil:
		x.Error = ev.Error
	case ev.End != nil:
		x.ExecutionCount, x.DurationMS = ev.End.ExecutionCount, ev.End.DurationMS
	}
}

// NewCodeExecution is an empty execution (its lists empty, not null).
func NewCodeExecution() CodeExecution {
	return CodeExecution{Results: []CodeResult{}, Logs: CodeLogs{Stdout: []string{}, Stderr: []string{}}}
}

// WatchEvent is one NDJSON line of GET /v1/sandboxes/{id}/files/watch: "ready" once the watch is
// in place, then create, write, remove, rename (From is the old path) and overflow (events were
// lost); a stream that breaks ends with an Error line.
type WatchEvent struct {
	Type    string       `json:"type"`
	Path    string       `json:"path,omitempty"`
	From    string       `json:"from,omitempty"`
	Dir     bool         `json:"dir,omitempty"`
	Message string       `json:"message,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"`
}

// ArchiveResult is the answer to PUT /v1/sandboxes/{id}/files/archive: the entries unpacked and
// the bytes of file content written.
type ArchiveResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}
