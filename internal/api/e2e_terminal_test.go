package api

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// lineWriter keeps what a terminal showed and hands each complete line to lines.
type lineWriter struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
	part  string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.part += string(p)
	for {
		i := strings.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		if w.lines != nil {
			select {
			case w.lines <- strings.TrimRight(w.part[:i], "\r"):
			default:
			}
		}
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.all.String() }

// TestE2ETerminal: the interactive terminal through the public API on a real microVM.
func TestE2ETerminal(t *testing.T) {
	ctx, cp, c, sb := e2eSandbox(t, nil)

	// The size asked for, a command's output and status.
	term, err := c.Terminal(ctx, sb.ID, client.TerminalOptions{Cmd: "stty size; tty; exit 4", Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	var out lineWriter
	end, err := term.Wait(&out)
	if err != nil || *end.ExitCode != 4 || !strings.Contains(out.String(), "30 100") || !strings.Contains(out.String(), "/dev/pts/") {
		t.Fatalf("terminal: %q, end %+v, %v", out.String(), end, err)
	}

	// The login shell: keystrokes in, a resize it sees, its exit status.
	term, err = c.Terminal(ctx, sb.ID, client.TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := term.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	term.Write([]byte("stty size; echo $((6*7)) $USER; exit 3\n"))
	out = lineWriter{}
	end, err = term.Wait(&out)
	if err != nil || *end.ExitCode != 3 || !strings.Contains(out.String(), "40 120") || !strings.Contains(out.String(), "42 user") {
		t.Fatalf("shell: %q, end %+v, %v", out.String(), end, err)
	}

	// Closing the connection hangs the terminal up: what ran on it is gone.
	term, err = c.Terminal(ctx, sb.ID, client.TerminalOptions{Cmd: "echo pid=$$; sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	lw := &lineWriter{lines: make(chan string, 16)}
	done := make(chan struct{})
	go func() { term.Wait(lw); close(done) }()
	pid := 0
	for pid == 0 {
		if p, ok := strings.CutPrefix(<-lw.lines, "pid="); ok {
			pid, _ = strconv.Atoi(p)
		}
	}
	term.Close()
	<-done
	for i := 0; guestPids(t, ctx, c, sb.ID, []int{pid}) != ""; i++ {
		if i == 100 {
			t.Fatalf("the hung-up terminal's shell %d still runs", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The CLI: `pandastack sandbox shell` with piped input (no raw mode) exits with the shell's
	// status.
	cli := filepath.Join(t.TempDir(), "pandastack")
	build := exec.Command("go", "build", "-o", cli, "./cmd/pandastack")
	build.Dir = "../.."
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, b)
	}
	shell := exec.CommandContext(ctx, cli, "sandbox", "shell", sb.ID)
	shell.Env = append(os.Environ(), "PANDASTACK_BASE_URL="+cp.hs.URL, "PANDASTACK_API_KEY="+cp.admin)
	shell.Stdin = strings.NewReader("echo $((6*7))\nexit 5\n")
	b, err := shell.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(string(b), "42") {
		t.Fatalf("pandastack sandbox shell: %v, output %q", err, b)
	}

	// Refusals: a read-only key (a terminal runs commands), another team, a bad size.
	reader, err := c.CreateKeyWith(ctx, v1.CreateKeyRequest{Name: "reader", Scopes: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	_, kb, err := c.CreateTeam(ctx, "e2e-term-beta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    *client.Client
		o    client.TerminalOptions
		want string
	}{
		{cp.client(reader.Key), client.TerminalOptions{}, "403 forbidden"},
		{cp.client(kb.Key), client.TerminalOptions{}, "404 not_found"},
		{c, client.TerminalOptions{Cols: 5000, Rows: 10}, "400 invalid_request"},
		{c, client.TerminalOptions{User: "nosuchuser"}, "400 invalid_request"},
	} {
		if _, err := tc.c.Terminal(ctx, sb.ID, tc.o); apiCode(err) != tc.want {
			t.Errorf("terminal %+v: %v, want %s", tc.o, err, tc.want)
		}
	}
}
