// Package guest owns the wire protocol between the host and the in-guest agent
// (handshake lines, per-stream frames, request/response types) and the
// host-side Client that the host agent uses to talk to one sandbox.
//
// Transport: one byte stream (a virtio-serial port in the VM, a unix socket on
// the host). A line-based handshake (HELLO / READY / GO) runs first and is
// robust to garbage in both directions; after it a yamux session carries one
// stream per call. The guest-side server lives in internal/guest/agent.
package guest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Version is reported by the guest agent in READY and health. Override at
// link time with -ldflags "-X github.com/pandastack/pandastack/internal/guest.Version=...".
var Version = "0.1.0-dev"

// PortName is the virtio-serial port name the guest agent looks for
// (QEMU: -device virtserialport,chardev=...,name=pandastack.agent).
const PortName = "pandastack.agent"

// Handshake lines. Every handshake line starts with HandshakeMarker and ends with '\n'.
const (
	HandshakeMarker  = "PANDASTACK-"
	HelloPrefix      = "PANDASTACK-HELLO "
	ReadyPrefix      = "PANDASTACK-READY "
	GoPrefix         = "PANDASTACK-GO "
	MaxHandshakeLine = 4096
	// HelloInterval is how often the host re-sends its hello until it sees READY.
	HelloInterval = 20 * time.Millisecond
)

// Hello is the JSON body of the host's hello line.
type Hello struct {
	Nonce      string `json:"nonce"`
	TimeUnixNs int64  `json:"time_unix_ns"`
	Seed       string `json:"seed"` // base64 of 32 random bytes
}

// Ready is the JSON body of the guest's READY line.
type Ready struct {
	Version string `json:"version"`
	BootID  string `json:"boot_id"`
	// ExitSeq is the ExitSeq of the last exit the agent had recorded when it answered the hello.
	// After a restore, the exits numbered up to it are in the table the snapshot copied: the
	// source's, not the copy's (an agent of an older build leaves it 0).
	ExitSeq uint64 `json:"exit_seq,omitempty"`
}

// HandshakeScanner pulls handshake lines out of a byte stream that may contain
// arbitrary garbage (stale yamux bytes from an earlier session, half lines).
// Memory stays bounded: garbage without a marker is dropped as it arrives.
type HandshakeScanner struct {
	buf []byte
}

// Feed appends bytes read from the stream.
func (s *HandshakeScanner) Feed(p []byte) { s.buf = append(s.buf, p...) }

func (s *HandshakeScanner) drop(n int) {
	s.buf = append(s.buf[:0], s.buf[n:]...)
}

// Next returns the next complete handshake line (without the newline), starting
// at its marker. If garbage without a newline precedes a marker on the same
// line, the last marker on the line wins, so a truncated stale line cannot hide
// a good one behind it.
func (s *HandshakeScanner) Next() ([]byte, bool) {
	marker := []byte(HandshakeMarker)
	for {
		i := bytes.Index(s.buf, marker)
		if i < 0 {
			// Keep a tail that may be the beginning of a marker split across reads.
			if keep := len(marker) - 1; len(s.buf) > keep {
				s.drop(len(s.buf) - keep)
			}
			return nil, false
		}
		if i > 0 {
			s.drop(i)
		}
		nl := bytes.IndexByte(s.buf, '\n')
		if nl < 0 {
			if len(s.buf) > MaxHandshakeLine {
				// No line ending in sight: only the last MaxHandshakeLine bytes can still
				// hold the start of a valid line.
				s.drop(len(s.buf) - MaxHandshakeLine)
				if bytes.HasPrefix(s.buf, marker) {
					s.drop(1) // this marker's line is already too long
				}
				continue
			}
			return nil, false
		}
		line := s.buf[:nl]
		if j := bytes.LastIndex(line, marker); j > 0 {
			line = line[j:]
		}
		if len(line) > MaxHandshakeLine {
			s.drop(nl + 1)
			continue
		}
		out := append([]byte(nil), line...)
		s.drop(nl + 1)
		return out, true
	}
}

// Lines yields, as strings, the lines Next returns until it has no complete one; a loop that
// stops early leaves the bytes after its last line to the next call (or to Rest).
func (s *HandshakeScanner) Lines() iter.Seq[string] {
	return func(yield func(string) bool) {
		for {
			line, ok := s.Next()
			if !ok || !yield(string(line)) {
				return
			}
		}
	}
}

// Rest returns (and forgets) the bytes after the last line returned by Next;
// after the final handshake line they belong to yamux.
func (s *HandshakeScanner) Rest() []byte {
	r := append([]byte(nil), s.buf...)
	s.buf = s.buf[:0]
	return r
}

// Frame types. A frame is 1 byte type, 4 bytes big-endian payload length, payload.
const (
	FrameRequest byte = 'Q' // host→guest, first frame of a stream: JSON Request
	FrameData    byte = 'D' // raw bytes: file content (both directions) or exec stdin
	FrameEOF     byte = 'E' // end of a FrameData sequence (data-EOF / stdin-EOF) or of a list
	FrameStdout  byte = 'O' // guest→host exec stdout bytes
	FrameStderr  byte = 'e' // guest→host exec stderr bytes
	FrameExit    byte = 'X' // guest→host exec result: JSON ExecResult
	FrameError   byte = '!' // guest→host: JSON Error; last frame of the stream
	FrameStat    byte = 'S' // guest→host: JSON FileInfo
	FrameResult  byte = 'J' // guest→host: JSON result (health; {} for ok)
)

// MaxFramePayload is the largest payload either side accepts.
const MaxFramePayload = 1 << 20

// DataChunk is the payload size used when streaming bytes.
const DataChunk = 128 << 10

func validFrameType(t byte) bool {
	switch t {
	case FrameRequest, FrameData, FrameEOF, FrameStdout, FrameStderr, FrameExit, FrameError, FrameStat, FrameResult:
		return true
	}
	return false
}

// ProtocolError is a malformed frame; it ends the stream it arrived on (only).
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "guest protocol error: " + e.Msg }

// WriteFrame writes one frame in a single Write call (yamux keeps one Write
// contiguous, so concurrent writers on a stream never interleave frames).
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFramePayload {
		return &ProtocolError{Msg: fmt.Sprintf("frame payload %d bytes exceeds %d", len(payload), MaxFramePayload)}
	}
	b := make([]byte, 5+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// WriteJSONFrame marshals v and writes it as one frame.
func WriteJSONFrame(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, typ, b)
}

// FrameReader reads frames from a stream.
type FrameReader struct {
	r   io.Reader
	hdr [5]byte
	buf []byte
}

// NewFrameReader returns a reader of frames from r.
func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

// Next returns the next frame. The payload is only valid until the next call.
// An oversized or unknown frame yields a *ProtocolError (its payload is not read).
// A clean end of stream before a header is io.EOF; inside a frame io.ErrUnexpectedEOF.
func (f *FrameReader) Next() (byte, []byte, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return 0, nil, err
	}
	typ := f.hdr[0]
	n := binary.BigEndian.Uint32(f.hdr[1:5])
	if !validFrameType(typ) {
		return 0, nil, &ProtocolError{Msg: fmt.Sprintf("unknown frame type 0x%02x", typ)}
	}
	if n > MaxFramePayload {
		return 0, nil, &ProtocolError{Msg: fmt.Sprintf("frame payload %d bytes exceeds %d", n, MaxFramePayload)}
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	p := f.buf[:n]
	if _, err := io.ReadFull(f.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return typ, p, nil
}

// Request is the JSON body of FrameRequest. Which fields matter depends on Op.
type Request struct {
	Op string `json:"op"`

	// exec
	Cmd       string            `json:"cmd,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	// Stdin says FrameData/FrameEOF stdin frames follow; without it stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Tag labels a background process (proc_start; CheckTag): listed with it, chosen by the caller.
	Tag string `json:"tag,omitempty"`

	// file ops (User applies to exec too)
	User      string `json:"user,omitempty"`
	Path      string `json:"path,omitempty"`
	Mode      string `json:"mode,omitempty"` // octal, e.g. "0644"
	Depth     int    `json:"depth,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`

	// mount: the ext4 disk whose virtio serial is Serial, once the guest sees it at SizeBytes,
	// at Path; ReadOnly mounts it ro; Grow runs resize2fs after a read-write mount.
	Serial    string `json:"serial,omitempty"`
	SizeBytes int64  `json:"size_bytes,omitempty"`
	ReadOnly  bool   `json:"read_only,omitempty"`
	Grow      bool   `json:"grow,omitempty"`

	// background processes (process.go): which one, from where its output is read, a signal.
	Pid    int    `json:"pid,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Follow bool   `json:"follow,omitempty"`
	Signal string `json:"signal,omitempty"`
	EOF    bool   `json:"eof,omitempty"` // proc_stdin: close the process's stdin after the data

	// pty (pty.go): the terminal's size, at the start and in resize requests; also proc_start's
	// (with PTY: the process runs on a terminal of its own) and proc_resize's.
	Cols int  `json:"cols,omitempty"`
	Rows int  `json:"rows,omitempty"`
	PTY  bool `json:"pty,omitempty"`

	// dial: the TCP port on the guest's loopback to connect the stream to (OpDial).
	Port int `json:"port,omitempty"`
}

// Ops.
const (
	OpExec   = "exec"
	OpRead   = "read"
	OpWrite  = "write"
	OpList   = "list"
	OpStat   = "stat"
	OpMkdir  = "mkdir"
	OpRemove = "remove"
	OpMove   = "move"
	OpHealth = "health"
	OpSync   = "sync"
	OpMount  = "mount"
	OpUsage  = "usage" // the guest's own resource figures: Usage
	// Background processes: see process.go.
	OpProcStart  = "proc_start"
	OpProcList   = "proc_list"
	OpProcOutput = "proc_output"
	OpProcStdin  = "proc_stdin"
	OpProcSignal = "proc_signal"
	OpProcKill   = "proc_kill"
	OpProcResize = "proc_resize"
	OpPTY        = "pty" // an interactive terminal: see pty.go
	// OpDial connects the stream to a TCP port on the guest's loopback (Request.Port): after a
	// FrameResult ({}) the stream carries that connection's raw bytes both ways, no frames. The
	// host reaches a guest server over the agent's channel instead of the guest's network.
	OpDial = "dial"
)

// Limits shared by both sides.
const (
	MaxPath      = 4096
	DefaultDepth = 1
	MaxDepth     = 10
)

// Error codes carried in FrameError.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeNotFound         = "not_found"
	CodePermissionDenied = "permission_denied"
	CodeAlreadyExists    = "already_exists"
	CodeNotADirectory    = "not_a_directory"
	CodeIsADirectory     = "is_a_directory"
	CodeNoSpace          = "no_space"
	CodeNotEmpty         = "not_empty"
	CodeConflict         = "conflict" // the request does not fit the current state (a process that exited)
	CodeInternal         = "internal"
)

// Error is a guest-side failure, returned by Client methods as *Error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return "guest: " + e.Code + ": " + e.Message }

// ErrorCode returns the guest error code inside err, or "" if err is not a guest *Error.
func ErrorCode(err error) string {
	var ge *Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return ""
}

// ExecRequest is one command to run in the guest. Exactly one of Cmd (run by
// /bin/sh -c) or Argv (run directly) is set. User "" means "user".
type ExecRequest struct {
	Cmd     string            `json:"cmd,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	User    string            `json:"user,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // 0: no timeout
	Tag     string            `json:"tag,omitempty"`     // a background process's label (StartProcess)
}

// MaxUserProcs caps the processes (threads, per uid) of the sandbox's unprivileged accounts.
// Generous for builds and browsers; low enough that a fork bomb cannot freeze a small guest.
const MaxUserProcs = 2048

// ExecResult is the final frame of an exec (also its wire JSON).
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	DurationMs int64  `json:"duration_ms"`
	Signal     string `json:"signal,omitempty"` // e.g. "SIGKILL" when killed by a signal
}

// FileInfo is the stat object (also its wire JSON).
type FileInfo struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"` // "file" | "dir" | "symlink" | "other"
	Size   int64     `json:"size"`
	Mode   string    `json:"mode"` // octal permission bits, e.g. "0644"
	Mtime  time.Time `json:"mtime"`
	Target string    `json:"target,omitempty"` // symlink target
}

// Usage is the answer to the usage op: the guest's view of its resources. CPU figures are the
// kernel's cumulative ticks (/proc/stat), so a caller compares two answers for a busy share.
type Usage struct {
	CPUs          int    `json:"cpus"`
	CPUBusyTicks  uint64 `json:"cpu_busy_ticks"`  // all but idle and iowait, every CPU together
	CPUTotalTicks uint64 `json:"cpu_total_ticks"` // every state, every CPU together
	MemTotal      int64  `json:"mem_total"`       // bytes (MemTotal)
	MemAvailable  int64  `json:"mem_available"`   // bytes (MemAvailable)
	MemCache      int64  `json:"mem_cache"`       // bytes (Cached + Buffers)
	DiskTotal     int64  `json:"disk_total"`      // bytes of the root filesystem
	DiskUsed      int64  `json:"disk_used"`       // bytes in use on it
}

// Health is the answer to the health op.
type Health struct {
	OK       bool   `json:"ok"`
	Version  string `json:"version"`
	UptimeMs int64  `json:"uptime_ms"` // since the agent process started
	BootID   string `json:"boot_id"`
}
