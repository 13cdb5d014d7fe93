package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a minimal QEMU Machine Protocol client: one command at a time, events skipped. QMP is a
// line of JSON each way, and we need only a handful of commands, so a library would add more
// surface than it saves.
type qmp struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

// dialQMP connects to the QMP socket, retrying while QEMU is still creating it, and negotiates
// capabilities. alive is polled so a VMM that died at start-up fails fast instead of timing out.
func dialQMP(ctx context.Context, path string, alive func() bool) (*qmp, error) {
	var conn net.Conn
	for delay := 500 * time.Microsecond; ; {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", path)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) && !isRefused(err) {
			return nil, err
		}
		if alive != nil && !alive() {
			return nil, errVMMGone
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("QMP socket %s: %w", path, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 10*time.Millisecond {
			delay *= 2
		}
	}
	q := &qmp{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	// A new VMM's socket accepts before QEMU is up (start binds it): the greeting is the wait.
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Minute)
	}
	conn.SetDeadline(dl)
	if _, err := q.r.ReadBytes('\n'); err != nil { // greeting
		conn.Close()
		return nil, fmt.Errorf("QMP greeting: %w", err)
	}
	if err := q.run(ctx, "qmp_capabilities", nil, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

var errVMMGone = errors.New("VMM process is gone")

func isRefused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		var se *os.SyscallError
		if errors.As(op.Err, &se) {
			return se.Syscall == "connect"
		}
	}
	return false
}

type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

// lock takes the connection for one exchange, bounded by ctx's deadline (30 s without one), and
// returns its unlock.
func (q *qmp) lock(ctx context.Context) (unlock func()) {
	q.mu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		q.conn.SetDeadline(dl)
	} else {
		q.conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	return q.mu.Unlock
}

// run executes one command; out (may be nil) receives the "return" value.
func (q *qmp) run(ctx context.Context, cmd string, args any, out any) error {
	defer q.lock(ctx)()
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	b, _ := json.Marshal(msg)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	return q.readReply(cmd, out)
}

// reply reads the answer to a command sent by other means (passFD).
func (q *qmp) reply(ctx context.Context, cmd string, out any) error {
	defer q.lock(ctx)()
	return q.readReply(cmd, out)
}

func (q *qmp) readReply(cmd string, out any) error {
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("QMP %s: %w", cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *qmpError       `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return fmt.Errorf("QMP %s: bad reply %q", cmd, line)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return fmt.Errorf("QMP %s: %s: %s", cmd, resp.Error.Class, resp.Error.Desc)
		default:
			if out != nil && len(resp.Return) > 0 {
				return json.Unmarshal(resp.Return, out)
			}
			return nil
		}
	}
}

func (q *qmp) close() { q.conn.Close() }

// status returns the VM run state ("running", "paused", "inmigrate", "postmigrate", …).
func (q *qmp) status(ctx context.Context) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	err := q.run(ctx, "query-status", nil, &st)
	return st.Status, err
}

// ignoreShared turns on x-ignore-shared: RAM in a file-backed region is not streamed, the
// snapshot holds only device state. QEMU 7.2 has no -global for it: set it on both sides.
func (q *qmp) ignoreShared(ctx context.Context) error {
	return q.run(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	}, nil)
}

// passFD hands f to QEMU under name (QMP getfd, the descriptor travelling as SCM_RIGHTS on the
// same message). A jailed VMM can open no host path, and with spawn=deny it cannot run `cat`
// either: migration streams go through descriptors the agent opened ("fd:NAME" URIs).
func (q *qmp) passFD(ctx context.Context, name string, f *os.File) error {
	uc, ok := q.conn.(*net.UnixConn)
	if !ok {
		return errors.New("QMP getfd needs a unix socket")
	}
	unlock := q.lock(ctx) // ctx's deadline, not the last exchange's (a prepared VMM's is long past)
	b, _ := json.Marshal(map[string]any{"execute": "getfd", "arguments": map[string]any{"fdname": name}})
	_, _, err := uc.WriteMsgUnix(append(b, '\n'), unix.UnixRights(int(f.Fd())), nil)
	unlock()
	if err != nil {
		return fmt.Errorf("QMP getfd: %w", err)
	}
	return q.reply(ctx, "getfd", nil)
}
