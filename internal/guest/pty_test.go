package guest_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/guest"
)

// readUntil reads terminal output until it contains want; it fails on the exit or an error.
func readUntil(t *testing.T, p *guest.PTY, want string) string {
	t.Helper()
	var seen strings.Builder
	for !strings.Contains(seen.String(), want) {
		b, res, err := p.Next()
		if err != nil || res != nil {
			t.Fatalf("terminal ended (%+v, %v) before %q; it showed %q", res, err, want, seen.String())
		}
		seen.Write(b)
	}
	return seen.String()
}

// TestPTY: a shell on a terminal of the asked size, a resize it sees, keystrokes in, its exit
// status out.
func TestPTY(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	p, err := c.OpenPTY(tctx(t), guest.ExecRequest{Argv: []string{"/bin/sh"}}, 100, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Input([]byte("stty size; echo $TERM; tty\n")); err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, p, "/dev/pts/")
	if !strings.Contains(out, "30 100") || !strings.Contains(out, "xterm-256color") {
		t.Fatalf("terminal showed %q, want its size 30 100 and TERM", out)
	}
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	p.Input([]byte("stty size\n"))
	readUntil(t, p, "40 120")
	p.Input([]byte("exit 3\n"))
	for {
		_, res, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if res != nil {
			if res.ExitCode != 3 {
				t.Fatalf("exit %+v, want 3", res)
			}
			break
		}
	}
	if _, err := c.OpenPTY(tctx(t), guest.ExecRequest{Argv: []string{"/bin/sh"}}, 5000, 1); guest.ErrorCode(err) != guest.CodeInvalidArgument {
		t.Fatalf("a 5000-column terminal: %v", err)
	}
	if _, err := c.OpenPTY(tctx(t), guest.ExecRequest{Argv: []string{"no-such-shell"}}, 0, 0); guest.ErrorCode(err) != guest.CodeNotFound {
		t.Fatalf("a missing program: %v", err)
	}
}

// TestPTYHangup: closing the session kills what runs on the terminal.
func TestPTYHangup(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	p, err := c.OpenPTY(tctx(t), guest.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $$; sleep 300"}}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := readUntil(t, p, "\n")
	p.Close()
	pid := 0
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			pid = n
		}
	}
	if pid == 0 {
		t.Fatalf("no pid in %q", out)
	}
	waitGone(t, pid)
}
