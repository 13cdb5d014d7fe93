package guest

import (
	"context"
	"fmt"
)

// StartProcess starts a background process (process.go) and returns its pid at once. req.Timeout
// is ignored: a background process runs until it exits or is killed. stdin: keep a pipe open to
// its stdin for WriteStdin (else it reads /dev/null).
func (c *Client) StartProcess(ctx context.Context, req ExecRequest, stdin bool) (int, error) {
	var out ProcessStarted
	err := c.simple(ctx, &Request{Op: OpProcStart, Cmd: req.Cmd, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, User: req.User, Stdin: stdin, Tag: req.Tag},
		FrameResult, &out)
	return out.Pid, err
}

// StartProcessPTY starts a background process on a terminal of cols×rows (0: 80×24) whose input
// WriteStdin types (process.go).
func (c *Client) StartProcessPTY(ctx context.Context, req ExecRequest, cols, rows int) (int, error) {
	var out ProcessStarted
	err := c.simple(ctx, &Request{Op: OpProcStart, Cmd: req.Cmd, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, User: req.User, Tag: req.Tag,
		PTY: true, Cols: cols, Rows: rows}, FrameResult, &out)
	return out.Pid, err
}

// ResizeProcess sets a PTY process's terminal size.
func (c *Client) ResizeProcess(ctx context.Context, pid, cols, rows int) error {
	return c.simple(ctx, &Request{Op: OpProcResize, Pid: pid, Cols: cols, Rows: rows}, FrameResult, nil)
}

// ListProcesses lists the background processes, running and recently exited.
func (c *Client) ListProcesses(ctx context.Context) ([]ProcessInfo, error) {
	var out ProcessList
	err := c.simple(ctx, &Request{Op: OpProcList}, FrameResult, &out)
	return out.Processes, err
}

// ProcessOutput reads a process's output from offset on, calling accepted (if not nil) once the
// guest took the request and fn with each chunk (its Data is only valid during the call), and
// returns how the stream ended: the exit, or (not following) Running with where to resume.
// Following waits for output until the process exits or ctx ends.
func (c *Client) ProcessOutput(ctx context.Context, pid int, offset int64, follow bool, accepted func(), fn func(OutputChunk) error) (ProcessEnd, error) {
	cl, err := c.start(ctx, &Request{Op: OpProcOutput, Pid: pid, Offset: offset, Follow: follow})
	if err != nil {
		return ProcessEnd{}, err
	}
	defer cl.finish()
	for {
		typ, p, err := cl.next()
		if err != nil {
			return ProcessEnd{}, err
		}
		switch typ {
		case FrameResult: // the guest took the request
			if accepted != nil {
				accepted()
			}
		case FrameStdout, FrameStderr:
			off, data, ok := DecodeOutputChunk(p)
			if !ok {
				return ProcessEnd{}, &ProtocolError{Msg: "short output frame"}
			}
			if err := fn(OutputChunk{Stderr: typ == FrameStderr, Offset: off, Data: data}); err != nil {
				return ProcessEnd{}, err
			}
		case FrameExit:
			return decodeFrame[ProcessEnd](p, "end")
		default:
			return ProcessEnd{}, &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in proc_output", typ)}
		}
	}
}

// WriteStdin writes data to a process's stdin pipe and closes it after if eof.
func (c *Client) WriteStdin(ctx context.Context, pid int, data []byte, eof bool) error {
	cl, err := c.start(ctx, &Request{Op: OpProcStdin, Pid: pid, EOF: eof})
	if err != nil {
		return err
	}
	defer cl.finish()
	for len(data) > 0 {
		n := min(len(data), DataChunk)
		if err := WriteFrame(cl.st, FrameData, data[:n]); err != nil {
			return cl.fail(err)
		}
		data = data[n:]
	}
	if err := WriteFrame(cl.st, FrameEOF, nil); err != nil {
		return cl.fail(err)
	}
	return cl.expect(FrameResult, nil)
}

// SignalProcess sends an allowed signal (ProcessSignals) to a process's group.
func (c *Client) SignalProcess(ctx context.Context, pid int, signal string) error {
	return c.simple(ctx, &Request{Op: OpProcSignal, Pid: pid, Signal: signal}, FrameResult, nil)
}

// KillProcess kills a process's whole tree and returns it as it is after (usually exited).
func (c *Client) KillProcess(ctx context.Context, pid int) (ProcessInfo, error) {
	var out ProcessInfo
	err := c.simple(ctx, &Request{Op: OpProcKill, Pid: pid}, FrameResult, &out)
	return out, err
}
