package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// guest returns a live guest agent client for a sandbox, waking it if it is hibernated and
// reconnecting when needed (after an agent restart the first call connects).
func (m *Manager) guest(ctx context.Context, id string) (*guest.Client, *sandbox, error) {
	sb, err := m.awake(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	c, err := sb.guest(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, sb, nil
}

// guest returns a live guest agent client of a running sandbox (connecting when needed). The
// connect (up to 15 s of a slow guest) holds dial, not mu: mu is read by the host's every report
// (Committed, List), which would wait that long too and the host look silent.
func (sb *sandbox) guest(ctx context.Context) (*guest.Client, error) {
	sb.dial.Lock()
	defer sb.dial.Unlock()
	sb.mu.Lock()
	id, socket, c, err, killed := sb.rec.ID, sb.rec.VM.AgentSocket, sb.client, sb.reachableLocked(), sb.killed
	sb.mu.Unlock()
	if err != nil || c != nil {
		return c, err
	}
	if killed { // its VMM is going (a kill, a hibernation): nothing to connect to
		return nil, errdefs.Conflictf("sandbox %s is being stopped", id)
	}
	c, err = connect(ctx, socket, 15*time.Second)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err // the caller went away
		}
		return nil, errdefs.WithCode(errdefs.Unavailable, "guest_unreachable", "sandbox %s: guest agent unreachable: %v", id, err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	// Stopped, or restored anew (a wake sets its own client), while this connected?
	switch err := sb.reachableLocked(); {
	case err != nil:
		c.Close()
		return nil, err
	case sb.client != nil:
		c.Close()
		return sb.client, nil
	case sb.killed || sb.rec.VM.AgentSocket != socket:
		c.Close()
		return nil, errdefs.Conflictf("sandbox %s is being stopped", id)
	}
	sb.client = c
	return c, nil
}

// reachableLocked says why the sandbox's guest cannot be called (nil: it runs); mu held.
func (sb *sandbox) reachableLocked() error {
	switch sb.rec.State {
	case StateRunning:
		return nil
	case StateError:
		return errdefs.Conflictf("sandbox %s is in state error: %s", sb.rec.ID, sb.rec.Error)
	}
	return errdefs.Conflictf("sandbox %s is %s", sb.rec.ID, sb.rec.State)
}

// callErr explains a failed guest call: a VMM that died meanwhile is a conflict with its reason.
func (m *Manager) callErr(sb *sandbox, err error) error {
	var ge *guest.Error
	if errors.As(err, &ge) || sb == nil {
		return err
	}
	if !errors.Is(err, guest.ErrConnectionLost) && !errors.Is(err, guest.ErrClosed) {
		return err // e.g. the caller went away
	}
	sb.mu.Lock()
	vm := sb.rec.VM
	sb.mu.Unlock()
	// A lost connection usually means the VM is going away (a guest panic, a kill): give the VMM
	// a moment to exit so the caller learns why, instead of a bare connection error.
	for i := 0; i < 40 && m.rt.Alive(&vm); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !m.rt.Alive(&vm) {
		sb.mu.Lock()
		killed := sb.killed && sb.rec.State == StateRunning
		sb.mu.Unlock()
		if killed {
			return errdefs.Conflictf("sandbox %s was stopped (killed or hibernated) during the call", sb.rec.ID)
		}
		var reason string
		for i := 0; i < 20 && reason == ""; i++ { // the watcher records the reason
			sb.mu.Lock()
			reason = sb.rec.Error
			sb.mu.Unlock()
			if reason == "" {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if reason == "" {
			reason = "VMM exited"
		}
		return errdefs.Conflictf("sandbox %s stopped: %s", sb.rec.ID, reason)
	}
	return errdefs.WithCode(errdefs.Unavailable, "guest_unreachable", "sandbox %s: lost the connection to its guest agent: %v", sb.rec.ID, err)
}

// Exec limits.
const (
	DefaultExecTimeout = 60 * time.Second
	MaxExecTimeout     = 24 * time.Hour
)

func validateExec(r *hostapi.ExecRequest) error {
	switch {
	case r.Cmd == "" && len(r.Argv) == 0:
		return errdefs.Invalidf("exec needs cmd (a shell string) or argv")
	case r.Cmd != "" && len(r.Argv) > 0:
		return errdefs.Invalidf("exec takes cmd or argv, not both")
	case r.TimeoutSeconds != nil && (*r.TimeoutSeconds <= 0 || *r.TimeoutSeconds > MaxExecTimeout.Seconds()):
		return errdefs.Invalidf("timeout_seconds must be > 0 and <= %d", int(MaxExecTimeout.Seconds()))
	case len(r.Env) > 256:
		return errdefs.Invalidf("env has more than 256 entries")
	}
	for k := range r.Env {
		if k == "" || len(k) > 256 || containsAny(k, "=\x00") {
			return errdefs.Invalidf("env name %q is not valid", k)
		}
	}
	return nil
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, d := range s {
			if c == d {
				return true
			}
		}
	}
	return false
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr.
func (m *Manager) Exec(ctx context.Context, id string, req hostapi.ExecRequest, stdout, stderr io.Writer) (guest.ExecResult, error) {
	if err := validateExec(&req); err != nil {
		return guest.ExecResult{}, err
	}
	c, sb, err := m.guest(ctx, id)
	if err != nil {
		return guest.ExecResult{}, err
	}
	env := execEnv(sb, req.Env)
	timeout := DefaultExecTimeout
	if req.TimeoutSeconds != nil {
		timeout = time.Duration(*req.TimeoutSeconds * float64(time.Second))
	}
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = strings.NewReader(*req.Stdin)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: env, Cwd: req.Cwd, User: req.User, Timeout: timeout},
		stdin, stdout, stderr)
	if err != nil {
		return res, m.callErr(sb, err)
	}
	return res, nil
}

// execEnv is the sandbox's env (from its create) overlaid with a call's.
func execEnv(sb *sandbox, extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range sb.rec.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// StartProcess starts a background process in the sandbox (waking it first) and returns its pid;
// the guest agent owns it from then on (internal/guest/process.go).
func (m *Manager) StartProcess(ctx context.Context, id string, req hostapi.StartProcessRequest) (int, error) {
	if err := validateExec(&hostapi.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: req.Env}); err != nil {
		return 0, err
	}
	if err := guest.CheckTag(req.Tag); err != nil {
		return 0, errdefs.Invalidf("%v", err)
	}
	if req.PTY != nil {
		if err := guest.CheckTermSize(req.PTY.Cols, req.PTY.Rows); err != nil {
			return 0, errdefs.Invalidf("%v", err)
		}
	}
	c, sb, err := m.guest(ctx, id)
	if err != nil {
		return 0, err
	}
	greq := guest.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: execEnv(sb, req.Env), Cwd: req.Cwd, User: req.User, Tag: req.Tag}
	// Watched before the guest has it: a snapshot saved meanwhile knows it may hold a process
	// (snapshot.Record.NoProcs). A start that fails costs one look.
	sb.watchProcs()
	var pid int
	if req.PTY != nil {
		pid, err = c.StartProcessPTY(ctx, greq, req.PTY.Cols, req.PTY.Rows)
	} else {
		pid, err = c.StartProcess(ctx, greq, req.Stdin)
	}
	sb.watchProcs() // the guest has it now (exits.go: watchProcs)
	if err != nil {
		return 0, m.callErr(sb, err)
	}
	return pid, nil
}

// WithGuest runs call with the sandbox's guest agent (waking a hibernated sandbox first); a failed
// call is explained (callErr): a VMM that died meanwhile is a conflict naming why.
func (m *Manager) WithGuest(ctx context.Context, id string, call func(*guest.Client) error) error {
	c, sb, err := m.guest(ctx, id)
	if err != nil {
		return err
	}
	if err := call(c); err != nil {
		return m.callErr(sb, err)
	}
	return nil
}

// Reach returns where the host reaches a running sandbox's ports (waking it first), and marks it
// in use until done is called.
func (m *Manager) Reach(ctx context.Context, id string) (addr string, done func(), err error) {
	sb, err := m.awake(ctx, id)
	if err != nil {
		return "", nil, err
	}
	sb.mu.Lock()
	addr, state := sb.rec.GuestAddr, sb.rec.State
	sb.mu.Unlock()
	if state != StateRunning {
		return "", nil, errdefs.Conflictf("sandbox %s is %s", id, state)
	}
	if addr == "" {
		return "", nil, errdefs.Conflictf("sandbox %s has no network", id)
	}
	return addr, m.InUse(id), nil
}

// Relay connects to port on a running sandbox's loopback through its guest agent (waking it
// first) instead of its network, and marks it in use until done is called.
func (m *Manager) Relay(ctx context.Context, id string, port int) (conn net.Conn, done func(), err error) {
	c, sb, err := m.guest(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	conn, err = c.DialPort(ctx, port)
	if err != nil {
		return nil, nil, m.callErr(sb, err)
	}
	return conn, m.InUse(id), nil
}
