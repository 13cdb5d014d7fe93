// Package hostapi is the host-agent HTTP API's wire contract (docs/hostagent-api.md): the bodies
// the host agent (internal/hostagent) answers and reads, and its client (internal/agentclient)
// sends and decodes, defined once. Nothing here does I/O.
//
// Invariant: these types are what is on the wire, byte for byte (names, omitempty, field order).
// Where an answer was once written as a Go map, its struct lists the fields in key order, as a map
// marshals them. Times that the fake agent fills as strings (Sandbox.CreatedAt, Stat.MTime) are
// strings here, in RFC 3339 with nanoseconds (Time), as a time.Time marshals.
package hostapi

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Limits both sides check.
const (
	// MaxForkCount bounds one fork call: each child is a VMM process on the parent's host.
	MaxForkCount = 16
	// MaxVolumesPerSandbox is how many volumes one sandbox may mount (the spare drives every
	// template is baked with, docs/volumes.md).
	MaxVolumesPerSandbox = 4
)

// ProxyTokenHeader carries the agent token on proxied requests (/v1/sandboxes/{id}/ports/...),
// whose Authorization header belongs to the application in the sandbox and passes through.
const ProxyTokenHeader = "X-Pandastack-Agent-Token"

// TCPUpgrade is the Upgrade protocol of a raw TCP tunnel to a sandbox port: GET
// /v1/sandboxes/{id}/ports/{port}/ with "Connection: Upgrade" and "Upgrade: tcp" is answered
// 101 and the connection then carries that port's bytes both ways (for protocols that are not
// HTTP, e.g. a database's wire protocol).
const TCPUpgrade = "tcp"

// RelayPath is where a TCP upgrade reaches port on sandbox id's loopback through its guest agent
// instead of its network (the control plane's own servers in the guest; agent token only).
func RelayPath(id string, port int) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + "/relay/" + strconv.Itoa(port)
}

// Time is t as the wire carries it (what a time.Time marshals to, unquoted).
func Time(t time.Time) string { return t.Format(time.RFC3339Nano) }

// ErrorBody is every error answer: {"error": {"code", "message"}}; also the last line of a
// stream that failed after it started. ErrorDetail is a stable code (internal/errdefs' wire
// codes) and a message for people. Both edges answer errors in the one envelope, so it is the
// public API's (internal/wire/v1), which the bodies aliased below already carry.
type (
	ErrorBody   = v1.ErrorBody
	ErrorDetail = v1.ErrorDetail
)

// Health is GET /healthz (no token needed).
type Health struct {
	Accel   string `json:"accel"`
	OK      bool   `json:"ok"`
	Version string `json:"version"`
}

// Info is GET /v1/info: the host's capacity and policy, which placement reads.
type Info struct {
	Accel        string `json:"accel"`
	HostID       string `json:"host_id"`
	MaxMemoryMiB int64  `json:"max_memory_mib"`
	// MaxVCPUs and MaxMemoryMiB bound one VM on this host.
	MaxVCPUs int64 `json:"max_vcpus"`
	// MemMiBCommitLimit is MemoryOvercommit × MemMiBTotal: the guest memory the host admits;
	// MemMiBCommitted what it has admitted.
	MemMiBCommitLimit int64 `json:"mem_mib_commit_limit"`
	MemMiBCommitted   int64 `json:"mem_mib_committed"`
	MemMiBFree        int64 `json:"mem_mib_free"`
	MemMiBTotal       int64 `json:"mem_mib_total"`
	// MemMiBWatermark: below it the idlest sandboxes are hibernated.
	MemMiBWatermark  int64   `json:"mem_mib_watermark"`
	MemoryOvercommit float64 `json:"memory_overcommit"`
	// PoolMiBFree is what the disk pool still admits (after its reserve, the volumes' promises
	// and writes in flight); PoolMiBTotal its size (docs/volumes.md).
	PoolMiBFree  int64      `json:"pool_mib_free"`
	PoolMiBTotal int64      `json:"pool_mib_total"`
	SlotsTotal   int64      `json:"slots_total"`
	SlotsUsed    int64      `json:"slots_used"`
	Templates    []Template `json:"templates"`
}

// PoolSpace is the disk pool's room (MiB), as Info reports it.
type PoolSpace struct {
	TotalMiB int64 `json:"pool_mib_total"`
	FreeMiB  int64 `json:"pool_mib_free"`
}

// Template is a template as one host knows it, baked or not (GET /v1/templates, a bake's or a
// build's last line).
type Template struct {
	Name      string    `json:"name"`
	Baked     bool      `json:"baked"`
	VCPUs     int       `json:"vcpus"`
	MemoryMiB int       `json:"memory_mib"`
	DiskMiB   int       `json:"disk_mib"`
	BakeMS    int64     `json:"bake_ms,omitempty"`
	SizeBytes int64     `json:"size_bytes,omitempty"`
	BakedAt   time.Time `json:"baked_at,omitzero"`
	// NIC: baked with a network device, so its sandboxes have one.
	NIC bool `json:"nic,omitempty"`
	// VolumeSlots: spare drives baked in, where volumes are attached on restore.
	VolumeSlots int `json:"volume_slots,omitempty"`
	// Volumes is the template's data volume (none or one, in slot 0), baked mounted: every sandbox
	// made from the template gets a new volume copied from it, in that slot, already mounted.
	// VolumeID is empty (the image is the template's, not a volume).
	Volumes []SnapshotVolume `json:"volumes,omitempty"`
	// Env is the template's env, under every exec's own.
	Env map[string]string `json:"env,omitempty"`
	// Description, Aliases and Metadata are what the template's spec says about itself.
	Description string            `json:"description,omitempty"`
	Aliases     []string          `json:"aliases,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Built: made through the template build API (not the catalog or the agent's config).
	Built bool `json:"built,omitempty"`
	// Identity is the VMM the snapshot was baked under; its sandboxes restore only under it.
	Identity runtime.Identity `json:"identity,omitzero"`
}

// TemplateList is GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// BuildEvent is one NDJSON line of a bake (POST /v1/templates/{name}/bake) or a build
// (POST /v1/templates): progress lines, then a template or an error.
type BuildEvent struct {
	Progress *string      `json:"progress,omitempty"`
	Template *Template    `json:"template,omitempty"`
	Error    *ErrorDetail `json:"error,omitempty"`
}

// Sandbox is the host's view of a sandbox (its state is internal/sandboxstate's; a killed
// sandbox is gone from the host).
type Sandbox struct {
	ID        string `json:"id"`
	Template  string `json:"template"`
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
	CreatedAt string `json:"created_at"`
	// PID is the VMM's process while the sandbox runs, else 0.
	PID       int   `json:"pid"`
	VCPUs     int   `json:"vcpus"`
	MemoryMiB int   `json:"memory_mib"`
	ReadyMS   int64 `json:"ready_ms"`
	// SnapshotID and ForkOf say where its memory came from, when not a template.
	SnapshotID string `json:"snapshot_id,omitempty"`
	ForkOf     string `json:"fork_of,omitempty"`
	// Hibernated names the blob-store publication of a hibernated sandbox's memory and disk: another
	// host can adopt and wake it from there (CreateRequest.Hibernated).
	Hibernated string `json:"hibernated,omitempty"`
	// Volumes are the volumes it mounts, in slot order. A sandbox made from a snapshot with volume
	// copies (a create from it, a fork) mounts new volumes this host made from the copies.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// SandboxList is GET /v1/sandboxes and a fork's answer.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// CreateRequest is POST /v1/sandboxes: from a template (baked first if this host has not), or
// from a snapshot on this host (Template may then be empty; if given it must be the snapshot's).
type CreateRequest struct {
	ID         string `json:"id,omitempty"`
	Template   string `json:"template,omitempty"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	// Hibernated (with ID) adopts sandbox ID, hibernated on another host and published under this
	// name (Sandbox.Hibernated), and wakes it here; nothing else may be set.
	Hibernated string `json:"hibernated,omitempty"`
	// ForkOf (with SnapshotID) makes the sandbox a fork child of that sandbox on another host: it
	// takes the snapshot's env and egress, as a same-host fork's children take their parent's, and
	// Env and Egress must be empty.
	ForkOf string            `json:"fork_of,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Egress *network.Egress   `json:"egress,omitempty"`
	// EgressOpen: private ranges the operator (never a team) opened for all sandboxes.
	EgressOpen []string `json:"egress_open,omitempty"`
	// Volumes are this host's volumes to mount (at most MaxVolumesPerSandbox).
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// ForkRequest is POST /v1/sandboxes/{id}/fork (an empty body is one child).
type ForkRequest struct {
	Count *int `json:"count,omitempty"`
}

// ExecRequest is POST /v1/sandboxes/{id}/exec: a shell string or an argv. The control plane
// passes the public request on as it is.
type ExecRequest = v1.ExecRequest

// ExecResult is the buffered exec answer; each stream is cut at the agent's limit (Truncated).
type ExecResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        int    `json:"exit_code"`
	TimedOut        bool   `json:"timed_out"`
	DurationMS      int64  `json:"duration_ms"`
	Signal          string `json:"signal,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
}

// ExecChunk is an output line of a streamed exec (Accept: application/x-ndjson): one of the two.
type ExecChunk struct {
	Stderr string `json:"stderr,omitempty"`
	Stdout string `json:"stdout,omitempty"`
}

// ExecEnd is the last line of a streamed exec that ran (one that failed ends with ErrorBody).
type ExecEnd struct {
	DurationMS int64  `json:"duration_ms"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out"`
}

// The files bodies are the public API's: the control plane relays them as they are.
type (
	// Stat describes a file in a sandbox.
	Stat = v1.Stat
	// StatList is GET /v1/sandboxes/{id}/files/list.
	StatList = v1.Entries
	// MkdirRequest is POST /v1/sandboxes/{id}/files/mkdir (parents too).
	MkdirRequest = v1.PathRequest
	// MoveRequest is POST /v1/sandboxes/{id}/files/move.
	MoveRequest = v1.MoveRequest
)

// VolumeMount attaches a volume to a sandbox at create: mounted at MountPath in the guest (the
// public create's mount, as it is).
type VolumeMount = v1.VolumeMount

// SnapshotVolume is one volume copy in a snapshot: the bytes of the volume mounted in slot Slot
// (at MountPath in the guest) at the snapshot's instant. A sandbox made from the snapshot mounts
// a new volume made from it (a reflink: each is independent) in the same slot, already mounted in
// the restored guest.
type SnapshotVolume struct {
	Slot      int    `json:"slot"`
	VolumeID  string `json:"volume_id"` // the volume it was copied from
	MountPath string `json:"mount_path"`
	ReadOnly  bool   `json:"read_only,omitempty"`
	SizeMiB   int64  `json:"size_mib"`
	FS        string `json:"fs"` // the filesystem in it: ext4
	// Ephemeral (a template's data volume only): the copy a sandbox gets is the sandbox's own,
	// deleted when it is killed (template.DataVolume.Ephemeral).
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// VolumeAttachment is one sandbox using a volume (until it is killed, hibernated ones too); the
// public volume lists the same.
type VolumeAttachment = v1.VolumeAttachment

// Volume is a volume on one host (docs/volumes.md).
type Volume struct {
	ID          string             `json:"id"`
	SizeMiB     int64              `json:"size_mib"`
	CreatedAt   time.Time          `json:"created_at"`
	Attachments []VolumeAttachment `json:"attachments"`
	// GrowPending: resized since its last read-write mount; the next one grows its filesystem.
	GrowPending bool `json:"grow_pending,omitempty"`
}

// VolumeList is GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// CreateVolumeRequest is POST /v1/volumes: the control plane names the volume.
type CreateVolumeRequest struct {
	ID      string `json:"id"`
	SizeMiB int64  `json:"size_mib"`
}

// ResizeVolumeRequest is POST /v1/volumes/{id}/resize (grow only, while detached): the public
// resize's body, passed on.
type ResizeVolumeRequest = v1.ResizeVolumeRequest

// Snapshot is a snapshot object: a sandbox's memory and disk at one instant, on one host.
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	PauseMS   float64   `json:"pause_ms"`
	// NIC: the snapshot's machine has a network device.
	NIC bool `json:"nic,omitempty"`
	// VolumeSlots: spare drives of the snapshot's machine.
	VolumeSlots int `json:"volume_slots,omitempty"`
	// Volumes are copies of the volumes its sandbox had mounted, taken at the same paused instant
	// as its memory and disk. A published snapshot carries them (docs/volumes.md): a host that
	// pulls it restores with copies of them too.
	Volumes []SnapshotVolume `json:"volumes,omitempty"`
	// DirtyBytes is the guest memory that differed from the sandbox's base (what was copied).
	DirtyBytes int64 `json:"dirty_bytes"`
	// TemplateDir is where on this host its kernel and initrd are (a host detail, on the wire
	// since the first version).
	TemplateDir string `json:"template_dir"`
	VCPUs       int    `json:"vcpus"`
	MemoryMiB   int    `json:"memory_mib"`
	// Identity is the VMM the snapshot was saved under; it restores only under the same.
	Identity runtime.Identity `json:"identity,omitzero"`
	// Published: the snapshot is in the host's blob store, so any host with the same VMM identity
	// can restore it (it pulls it first).
	Published bool `json:"published,omitempty"`
	// Env and Egress are the snapshotted sandbox's; only a fork child made from the snapshot on
	// another host (CreateRequest.ForkOf) takes them, like a same-host fork's children do.
	Env        map[string]string `json:"env,omitempty"`
	Egress     *network.Egress   `json:"egress,omitempty"`
	EgressOpen []string          `json:"egress_open,omitempty"`
}

// SnapshotList is GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// PortPath splits a proxied request's escaped path, /v1/sandboxes/{id}/ports/{port}{rest}, into
// its parts; rest is the application's path exactly as the client sent it ("//etc", "/a/../b",
// "%2F" stay as they are) and "/" when empty. Agents route proxied requests with it before their
// ServeMux, which would clean such a path and redirect the client to the internal route.
func PortPath(escaped string) (id, port, rest string, ok bool) {
	s, ok := strings.CutPrefix(escaped, "/v1/sandboxes/")
	if !ok {
		return "", "", "", false
	}
	id, s, ok = strings.Cut(s, "/")
	if !ok || id == "" {
		return "", "", "", false
	}
	s, ok = strings.CutPrefix(s, "ports/")
	if !ok {
		return "", "", "", false
	}
	port, rest, _ = strings.Cut(s, "/")
	if port == "" {
		return "", "", "", false
	}
	return id, port, "/" + rest, true
}

// The background-process bodies (POST/GET /v1/sandboxes/{id}/processes…, docs/processes.md)
// are the public API's: the control plane relays them as they are, so they are defined once, in
// internal/wire/v1.
type (
	StartProcessRequest = v1.StartProcessRequest
	ProcessStarted      = v1.ProcessStarted
	Process             = v1.Process
	ProcessList         = v1.Processes
	ProcessEvent        = v1.ProcessEvent
	WatchEvent          = v1.WatchEvent
	ArchiveResult       = v1.ArchiveResult
	StdinRequest        = v1.StdinRequest
	SignalRequest       = v1.SignalRequest
	TermSize            = v1.TermSize
	ProcessExit         = v1.ProcessExit
	// TerminalMessage is a terminal WebSocket's text message (GET /v1/sandboxes/{id}/pty): the
	// control plane passes the connection through.
	TerminalMessage = v1.TerminalMessage
)

// ProcessExits is GET /v1/process-exits?after=N: the background processes that ended on the
// host's sandboxes since cursor N (oldest first, at most a page), and the cursor to ask from next.
// The control plane records them (store: once each) and then asks from Next; a cursor from before
// the agent restarted is below every new one (cursors start at the agent's start time).
type ProcessExits struct {
	Exits []ProcessExit `json:"exits"`
	Next  int64         `json:"next"`
}

// SandboxMetrics is GET /v1/sandboxes/{id}/metrics, relayed as it is by the public API.
type SandboxMetrics = v1.SandboxMetrics

// DoctorFinding is one leftover `GET /v1/doctor` found on the host (orphan_vmm, orphan_dir,
// orphan_netns, orphan_cgroup, orphan_lazy_mount, stale_tmp): relayed as it is by the public API.
type DoctorFinding = v1.DoctorFinding

// DoctorReport is GET /v1/doctor and POST /v1/doctor/repair.
type DoctorReport struct {
	Findings []DoctorFinding `json:"findings"`
}
