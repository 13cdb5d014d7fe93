package agent

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
)

// ttyGroup is the group that owns terminals (Debian's "tty"), so `write` and `mesg` work.
const ttyGroup = 5

// hangupGrace is how long a terminal's programs get after SIGHUP before SIGKILL.
const hangupGrace = 2 * time.Second

// opPTY runs a command on a new pseudo-terminal (internal/guest/pty.go has the protocol).
func (a *Agent) opPTY(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	started := time.Now()
	if req.Cmd == "" && len(req.Argv) == 0 {
		u, err := a.lookupUser(req.User)
		if err != nil {
			w.fail(err)
			return
		}
		shell := u.Shell
		if shell == "" || shell == "/usr/sbin/nologin" || shell == "/bin/false" {
			shell = "/bin/sh"
		}
		req.Argv = []string{shell, "-l"}
	}
	cmd, master, _, err := a.startOnTerminal(req)
	if err != nil {
		w.fail(err)
		return
	}
	defer master.Close()
	pid := cmd.Process.Pid
	w.frame(guest.FrameResult, []byte("{}")) // started: what follows is the terminal

	exited := make(chan struct{})
	var once sync.Once
	hangup := func() { // the host went away: what a closed terminal does, then make sure
		once.Do(func() {
			syscall.Kill(-pid, syscall.SIGHUP)
			syscall.Kill(-pid, syscall.SIGCONT)
			go func() {
				select {
				case <-exited:
				case <-time.After(hangupGrace):
					syscall.Kill(-pid, syscall.SIGKILL)
				}
			}()
		})
	}
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		ptyInput(fr, master, hangup)
	}()

	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 && w.frame(guest.FrameStdout, buf[:n]) != nil {
				hangup()
			}
			if err != nil {
				return // EIO once no one holds the terminal, or our deadline after the exit
			}
		}
	}()

	cmd.Wait()
	close(exited)
	// What the program wrote before it exited is in the terminal: forward it, then stop waiting
	// for children that still hold the terminal.
	master.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	<-outDone
	st.SetReadDeadline(pastDeadline)      // ends the input reader…
	master.SetWriteDeadline(pastDeadline) // …also when it waits on a terminal no one reads
	<-inDone
	res := guest.ExecResult{DurationMs: time.Since(started).Milliseconds()}
	res.ExitCode, res.Signal = exitStatus(cmd.ProcessState)
	w.json(guest.FrameExit, res)
}

// ptyInput copies keystrokes to the terminal and applies resizes until the stream ends; the host
// going away hangs the terminal up.
func ptyInput(fr *guest.FrameReader, master *os.File, hangup func()) {
	for {
		typ, p, err := fr.Next()
		if err != nil {
			if !errors.Is(err, yamux.ErrTimeout) { // not our own stop: the host left
				hangup()
			}
			return
		}
		switch typ {
		case guest.FrameData:
			master.Write(p) // a full terminal buffer blocks here, as a typist would wait
		case guest.FrameRequest:
			var r guest.Request
			if json.Unmarshal(p, &r) == nil && r.Op == guest.OpResize {
				if cols, rows, err := termSize(r.Cols, r.Rows); err == nil {
					pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
				}
			}
		case guest.FrameEOF:
			master.Write([]byte{4}) // ^D: end of input for a program reading the terminal
		}
	}
}

// termSize checks a terminal size; 0 means the default.
func termSize(cols, rows int) (int, int, error) {
	if cols == 0 {
		cols = guest.DefaultCols
	}
	if rows == 0 {
		rows = guest.DefaultRows
	}
	if err := guest.CheckTermSize(cols, rows); err != nil {
		return 0, 0, gerr(guest.CodeInvalidArgument, err.Error())
	}
	return cols, rows, nil
}

// withTerm is env with TERM=xterm-256color unless it sets TERM: what a program on a terminal of
// ours is told it runs on.
func withTerm(env map[string]string) map[string]string {
	if _, ok := env["TERM"]; ok {
		return env
	}
	out := map[string]string{"TERM": "xterm-256color"}
	for k, v := range env {
		out[k] = v
	}
	return out
}

// startOnTerminal starts req on a new terminal of req.Cols×req.Rows (0: the default size): a
// session leader whose stdin, stdout and stderr are the terminal, TERM set unless req.Env sets
// it. It returns the terminal's master side (the caller's to close) and what prepareExec made.
func (a *Agent) startOnTerminal(req *guest.Request) (*exec.Cmd, *os.File, *preparedExec, error) {
	cols, rows, err := termSize(req.Cols, req.Rows)
	if err != nil {
		return nil, nil, nil, err
	}
	req.Env = withTerm(req.Env)
	x, err := a.prepareExec(req)
	if err != nil {
		return nil, nil, nil, err
	}
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, nil, err
	}
	pty.Setsize(master, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if x.cred != nil {
		tty.Chown(int(x.cred.Uid), ttyGroup)
	}
	cmd := &exec.Cmd{Path: x.path, Args: x.argv, Env: x.env, Dir: x.cwd, Stdin: tty, Stdout: tty, Stderr: tty,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Setctty: true, Credential: x.cred}}
	err = cmd.Start()
	tty.Close()
	if err != nil {
		master.Close()
		return nil, nil, nil, err
	}
	return cmd, master, x, nil
}
