package e2bcompat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process"
	"github.com/pandastack/pandastack/internal/guest"
)

// PTYs (sbx.pty.create): a Start with pty opens a terminal in the sandbox (the host's terminal
// WebSocket, as `pandastack sandbox shell` uses) for as long as its stream lasts. PandaStack's
// terminals have no pid of the guest's, so the facade numbers them above any guest pid and keeps
// them in this process: SendInput, Update (resize), SendSignal and List find them here.

// ptyPidBase is above Linux's largest pid (4194304), so a terminal's number is never a process's.
const ptyPidBase = 1 << 23

type ptySession struct {
	term   *client.Terminal
	cfg    *process.ProcessConfig
	killed atomic.Bool // SendSignal hung it up
}

// ptys are the open terminals, by sandbox and number.
type ptys struct {
	mu   sync.Mutex
	next uint32
	m    map[string]map[uint32]*ptySession
}

func (p *ptys) add(sandboxID string, s *ptySession) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[uint32]*ptySession{}
	}
	if p.m[sandboxID] == nil {
		p.m[sandboxID] = map[uint32]*ptySession{}
	}
	p.next++
	pid := ptyPidBase + p.next
	p.m[sandboxID][pid] = s
	return pid
}

func (p *ptys) remove(sandboxID string, pid uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m[sandboxID], pid)
	if len(p.m[sandboxID]) == 0 {
		delete(p.m, sandboxID)
	}
}

// get is terminal pid of the sandbox; ok is false for a pid that is not a terminal's.
func (p *ptys) get(sandboxID string, pid int) (s *ptySession, isPTY bool, err error) {
	if pid <= ptyPidBase {
		return nil, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s = p.m[sandboxID][uint32(pid)]
	if s == nil {
		return nil, true, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", pid))
	}
	return s, true, nil
}

// list is the sandbox's terminals as processes.
func (p *ptys) list(sandboxID string) []*process.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*process.ProcessInfo
	for _, pid := range slices.Sorted(maps.Keys(p.m[sandboxID])) {
		out = append(out, &process.ProcessInfo{Pid: pid, Config: p.m[sandboxID][pid].cfg})
	}
	return out
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ptyCommand is the terminal's command line: the program and its arguments, under env for the
// variables (the terminal API takes a shell line, a user and a cwd).
func ptyCommand(cfg *process.ProcessConfig) string {
	var parts []string
	if len(cfg.GetEnvs()) > 0 {
		parts = append(parts, "exec", "env")
		for _, k := range slices.Sorted(maps.Keys(cfg.GetEnvs())) {
			parts = append(parts, shellQuote(k+"="+cfg.GetEnvs()[k]))
		}
	} else {
		parts = append(parts, "exec")
	}
	parts = append(parts, shellQuote(cfg.GetCmd()))
	for _, a := range cfg.GetArgs() {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// writerFunc adapts a function to io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// startPTY serves a Start with pty: start, the terminal's output as pty data, its end.
func (p *processService) startPTY(ctx context.Context, t target, m *process.StartRequest, send func(*process.ProcessEvent) error) error {
	cfg := m.GetProcess()
	size := m.GetPty().GetSize()
	cols, rows := int(size.GetCols()), int(size.GetRows())
	if cols < 1 || rows < 1 || cols > guest.MaxTermSize || rows > guest.MaxTermSize {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty size must be 1 to %d columns and rows", guest.MaxTermSize))
	}
	opts := client.TerminalOptions{Cmd: ptyCommand(cfg), User: t.user, Cols: cols, Rows: rows}
	if cfg.Cwd != nil {
		opts.Cwd = absPath(t.user, cfg.GetCwd())
	}
	term, err := t.c.Terminal(ctx, t.sb.ID, opts)
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) {
			return connect.NewError(connectErrCode(ae.Status), errors.New(ae.Message))
		}
		return connect.NewError(connect.CodeUnavailable, err)
	}
	defer term.Close()
	sess := &ptySession{term: term, cfg: cfg}
	pid := p.ptys.add(t.sb.ID, sess)
	defer p.ptys.remove(t.sb.ID, pid)
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		return err
	}
	exit, err := term.Wait(writerFunc(func(b []byte) (int, error) {
		d := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: b}}
		return len(b), send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}})
	}))
	if err != nil && !sess.killed.Load() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return connect.NewError(connect.CodeUnavailable, err)
	}
	end := &process.ProcessEvent_EndEvent{Exited: true}
	switch {
	case sess.killed.Load():
		end.ExitCode, end.Exited, end.Status = -1, false, "signal: killed"
	case exit.Signal != "":
		end.ExitCode, end.Exited, end.Status = -1, false, "signal: "+exit.Signal
	case exit.ExitCode != nil:
		end.ExitCode, end.Status = int32(*exit.ExitCode), fmt.Sprintf("exit status %d", *exit.ExitCode)
	}
	return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}})
}
