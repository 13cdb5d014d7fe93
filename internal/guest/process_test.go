package guest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/guest"
)

// output reads a process's output from off (following or not) into stdout/stderr strings.
func output(t *testing.T, ctx context.Context, c *guest.Client, pid int, off int64, follow bool) (string, string, guest.ProcessEnd) {
	t.Helper()
	var so, se bytes.Buffer
	next := off
	end, err := c.ProcessOutput(ctx, pid, off, follow, nil, func(ch guest.OutputChunk) error {
		if ch.Offset != next {
			return fmt.Errorf("chunk at offset %d, want %d (a gap or an overlap)", ch.Offset, next)
		}
		next += int64(len(ch.Data))
		if ch.Stderr {
			se.Write(ch.Data)
		} else {
			so.Write(ch.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if end.Next != next {
		t.Fatalf("end says resume at %d, chunks ended at %d", end.Next, next)
	}
	return so.String(), se.String(), end
}

func findProc(t *testing.T, c *guest.Client, pid int) guest.ProcessInfo {
	t.Helper()
	ps, err := c.ListProcesses(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Pid == pid {
			return p
		}
	}
	t.Fatalf("process %d not listed in %+v", pid, ps)
	return guest.ProcessInfo{}
}

// TestProcessOutputResumes: a reader that leaves mid-way and comes back from where it stopped
// gets every byte once, in order; the exit is listed afterwards.
func TestProcessOutputResumes(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: `for i in $(seq 1 40); do echo "out $i"; echo "err $i" >&2; sleep 0.01; done; exit 3`}, false)
	if err != nil {
		t.Fatal(err)
	}
	// A first reader takes what is there now and goes away.
	so1, se1, end := output(t, ctx, c, pid, 0, false)
	// A follower starts where it stopped and stays until the exit.
	so2, se2, fin := output(t, ctx, c, pid, end.Next, true)
	if fin.Running || fin.ExitCode != 3 {
		t.Fatalf("end of a followed stream = %+v, want exit 3", fin)
	}
	var want, wantErr strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if so1+so2 != want.String() || se1+se2 != wantErr.String() {
		t.Fatalf("stdout %q + %q, stderr %q + %q: not every line once in order", so1, so2, se1, se2)
	}
	// From any offset again (the whole output is kept), also after the exit.
	all, _, _ := output(t, ctx, c, pid, 0, true)
	if all != want.String() {
		t.Fatalf("re-read from 0 = %q", all)
	}
	p := findProc(t, c, pid)
	if p.Running || p.ExitCode == nil || *p.ExitCode != 3 || p.OutputEnd != fin.Next {
		t.Fatalf("listed %+v, want exited with 3 and output_end %d", p, fin.Next)
	}
}

// pidsOf parses the pids a command printed one per line.
func pidsOf(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not a pid: %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out
}

// waitLines follows the output until it has n lines of stdout.
func waitLines(t *testing.T, ctx context.Context, c *guest.Client, pid, n int) string {
	t.Helper()
	var so bytes.Buffer
	errEnough := errors.New("enough")
	_, err := c.ProcessOutput(ctx, pid, 0, true, nil, func(ch guest.OutputChunk) error {
		if !ch.Stderr {
			so.Write(ch.Data)
		}
		if strings.Count(so.String(), "\n") >= n {
			return errEnough
		}
		return nil
	})
	if err != errEnough {
		t.Fatalf("output ended before %d lines (%q): %v", n, so.String(), err)
	}
	return so.String()
}

// TestProcessKillTree: DELETE's kill reaches the group and a child that left it (setsid); a
// signal reaches the whole group.
func TestProcessKillTree(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: `sleep 300 & echo $!; setsid sleep 301 & echo $!; wait`}, false)
	if err != nil {
		t.Fatal(err)
	}
	kids := pidsOf(t, waitLines(t, ctx, c, pid, 2))
	info, err := c.KillProcess(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if info.Running || info.Signal != "SIGKILL" {
		t.Fatalf("after kill: %+v", info)
	}
	for _, k := range append(kids, pid) {
		waitGone(t, k)
	}

	// A process that exited at once, leaving a child in its group: DELETE still kills the child.
	pid, err = c.StartProcess(ctx, guest.ExecRequest{Cmd: `sleep 302 & echo $!`}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, end := output(t, ctx, c, pid, 0, true); end.Running || end.ExitCode != 0 {
		t.Fatalf("the parent should have exited: %+v", end)
	}
	so, _, _ := output(t, ctx, c, pid, 0, false)
	orphan := pidsOf(t, so)
	if _, err := c.KillProcess(ctx, pid); err != nil {
		t.Fatal(err)
	}
	waitGone(t, orphan[0])

	pid, err = c.StartProcess(ctx, guest.ExecRequest{Cmd: `sleep 300 & echo $!; wait`}, false)
	if err != nil {
		t.Fatal(err)
	}
	kids = pidsOf(t, waitLines(t, ctx, c, pid, 1))
	if err := c.SignalProcess(ctx, pid, "TERM"); err != nil {
		t.Fatal(err)
	}
	_, _, end := output(t, ctx, c, pid, 0, true)
	if end.Signal != "SIGTERM" {
		t.Fatalf("end after TERM = %+v", end)
	}
	waitGone(t, kids[0])
	// The process exited: another signal is a conflict, not a silent success.
	if err := c.SignalProcess(ctx, pid, "TERM"); guest.ErrorCode(err) != guest.CodeConflict {
		t.Fatalf("signal to an exited process: %v", err)
	}
}

func TestProcessStdin(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: `while read l; do echo "got $l"; done; echo bye`}, true)
	if err != nil {
		t.Fatal(err)
	}
	if p := findProc(t, c, pid); !p.Stdin || !p.Running {
		t.Fatalf("listed %+v, want running with stdin", p)
	}
	if err := c.WriteStdin(ctx, pid, []byte("one\n"), false); err != nil {
		t.Fatal(err)
	}
	if got := waitLines(t, ctx, c, pid, 1); got != "got one\n" {
		t.Fatalf("output %q", got)
	}
	if err := c.WriteStdin(ctx, pid, []byte("two\n"), true); err != nil {
		t.Fatal(err)
	}
	so, _, end := output(t, ctx, c, pid, 0, true)
	if so != "got one\ngot two\nbye\n" || end.ExitCode != 0 || end.Running {
		t.Fatalf("output %q, end %+v", so, end)
	}
	if err := c.WriteStdin(ctx, pid, []byte("late\n"), false); guest.ErrorCode(err) != guest.CodeConflict {
		t.Fatalf("stdin after close: %v", err)
	}
}

func TestProcessBadInput(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: `echo hi; sleep 300`}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.KillProcess(context.Background(), pid) })
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"unknown signal", c.SignalProcess(ctx, pid, "SEGV"), guest.CodeInvalidArgument},
		{"unknown pid", c.SignalProcess(ctx, 1, "TERM"), guest.CodeNotFound},
		{"stdin without a pipe", c.WriteStdin(ctx, pid, []byte("x"), false), guest.CodeConflict},
		{"oversize stdin", c.WriteStdin(ctx, pid, make([]byte, guest.MaxStdinWrite+1), false), guest.CodeInvalidArgument},
	} {
		if guest.ErrorCode(tc.err) != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, tc.err, tc.code)
		}
	}
	_, err = c.ProcessOutput(ctx, pid, 1<<40, false, nil, func(guest.OutputChunk) error { return nil })
	if guest.ErrorCode(err) != guest.CodeInvalidArgument {
		t.Errorf("offset past the end: %v", err)
	}
	if _, err := c.StartProcess(ctx, guest.ExecRequest{Argv: []string{"no-such-program"}}, false); guest.ErrorCode(err) != guest.CodeNotFound {
		t.Errorf("missing program: %v", err)
	}
}

// TestProcessOutputRing: output beyond the ring drops the oldest bytes; a read from 0 starts at
// the oldest kept and the offsets still count every byte.
func TestProcessOutputRing(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	const total = 3 * guest.ProcessOutputRing / 2
	pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total)}, false)
	if err != nil {
		t.Fatal(err)
	}
	end, err := c.ProcessOutput(ctx, pid, 0, true, nil, func(guest.OutputChunk) error { return nil }) // until the exit
	if err != nil {
		t.Fatal(err)
	}
	var n, first int64 = 0, -1
	_, err = c.ProcessOutput(ctx, pid, 0, false, nil, func(ch guest.OutputChunk) error {
		if first < 0 {
			first = ch.Offset
		}
		n += int64(len(ch.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p := findProc(t, c, pid)
	if end.Next != total || p.OutputEnd != total || p.OutputStart != total-guest.ProcessOutputRing {
		t.Fatalf("end %+v, listed %+v: want end %d, start %d", end, p, total, total-guest.ProcessOutputRing)
	}
	if first != p.OutputStart || first+n != total {
		t.Fatalf("read %d bytes from %d, want the kept %d from %d", n, first, guest.ProcessOutputRing, p.OutputStart)
	}
}

// TestProcessPTY: a process started on a terminal sees a terminal of the size asked for, a resize
// reaches it, stdin types into it (echoed, as a terminal does), its output is one stream, and the
// listing says pty; resizing a process without a terminal, or to a bad size, is refused.
func TestProcessPTY(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	pid, err := c.StartProcessPTY(ctx, guest.ExecRequest{Cmd: `stty size; read l; stty size; echo "[$l]"; tty -s && echo on-a-tty; echo "TERM=$TERM"`}, 100, 30)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitLines(t, ctx, c, pid, 1); !strings.Contains(got, "30 100") {
		t.Fatalf("first size %q, want 30 100", got)
	}
	if p := findProc(t, c, pid); !p.PTY || !p.Stdin || !p.Running {
		t.Fatalf("listed %+v, want a running pty process taking stdin", p)
	}
	if err := c.ResizeProcess(ctx, pid, 120, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, pid, []byte("hello\n"), false); err != nil {
		t.Fatal(err)
	}
	so, se, end := output(t, ctx, c, pid, 0, true)
	for _, want := range []string{"40 120", "[hello]", "on-a-tty", "TERM=xterm-256color"} {
		if !strings.Contains(so, want) {
			t.Errorf("output %q lacks %q", so, want)
		}
	}
	if se != "" || end.ExitCode != 0 {
		t.Errorf("stderr %q (a terminal has one stream), end %+v", se, end)
	}
	if err := c.ResizeProcess(ctx, pid, 80, 24); guest.ErrorCode(err) != guest.CodeConflict {
		t.Errorf("resize after the exit: %v", err)
	}
	plain, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: "sleep 300"}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.KillProcess(context.Background(), plain) })
	if err := c.ResizeProcess(ctx, plain, 80, 24); guest.ErrorCode(err) != guest.CodeConflict {
		t.Errorf("resize of a process without a terminal: %v", err)
	}
	if _, err := c.StartProcessPTY(ctx, guest.ExecRequest{Cmd: "true"}, 0, 99999); guest.ErrorCode(err) != guest.CodeInvalidArgument {
		t.Errorf("a terminal of 99999 rows: %v", err)
	}
}

// TestProcessExitNumbers: exits are numbered in the order they happen, and a handshake's READY
// carries the last number (what a restored copy inherits: guest.Ready.ExitSeq).
func TestProcessExitNumbers(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx := tctx(t)
	if n := c.Ready().ExitSeq; n != 0 {
		t.Fatalf("READY before any exit numbers %d", n)
	}
	var pids []int
	for i := range 2 {
		pid, err := c.StartProcess(ctx, guest.ExecRequest{Cmd: fmt.Sprintf("exit %d", i+3)}, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, end := output(t, ctx, c, pid, 0, true); end.Running {
			t.Fatalf("still running: %+v", end)
		}
		pids = append(pids, pid)
	}
	for i, pid := range pids {
		if p := findProc(t, c, pid); p.ExitSeq != uint64(i+1) {
			t.Fatalf("exit %d of %d numbered %d: %+v", i+1, pid, p.ExitSeq, p)
		}
	}
	c.Close()
	if n := connect(t, e).Ready().ExitSeq; n != 2 {
		t.Fatalf("READY after two exits numbers %d", n)
	}
}
