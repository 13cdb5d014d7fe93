package guest

import (
	"context"
	"fmt"
)

// An interactive terminal (op pty): the command (default: the user's login shell) runs on a new
// pseudo-terminal as its session leader, with TERM=xterm-256color unless the env says otherwise.
//
//	host → guest  FrameRequest Request{Op: pty, Cmd|Argv, Env, Cwd, User, Cols, Rows}, then
//	              FrameData (keystrokes), FrameRequest Request{Op: "resize", Cols, Rows}
//	guest → host  FrameResult {} once it started (or FrameError), FrameStdout (what the terminal
//	              shows), then FrameExit ExecResult
//
// The host closing the stream hangs the terminal up: SIGHUP to its process group, SIGKILL if
// it is still there a moment later.

// OpResize is the in-stream request that resizes a pty.
const OpResize = "resize"

// Terminal size bounds (a size out of them is refused).
const (
	DefaultCols = 80
	DefaultRows = 24
	MaxTermSize = 1000
)

// PTY is one terminal session from the host's side. Read its output with Next; Input and Resize
// may be called from another goroutine meanwhile.
type PTY struct {
	cl *call
}

// OpenPTY starts a terminal session (cols, rows 0: 80×24) and returns once its program started
// (a command that cannot start is the error).
func (c *Client) OpenPTY(ctx context.Context, req ExecRequest, cols, rows int) (*PTY, error) {
	cl, err := c.opened(ctx, &Request{Op: OpPTY, Cmd: req.Cmd, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, User: req.User, Cols: cols, Rows: rows})
	if err != nil {
		return nil, err
	}
	return &PTY{cl: cl}, nil
}

// Input sends keystrokes (any bytes) to the terminal.
func (p *PTY) Input(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), DataChunk)
		if err := WriteFrame(p.cl.st, FrameData, b[:n]); err != nil {
			return p.cl.fail(err)
		}
		b = b[n:]
	}
	return nil
}

// Resize changes the terminal's size (the program gets SIGWINCH).
func (p *PTY) Resize(cols, rows int) error {
	if err := WriteJSONFrame(p.cl.st, FrameRequest, Request{Op: OpResize, Cols: cols, Rows: rows}); err != nil {
		return p.cl.fail(err)
	}
	return nil
}

// Next returns the next output (valid until the next call), or the exit once the session ended.
func (p *PTY) Next() ([]byte, *ExecResult, error) {
	typ, b, err := p.cl.next()
	if err != nil {
		return nil, nil, err
	}
	switch typ {
	case FrameStdout:
		return b, nil, nil
	case FrameExit:
		res, err := decodeFrame[ExecResult](b, "exit")
		if err != nil {
			return nil, nil, err
		}
		return nil, &res, nil
	}
	return nil, nil, &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in pty", typ)}
}

// Close ends the session (the guest hangs the terminal up if it still runs).
func (p *PTY) Close() { p.cl.finish() }

// CheckTermSize refuses a terminal size outside 1 to MaxTermSize (0 stands for the default).
func CheckTermSize(cols, rows int) error {
	if cols < 0 || rows < 0 || cols > MaxTermSize || rows > MaxTermSize {
		return fmt.Errorf("terminal size %dx%d is outside 1 to %d", cols, rows, MaxTermSize)
	}
	return nil
}
