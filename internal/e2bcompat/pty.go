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
// WebSocket, as `pandastack sandbox shell` uses). It lives until its program exits, it is killed
// (SendSignal), or the Start's deadline (Connect-Timeout-Ms, envd's process lifetime) passes —
// not as long as the stream that created it: a Connect to its pid (pty.connect) follows its
// output from then on, as the creator's stream does. PandaStack's terminals have no pid of the
// guest's, so the facade numbers them above any guest pid and keeps them in this process:
// SendInput, Update (resize), SendSignal, Connect and List find them here.

// ptyPidBase is above Linux's largest pid (4194304), so a terminal's number is never a process's.
const ptyPidBase = 1 << 23

// maxPTYs bounds the terminals one sandbox has open through the facade.
const maxPTYs = 32

// ptySubBuffer is how many output chunks a follower may lag behind before it is dropped (its
// stream ends with an error; the terminal and its other followers go on).
const ptySubBuffer = 256

type ptySession struct {
	term   *client.Terminal
	cfg    *process.ProcessConfig
	tag    string
	killed atomic.Bool // SendSignal hung it up

	mu   sync.Mutex
	subs map[chan []byte]bool
	done chan struct{}                  // closed once end is set and every chunk was handed out
	end  *process.ProcessEvent_EndEvent // how it ended (nil: it broke; err says why)
	err  error
}

// subscribe adds a follower of the terminal's output from now on (nil once it ended).
func (s *ptySession) subscribe() chan []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		return nil
	}
	ch := make(chan []byte, ptySubBuffer)
	s.subs[ch] = true
	return ch
}

func (s *ptySession) unsubscribe(ch chan []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[ch] {
		delete(s.subs, ch)
		close(ch)
	}
}

// publish hands a chunk to every follower; one that lags too far is dropped.
func (s *ptySession) publish(b []byte) {
	b = append([]byte(nil), b...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- b:
		default:
			delete(s.subs, ch)
			close(ch)
		}
	}
}

// finish records the end and releases the followers.
func (s *ptySession) finish(end *process.ProcessEvent_EndEvent, err error) {
	s.mu.Lock()
	s.end, s.err, s.subs = end, err, nil
	s.mu.Unlock()
	close(s.done)
}

// ptys are the open terminals, by sandbox and number.
type ptys struct {
	mu   sync.Mutex
	next uint32
	m    map[string]map[uint32]*ptySession
}

func (p *ptys) add(sandboxID string, s *ptySession) (uint32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[uint32]*ptySession{}
	}
	if p.m[sandboxID] == nil {
		p.m[sandboxID] = map[uint32]*ptySession{}
	}
	if len(p.m[sandboxID]) >= maxPTYs {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the sandbox has %d ptys open, the most at once: kill one first", maxPTYs))
	}
	p.next++
	pid := ptyPidBase + p.next
	p.m[sandboxID][pid] = s
	return pid, nil
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

// byTag is the newest terminal of the sandbox with tag (0: none).
func (p *ptys) byTag(sandboxID, tag string) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var found uint32
	for pid, s := range p.m[sandboxID] {
		if s.tag == tag && pid > found {
			found = pid
		}
	}
	return found
}

// list is the sandbox's terminals as processes.
func (p *ptys) list(sandboxID string) []*process.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*process.ProcessInfo
	for _, pid := range slices.Sorted(maps.Keys(p.m[sandboxID])) {
		s := p.m[sandboxID][pid]
		out = append(out, &process.ProcessInfo{Pid: pid, Config: s.cfg, Tag: optional(s.tag)})
	}
	return out
}

// optional is s as an optional proto field (nil when empty).
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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

// startPTY serves a Start with pty: it opens the terminal, which then runs on its own (run), and
// follows it like any Connect.
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
	// The terminal outlives this stream, up to the Start's deadline (its lifetime).
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		life, cancel = context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	term, err := t.c.Terminal(life, t.sb.ID, opts)
	if err != nil {
		cancel()
		var ae *client.APIError
		if errors.As(err, &ae) {
			return connect.NewError(connectErrCode(ae.Status), errors.New(ae.Message))
		}
		return connect.NewError(connect.CodeUnavailable, err)
	}
	sess := &ptySession{term: term, cfg: cfg, tag: m.GetTag(), subs: map[chan []byte]bool{}, done: make(chan struct{})}
	pid, err := p.ptys.add(t.sb.ID, sess)
	if err != nil {
		term.Close()
		cancel()
		return err
	}
	sub := sess.subscribe() // before any output: the creator sees all of it
	go func() {
		defer cancel()
		sess.run(life, func() { p.ptys.remove(t.sb.ID, pid) })
	}()
	return followPTY(ctx, sess, pid, sub, send)
}

// run copies the terminal's output to its followers until it ends, then unlists it and records
// how it ended (so a follower told of the end finds it gone from List).
func (s *ptySession) run(life context.Context, unlist func()) {
	defer s.term.Close()
	exit, err := s.term.Wait(writerFunc(func(b []byte) (int, error) {
		s.publish(b)
		return len(b), nil
	}))
	end := &process.ProcessEvent_EndEvent{Exited: true}
	switch {
	case s.killed.Load() || errors.Is(life.Err(), context.DeadlineExceeded):
		end.ExitCode, end.Exited, end.Status, err = -1, false, "signal: killed", nil
	case err != nil:
		end = nil
	case exit.Signal != "":
		end.ExitCode, end.Exited, end.Status = -1, false, "signal: "+exit.Signal
	case exit.ExitCode != nil:
		end.ExitCode, end.Status = int32(*exit.ExitCode), fmt.Sprintf("exit status %d", *exit.ExitCode)
	}
	unlist()
	s.finish(end, err)
}

// followPTY sends a terminal's start event, its output (from sub), then its end.
func followPTY(ctx context.Context, s *ptySession, pid uint32, sub chan []byte, send func(*process.ProcessEvent) error) error {
	if sub == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", pid))
	}
	defer s.unsubscribe(sub)
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		return err
	}
	data := func(b []byte) error {
		d := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: b}}
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}})
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case b, ok := <-sub:
			if ok {
				if err := data(b); err != nil {
					return err
				}
				continue
			}
			// Closed: this follower lagged and was dropped.
			return connect.NewError(connect.CodeResourceExhausted, errors.New("this stream fell too far behind the pty's output; connect again"))
		case <-s.done:
			// Every chunk was handed out before the end: send what is still queued, then it.
			for len(sub) > 0 {
				if err := data(<-sub); err != nil {
					return err
				}
			}
			if s.end == nil {
				return connect.NewError(connect.CodeUnavailable, s.err)
			}
			return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: s.end}})
		}
	}
}
