package guest

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Background processes (ops proc_*): the guest agent starts a process in its own process group
// and owns it from then on; no stream stays attached to it. Its stdout and stderr go into one
// bounded ring with absolute byte offsets (the combined output, in the order it was produced), so
// any number of readers, one after another or at once, read it from any offset still kept.
//
//	proc_start   Request{Cmd|Argv, Env, Cwd, User, Stdin, PTY, Cols, Rows} → FrameResult ProcessStarted
//	proc_list    Request{}                                           → FrameResult ProcessList
//	proc_output  Request{Pid, Offset, Follow}                        → FrameResult {} (accepted),
//	             FrameStdout/FrameStderr (payload: 8-byte big-endian offset, then the bytes),
//	             then FrameExit ProcessEnd
//	proc_stdin   Request{Pid, EOF}, FrameData…, FrameEOF              → FrameResult {}
//	proc_signal  Request{Pid, Signal}                                → FrameResult {}
//	proc_kill    Request{Pid}: SIGKILL to the group and every descendant → FrameResult ProcessInfo
//	proc_resize  Request{Pid, Cols, Rows}: a PTY process's terminal size → FrameResult {}
//
// With PTY the process runs on a terminal of its own (a session leader, TERM=xterm-256color
// unless given): its output is the terminal's (one stream, stdout), proc_stdin types into it, and
// closing stdin only stops further typing (the terminal's end of input is ^D, "\x04").
//
// A process keeps running when its reader goes away, when the host hibernates the VM (its memory
// is saved with the agent's table) and in a fork's children (the same memory, so the same table).

// Process limits.
const (
	// ProcessOutputRing is how much output (stdout and stderr together) a process keeps: older
	// bytes are dropped, and reading from an offset before the oldest kept starts at the oldest.
	ProcessOutputRing = 1 << 20
	// MaxProcesses is how many background processes may run at once.
	MaxProcesses = 64
	// MaxExitedProcesses is how many exited processes are remembered (exit code, output); the
	// oldest exit is forgotten first.
	MaxExitedProcesses = 32
	// MaxStdinWrite bounds the bytes of one proc_stdin call.
	MaxStdinWrite = 1 << 20
	// StdinWriteTimeout is how long a proc_stdin call waits for a process that does not read.
	StdinWriteTimeout = 10 * time.Second
)

// ProcessSignals is the set of signals a caller may send, by name without "SIG".
var ProcessSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP,
	"QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT,
}

// MaxTagBytes bounds a background process's tag.
const MaxTagBytes = 256

// CheckTag validates a background process's tag: printable UTF-8, at most MaxTagBytes ("": none).
func CheckTag(tag string) error {
	if len(tag) > MaxTagBytes || !utf8.ValidString(tag) || strings.IndexFunc(tag, unicode.IsControl) >= 0 {
		return fmt.Errorf("tag must be printable UTF-8 of at most %d bytes", MaxTagBytes)
	}
	return nil
}

// ParseSignal accepts an allowed signal's name, with or without "SIG", in any case.
func ParseSignal(name string) (syscall.Signal, bool) {
	s, ok := ProcessSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
	return s, ok
}

// ProcessStarted answers proc_start.
type ProcessStarted struct {
	Pid int `json:"pid"`
}

// ProcessInfo describes one background process, running or recently exited.
type ProcessInfo struct {
	Pid       int       `json:"pid"`
	Tag       string    `json:"tag,omitempty"`
	Cmd       string    `json:"cmd,omitempty"`
	Argv      []string  `json:"argv,omitempty"`
	Cwd       string    `json:"cwd"`
	User      string    `json:"user"`
	Running   bool      `json:"running"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Signal    string    `json:"signal,omitempty"` // what killed it, e.g. "SIGTERM"
	StartedAt time.Time `json:"started_at"`
	ExitedAt  time.Time `json:"exited_at,omitzero"`
	// ExitSeq numbers the agent's exits in the order it recorded them (1, 2, ...; 0 while it
	// runs). A copy restored from a snapshot carries its source's numbers on: see Ready.ExitSeq.
	ExitSeq uint64 `json:"exit_seq,omitempty"`
	// Stdin: its stdin is a pipe that proc_stdin writes to (asked for at start, not closed yet).
	Stdin bool `json:"stdin"`
	// PTY: it runs on a terminal of its own (proc_start with PTY).
	PTY bool `json:"pty,omitempty"`
	// OutputStart is the oldest offset still kept, OutputEnd the offset the next byte gets.
	OutputStart int64 `json:"output_start"`
	OutputEnd   int64 `json:"output_end"`
}

// ProcessList answers proc_list: oldest start first.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessEnd is the last frame of proc_output: where a reader resumes (Next), and either the
// exit (the process exited and all its output up to then was sent) or Running (not following,
// and everything kept so far was sent).
type ProcessEnd struct {
	Next     int64  `json:"next"`
	Running  bool   `json:"running,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
}

// OutputChunk is one proc_output frame's content.
type OutputChunk struct {
	Stderr bool
	Offset int64
	Data   []byte
}

// EncodeOutputChunk is the payload of a proc_output frame: the offset, then the bytes.
func EncodeOutputChunk(off int64, data []byte) []byte {
	b := make([]byte, 8+len(data))
	binary.BigEndian.PutUint64(b, uint64(off))
	copy(b[8:], data)
	return b
}

// DecodeOutputChunk splits a proc_output frame's payload (the bytes point into p).
func DecodeOutputChunk(p []byte) (int64, []byte, bool) {
	if len(p) < 8 {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(p)), p[8:], true
}
