package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// After the main process exits we forward at most this much more output that
// was already sitting in a pipe; the rest (a background child still writing)
// is drained into nothing so the child does not die of SIGPIPE.
const maxDrainAfterExit = 4 << 20

// stdinPoll is how long a blocked stdin write waits before checking that the
// host is still there (a child that never reads stdin must not make us miss
// the host going away).
const stdinPoll = 250 * time.Millisecond

func (a *Agent) opExec(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	started := time.Now()
	x, err := a.prepareExec(req)
	if err != nil {
		w.fail(err)
		return
	}

	var stdinR, stdinW *os.File
	if req.Stdin {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			w.fail(err)
			return
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		w.fail(err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, outR, outW)
		w.fail(err)
		return
	}
	cmd := &exec.Cmd{
		Path:        x.path,
		Args:        x.argv,
		Env:         x.env,
		Dir:         x.cwd,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: x.cred},
	}
	if stdinR != nil {
		cmd.Stdin = stdinR
	}
	err = cmd.Start()
	closeAll(stdinR, outW, errW) // the child has its copies
	if err != nil {
		closeAll(stdinW, outR, errR)
		w.fail(err)
		return
	}
	pgid := cmd.Process.Pid
	killGroup := func() { syscall.Kill(-pgid, syscall.SIGKILL) }

	var timedOut atomic.Bool
	var timer *time.Timer
	if req.TimeoutMs > 0 {
		timer = time.AfterFunc(time.Duration(req.TimeoutMs)*time.Millisecond, func() {
			timedOut.Store(true)
			killGroup()
		})
	}

	procDone := make(chan struct{})
	in := &execInput{st: st, fr: fr, stdin: stdinW, procDone: procDone, kill: killGroup}
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		in.run()
	}()

	out := &execOutput{w: w}
	var wg sync.WaitGroup
	wg.Add(2)
	go out.pump(outR, guest.FrameStdout, &wg)
	go out.pump(errR, guest.FrameStderr, &wg)

	cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	close(procDone)
	// Whatever the process wrote before exiting is in the pipes now; the pumps
	// forward it and stop waiting for writers that outlive the process.
	outR.SetReadDeadline(time.Now())
	errR.SetReadDeadline(time.Now())
	wg.Wait()

	in.stop()
	<-inDone
	if pe := in.protoErr.Load(); pe != nil {
		w.fail(gerr(guest.CodeInvalidArgument, (*pe).Error()))
		return
	}
	res := guest.ExecResult{TimedOut: timedOut.Load(), DurationMs: time.Since(started).Milliseconds()}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		res.Signal = unix.SignalName(ws.Signal())
		res.ExitCode = 128 + int(ws.Signal()) // shell convention
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	w.json(guest.FrameExit, res)
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

type preparedExec struct {
	path string
	argv []string
	env  []string
	cwd  string
	cred *syscall.Credential
}

// prepareExec validates the request and resolves everything that can fail
// before a process exists, so those failures are error frames with good codes.
func (a *Agent) prepareExec(req *guest.Request) (*preparedExec, error) {
	var argv []string
	switch {
	case req.Cmd != "" && len(req.Argv) > 0:
		return nil, gerr(guest.CodeInvalidArgument, "set cmd or argv, not both")
	case req.Cmd != "":
		argv = []string{"/bin/sh", "-c", req.Cmd}
	case len(req.Argv) > 0 && req.Argv[0] != "":
		argv = req.Argv
	default:
		return nil, gerr(guest.CodeInvalidArgument, "cmd or argv is required")
	}
	for _, s := range argv {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, gerr(guest.CodeInvalidArgument, "argv contains a NUL byte")
		}
	}
	u, err := a.lookupUser(req.User)
	if err != nil {
		return nil, err
	}
	env, pathEnv, err := buildEnv(u, req.Env)
	if err != nil {
		return nil, err
	}

	cwd := ""
	if req.Cwd != "" {
		if cwd, err = cleanPath("cwd", req.Cwd); err != nil {
			return nil, err
		}
		err := asUser(u, func() error { return isDir(cwd, "cwd "+cwd) })
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, gerr(guest.CodeNotFound, "cwd "+cwd+" does not exist")
			}
			return nil, err
		}
	} else {
		cwd = "/"
		// Home if usable (nobody's is /nonexistent), else /.
		asUser(u, func() error {
			if fi, err := os.Stat(u.Home); err == nil && fi.IsDir() && filepath.IsAbs(u.Home) {
				cwd = u.Home
			}
			return nil
		})
	}

	path, err := lookPath(argv[0], pathEnv, cwd)
	if err != nil {
		return nil, err
	}

	var cred *syscall.Credential
	if euid := os.Geteuid(); euid == 0 {
		if u.UID != 0 {
			cred = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
		}
	} else if uint32(euid) != u.UID {
		return nil, gerr(guest.CodePermissionDenied, fmt.Sprintf("agent is not root and cannot run as %q", u.Name))
	}
	return &preparedExec{path: path, argv: argv, env: env, cwd: cwd, cred: cred}, nil
}

// buildEnv is a clean login-like environment overlaid with the request's.
func buildEnv(u *account, extra map[string]string) ([]string, string, error) {
	shell := u.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	m := map[string]string{
		"PATH":    defaultPath,
		"HOME":    u.Home,
		"USER":    u.Name,
		"LOGNAME": u.Name,
		"SHELL":   shell,
		"LANG":    "C.UTF-8",
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return nil, "", gerr(guest.CodeInvalidArgument, fmt.Sprintf("invalid env var %q", k))
		}
		m[k] = v
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, m["PATH"], nil
}

// lookPath resolves argv[0] with the child's PATH (not the agent's).
func lookPath(name, pathEnv, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		if _, err := os.Stat(name); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", gerr(guest.CodeNotFound, fmt.Sprintf("executable %q not found", name))
			}
			return "", err
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", gerr(guest.CodeNotFound, fmt.Sprintf("executable %q not found in PATH", name))
}

// execInput reads what the host sends after the request: stdin frames, and,
// by the stream ending early, the host going away (→ kill the process group).
type execInput struct {
	st       *yamux.Stream
	fr       *guest.FrameReader
	stdin    *os.File // nil: no stdin requested (the child got /dev/null)
	procDone <-chan struct{}
	kill     func()
	protoErr atomic.Pointer[error]

	dmu      sync.Mutex // read deadline changes: stop must win over streamDead's reset
	stopping bool
}

// stop makes the blocked frame read return (opExec is done with the input).
func (in *execInput) stop() {
	in.dmu.Lock()
	in.stopping = true
	in.st.SetReadDeadline(pastDeadline)
	in.dmu.Unlock()
}

var errStopped = errors.New("stopped")

func (in *execInput) run() {
	defer func() {
		if in.stdin != nil {
			in.stdin.Close()
		}
	}()
	for {
		typ, p, err := in.fr.Next()
		if err != nil {
			if errors.Is(err, yamux.ErrTimeout) {
				return // opExec is finished with us
			}
			var pe *guest.ProtocolError
			if errors.As(err, &pe) {
				in.protoErr.Store(&err) // answered with an error frame once the process is gone
			} else {
				// The host is gone: release output pumps blocked on its window now
				// rather than at its close timeout.
				in.st.SetWriteDeadline(pastDeadline)
			}
			in.hostGone()
			return
		}
		switch typ {
		case guest.FrameData:
			if in.stdin == nil {
				continue
			}
			if err := in.writeStdin(p); err != nil {
				if err == errStopped {
					in.hostGone()
					return
				}
				// The child closed its stdin (EPIPE): drop further input.
				in.stdin.Close()
				in.stdin = nil
			}
		case guest.FrameEOF:
			if in.stdin != nil {
				in.stdin.Close()
				in.stdin = nil
			}
		default:
			err := error(&guest.ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in exec", typ)})
			in.protoErr.Store(&err)
			in.hostGone()
			return
		}
	}
}

func (in *execInput) hostGone() {
	select {
	case <-in.procDone:
	default:
		in.kill()
	}
}

func (in *execInput) writeStdin(p []byte) error {
	for len(p) > 0 {
		in.stdin.SetWriteDeadline(time.Now().Add(stdinPoll))
		n, err := in.stdin.Write(p)
		p = p[n:]
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		select {
		case <-in.procDone:
			return errors.New("process exited")
		default:
		}
		if in.streamDead() {
			return errStopped
		}
	}
	return nil
}

// streamDead peeks at the stream without consuming data: a reset (the host's
// close timeout) or a drained, remotely closed stream means the host is gone.
func (in *execInput) streamDead() bool {
	if in.st.Session().IsClosed() {
		return true
	}
	in.dmu.Lock()
	defer in.dmu.Unlock()
	if in.stopping {
		return true
	}
	in.st.SetReadDeadline(pastDeadline)
	_, err := in.st.Read(nil)
	in.st.SetReadDeadline(time.Time{})
	return err != nil && !errors.Is(err, yamux.ErrTimeout)
}

// execOutput forwards stdout/stderr as frames as soon as they are produced.
type execOutput struct {
	w    *frameWriter
	dead atomic.Bool // host stopped accepting frames: keep draining, stop sending
}

func (o *execOutput) send(typ byte, p []byte) {
	if !o.dead.Load() && o.w.frame(typ, p) != nil {
		o.dead.Store(true)
	}
}

func (o *execOutput) pump(r *os.File, typ byte, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.send(typ, buf[:n])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break // the process exited while someone else still holds the pipe
		}
		r.Close() // EOF: no writer left
		return
	}
	// Forward what is buffered right now with non-blocking reads.
	r.SetReadDeadline(time.Time{})
	rc, err := r.SyscallConn()
	if err == nil {
		for left := maxDrainAfterExit; left > 0; {
			var n int
			var rerr error
			rc.Read(func(fd uintptr) bool {
				n, rerr = unix.Read(int(fd), buf)
				return true
			})
			if n == 0 && rerr == nil {
				r.Close()
				return
			}
			if n <= 0 {
				break // EAGAIN: empty
			}
			o.send(typ, buf[:n])
			left -= n
		}
	}
	go func() {
		io.Copy(io.Discard, r)
		r.Close()
	}()
}
