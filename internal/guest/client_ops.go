package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// call is one request on its own yamux stream.
type call struct {
	c    *Client
	ctx  context.Context
	st   *yamux.Stream
	fr   *FrameReader
	stop func() bool
	once sync.Once
	done chan struct{} // closed by finish: ends the watchdog
	// frames counts frames received; the watchdog pings the guest while it stands still.
	frames atomic.Int64
	// silent is set when the guest did not answer the watchdog's ping.
	silent atomic.Bool
}

// start opens a stream and sends the request. If the session turns out to be
// dead before the request got out, it reconnects once and retries: nothing
// reached the guest, so even exec is safe to resend.
func (c *Client) start(ctx context.Context, req *Request) (*call, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sess, err := c.session(ctx)
		if err != nil {
			return nil, err
		}
		st, err := sess.OpenStream()
		if err == nil {
			if err = WriteJSONFrame(st, FrameRequest, req); err != nil {
				st.Close()
			}
		}
		if err != nil {
			if attempt == 0 && (st == nil || sess.IsClosed()) {
				c.dropSession(sess)
				continue
			}
			return nil, c.ctxErr(ctx, fmt.Errorf("%w: %v", ErrConnectionLost, err))
		}
		cl := &call{c: c, ctx: ctx, st: st, fr: NewFrameReader(st), done: make(chan struct{})}
		// ctx cancellation closes the stream (the guest then aborts, e.g. kills the
		// exec) and wakes our own blocked reads and writes.
		cl.stop = context.AfterFunc(ctx, func() {
			st.Close()
			st.SetDeadline(time.Unix(1, 0))
		})
		go cl.watch(sess)
		return cl, nil
	}
}

// watch pings the guest while the call waits without frames: a call may legitimately wait
// long (a quiet command), but the peer must keep answering pings, or the session is dropped and
// the call fails with ErrConnectionLost (a silent or wrong peer holds the guest's port).
func (cl *call) watch(sess *yamux.Session) {
	t := time.NewTimer(probeAfter)
	defer t.Stop()
	seen := cl.frames.Load()
	for {
		select {
		case <-cl.done:
			return
		case <-t.C:
		}
		if n := cl.frames.Load(); n != seen {
			seen = n
			t.Reset(probeEvery)
			continue
		}
		if probe(sess, cl.c.replyTimeout) {
			// Dropping the session fails every call on it with ErrConnectionLost; the next call
			// re-dials, with a bounded handshake.
			cl.silent.Store(true)
			cl.c.dropSession(sess)
			return
		}
		t.Reset(probeEvery)
	}
}

// finish releases the stream; safe to call more than once.
func (cl *call) finish() {
	cl.once.Do(func() {
		close(cl.done)
		cl.stop()
		cl.st.Close()
		cl.st.SetDeadline(time.Unix(1, 0)) // wake helper goroutines still blocked on it
	})
}

func (cl *call) fail(err error) error {
	if cl.ctx.Err() != nil {
		return cl.ctx.Err()
	}
	select {
	case <-cl.c.closed:
		return ErrClosed
	default:
	}
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return err
	}
	if cl.silent.Load() {
		return fmt.Errorf("%w: the guest agent did not answer a ping within %v (is another process holding its channel?)", ErrConnectionLost, cl.c.replyTimeout)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %v", ErrConnectionLost, err)
}

// next returns the next frame; a FrameError becomes a *Error.
func (cl *call) next() (byte, []byte, error) {
	typ, p, err := cl.fr.Next()
	if err != nil {
		return 0, nil, cl.fail(err)
	}
	cl.frames.Add(1)
	if typ == FrameError {
		ge := &Error{}
		if json.Unmarshal(p, ge) != nil || ge.Code == "" {
			ge = &Error{Code: CodeInternal, Message: "malformed error frame"}
		}
		return 0, nil, ge
	}
	return typ, p, nil
}

// decodeFrame decodes the JSON payload p of a what frame (exit, stat, ...); a payload that does not
// decode is a ProtocolError naming the frame.
func decodeFrame[T any](p []byte, what string) (T, error) {
	var v T
	if err := json.Unmarshal(p, &v); err != nil {
		var zero T
		return zero, &ProtocolError{Msg: "bad " + what + " frame: " + err.Error()}
	}
	return v, nil
}

// expect reads one frame of type want and decodes its JSON into v.
func (cl *call) expect(want byte, v any) error {
	typ, p, err := cl.next()
	if err != nil {
		return err
	}
	if typ != want {
		return &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q, want %q", typ, want)}
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(p, v); err != nil {
		return &ProtocolError{Msg: "bad JSON in frame: " + err.Error()}
	}
	return nil
}

func (c *Client) simple(ctx context.Context, req *Request, want byte, v any) error {
	cl, err := c.start(ctx, req)
	if err != nil {
		return err
	}
	defer cl.finish()
	return cl.expect(want, v)
}

// opened starts req and reads its empty FrameResult (the op began; its frames follow on the
// returned call); on failure the call is finished.
func (c *Client) opened(ctx context.Context, req *Request) (*call, error) {
	cl, err := c.start(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := cl.expect(FrameResult, nil); err != nil {
		cl.finish()
		return nil, err
	}
	return cl, nil
}

// Exec runs a command. stdout/stderr receive chunks as they arrive (nil
// discards); stdin (may be nil) is copied to the process until EOF. A stdin
// reader that never returns keeps its copying goroutine alive until it does.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	wr := &Request{
		Op: OpExec, Cmd: req.Cmd, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, User: req.User,
		Stdin: stdin != nil,
	}
	if req.Timeout > 0 {
		wr.TimeoutMs = int64((req.Timeout + time.Millisecond - 1) / time.Millisecond)
	}
	cl, err := c.start(ctx, wr)
	if err != nil {
		return ExecResult{}, err
	}
	defer cl.finish()

	var stdinErr atomic.Pointer[error]
	if stdin != nil {
		go func() {
			buf := make([]byte, DataChunk)
			for {
				n, rerr := stdin.Read(buf)
				if n > 0 {
					if WriteFrame(cl.st, FrameData, buf[:n]) != nil {
						return
					}
				}
				if rerr == io.EOF {
					WriteFrame(cl.st, FrameEOF, nil)
					return
				}
				if rerr != nil {
					// Abort: closing the stream makes the guest kill the command.
					e := fmt.Errorf("guest exec: reading stdin: %w", rerr)
					stdinErr.Store(&e)
					cl.finish()
					return
				}
			}
		}()
	}

	for {
		typ, p, err := cl.next()
		if err != nil {
			if e := stdinErr.Load(); e != nil {
				return ExecResult{}, *e
			}
			return ExecResult{}, err
		}
		switch typ {
		case FrameStdout, FrameStderr:
			w := stdout
			if typ == FrameStderr {
				w = stderr
			}
			if w != nil {
				if _, werr := w.Write(p); werr != nil {
					return ExecResult{}, fmt.Errorf("guest exec: writing output: %w", werr)
				}
			}
		case FrameExit:
			return decodeFrame[ExecResult](p, "exit")
		default:
			return ExecResult{}, &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in exec", typ)}
		}
	}
}

// ReadFile streams a file. The returned reader yields the content and ends
// with io.EOF only if the whole file arrived; Close it when done. ctx also
// bounds reading the body.
func (c *Client) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, FileInfo, error) {
	cl, err := c.start(ctx, &Request{Op: OpRead, Path: path, User: user})
	if err != nil {
		return nil, FileInfo{}, err
	}
	var fi FileInfo
	if err := cl.expect(FrameStat, &fi); err != nil {
		cl.finish()
		return nil, FileInfo{}, err
	}
	return &fileReader{cl: cl}, fi, nil
}

type fileReader struct {
	cl      *call
	pending []byte // points into the frame reader's buffer; drained before the next frame
	err     error
}

func (r *fileReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		typ, payload, err := r.cl.next()
		switch {
		case err != nil:
			r.err = err
			r.cl.finish()
		case typ == FrameData:
			r.pending = payload
		case typ == FrameEOF:
			r.err = io.EOF
			r.cl.finish()
		default:
			r.err = &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in read", typ)}
			r.cl.finish()
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

func (r *fileReader) Close() error {
	r.cl.finish()
	return nil
}

// WriteFile writes r to path atomically (temp file + rename in the guest),
// creating missing parents. mode 0 means 0644.
func (c *Client) WriteFile(ctx context.Context, path, user string, mode os.FileMode, r io.Reader) (FileInfo, error) {
	if mode == 0 {
		mode = 0o644
	}
	return uploadOp[FileInfo](ctx, c, &Request{Op: OpWrite, Path: path, User: user, Mode: fmt.Sprintf("%04o", unixPerm(mode))}, r, FrameStat)
}

// uploadOp starts req, uploads r on it (call.upload) and returns the answer, a frame of type want,
// decoded into a T.
func uploadOp[T any](ctx context.Context, c *Client, req *Request, r io.Reader, want byte) (T, error) {
	var out T
	cl, err := c.start(ctx, req)
	if err != nil {
		return out, err
	}
	defer cl.finish()
	err = cl.upload(r, want, &out)
	return out, err
}

// upload sends r as FrameData frames and a FrameEOF, and reads the answer: one frame of type
// want into v. An early answer (an error) stops the sending.
func (cl *call) upload(r io.Reader, want byte, v any) error {
	resc := make(chan error, 1)
	go func() {
		err := cl.expect(want, v)
		resc <- err
		if err != nil {
			// An early answer is an error: stop the sender if it is blocked on the window.
			cl.st.SetWriteDeadline(time.Unix(1, 0))
		}
	}()
	buf := make([]byte, DataChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if WriteFrame(cl.st, FrameData, buf[:n]) != nil {
				break // the answer (an error) or ctx explains why
			}
		}
		if rerr == io.EOF {
			WriteFrame(cl.st, FrameEOF, nil)
			break
		}
		if rerr != nil {
			// Closing without data-EOF makes the guest drop what it wrote so far.
			cl.finish()
			return fmt.Errorf("guest upload: reading source: %w", rerr)
		}
	}
	return <-resc
}

// unixPerm converts Go's FileMode bits to the octal bits of chmod(2).
func unixPerm(m os.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// List returns the entries under path, depth levels deep (0 means 1, max 10),
// directories before their contents, names sorted within a directory.
func (c *Client) List(ctx context.Context, path, user string, depth int) ([]FileInfo, error) {
	cl, err := c.start(ctx, &Request{Op: OpList, Path: path, User: user, Depth: depth})
	if err != nil {
		return nil, err
	}
	defer cl.finish()
	out := []FileInfo{}
	for {
		typ, p, err := cl.next()
		if err != nil {
			return nil, err
		}
		switch typ {
		case FrameStat:
			fi, err := decodeFrame[FileInfo](p, "stat")
			if err != nil {
				return nil, err
			}
			out = append(out, fi)
		case FrameEOF:
			return out, nil
		default:
			return nil, &ProtocolError{Msg: fmt.Sprintf("unexpected frame %q in list", typ)}
		}
	}
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path, user string) (FileInfo, error) {
	var fi FileInfo
	err := c.simple(ctx, &Request{Op: OpStat, Path: path, User: user}, FrameStat, &fi)
	return fi, err
}

// Mkdir creates path and missing parents (mkdir -p).
func (c *Client) Mkdir(ctx context.Context, path, user string) error {
	return c.simple(ctx, &Request{Op: OpMkdir, Path: path, User: user}, FrameResult, nil)
}

// Remove deletes a file or an empty directory, or a whole tree if recursive.
func (c *Client) Remove(ctx context.Context, path, user string, recursive bool) error {
	return c.simple(ctx, &Request{Op: OpRemove, Path: path, User: user, Recursive: recursive}, FrameResult, nil)
}

// Move renames from to to (rename(2) semantics; copies across filesystems).
func (c *Client) Move(ctx context.Context, from, to, user string) error {
	return c.simple(ctx, &Request{Op: OpMove, From: from, To: to, User: user}, FrameResult, nil)
}

// Health asks the agent how it is.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.simple(ctx, &Request{Op: OpHealth}, FrameResult, &h)
	return h, err
}

// Usage asks the agent for the guest's resource figures.
func (c *Client) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	err := c.simple(ctx, &Request{Op: OpUsage}, FrameResult, &u)
	return u, err
}

// Mount mounts the guest's ext4 disk with virtio serial at path (as root, whatever the guest's
// users), waiting until the guest sees the disk at sizeBytes; grow runs resize2fs afterwards.
func (c *Client) Mount(ctx context.Context, serial, path string, sizeBytes int64, readOnly, grow bool) error {
	return c.simple(ctx, &Request{Op: OpMount, Serial: serial, Path: path, SizeBytes: sizeBytes, ReadOnly: readOnly, Grow: grow},
		FrameResult, nil)
}

// Sync flushes the guest's filesystems (sync(2)); call before a snapshot.
func (c *Client) Sync(ctx context.Context) error {
	return c.simple(ctx, &Request{Op: OpSync}, FrameResult, nil)
}

// DialPort connects to TCP port on the guest's loopback through the agent (OpDial): the returned
// connection carries that port's bytes both ways over the agent's channel, not the guest's
// network. ctx bounds the dial only; closing the connection ends it.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	cl, err := c.opened(ctx, &Request{Op: OpDial, Port: port})
	if err != nil {
		return nil, err
	}
	// The connection is the caller's now: no more watchdog, no more ctx.
	cl.once.Do(func() {
		close(cl.done)
		cl.stop()
	})
	return cl.st, nil
}
