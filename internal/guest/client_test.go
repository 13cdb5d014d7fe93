package guest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/guest/agent"
)

const testUserUID = 4242 // "user" in the test passwd; the kernel does not care that it is not in /etc/passwd

type env struct {
	sock    string
	userHom string
	stop    func()
}

// startAgent serves the agent in-process on a unix socket, with a passwd file
// that adds the default account "user".
func startAgent(t *testing.T) *env {
	t.Helper()
	dir := worldDir(t) // the test users must be able to reach their home
	home := filepath.Join(dir, "home-user")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Chown(home, testUserUID, testUserUID)
	}
	sys, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(dir, "passwd")
	line := fmt.Sprintf("user:x:%d:%d::%s:/bin/sh\n", testUserUID, testUserUID, home)
	if err := os.WriteFile(passwd, append(sys, line...), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		agent.New(agent.Options{PasswdFile: passwd}).ServeListener(ctx, ln)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return &env{sock: sock, userHom: home, stop: stop}
}

func connect(t *testing.T, e *env) *guest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := guest.Connect(ctx, e.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, c *guest.Client, req guest.ExecRequest) (string, string, guest.ExecResult) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := c.Exec(tctx(t), req, nil, &out, &errb)
	if err != nil {
		t.Fatalf("exec %+v: %v", req, err)
	}
	return out.String(), errb.String(), res
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := guest.ErrorCode(err); got != code {
		t.Fatalf("want guest error %s, got %v", code, err)
	}
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// worldDir makes a temp dir everyone can traverse (t.TempDir is 0700).
func worldDir(t *testing.T) string {
	d := t.TempDir()
	os.Chmod(filepath.Dir(d), 0o755)
	os.Chmod(d, 0o755)
	return d
}

func TestExecBasics(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)

	out, errs, res := run(t, c, guest.ExecRequest{Cmd: "echo out; echo err >&2; exit 3", User: "root"})
	if out != "out\n" || errs != "err\n" || res.ExitCode != 3 || res.TimedOut || res.Signal != "" {
		t.Fatalf("got %q %q %+v", out, errs, res)
	}
	out, _, res = run(t, c, guest.ExecRequest{Argv: []string{"echo", "a b", "c"}, User: "root"})
	if out != "a b c\n" || res.ExitCode != 0 {
		t.Fatalf("argv: %q %+v", out, res)
	}
	_, _, res = run(t, c, guest.ExecRequest{Cmd: "kill -TERM $$", User: "root"})
	if res.Signal != "SIGTERM" || res.ExitCode != 128+15 {
		t.Fatalf("signal: %+v", res)
	}

	_, err := c.Exec(tctx(t), guest.ExecRequest{Argv: []string{"no-such-binary-xyz"}, User: "root"}, nil, nil, nil)
	wantCode(t, err, guest.CodeNotFound)
	_, err = c.Exec(tctx(t), guest.ExecRequest{Cmd: "true", Cwd: "/no/such/dir", User: "root"}, nil, nil, nil)
	wantCode(t, err, guest.CodeNotFound)
	_, err = c.Exec(tctx(t), guest.ExecRequest{Cmd: "true", User: "no-such-user-xyz"}, nil, nil, nil)
	wantCode(t, err, guest.CodeInvalidArgument)
	_, err = c.Exec(tctx(t), guest.ExecRequest{User: "root"}, nil, nil, nil)
	wantCode(t, err, guest.CodeInvalidArgument)

	h, err := c.Health(tctx(t))
	if err != nil || !h.OK || h.Version != guest.Version {
		t.Fatalf("health %+v %v", h, err)
	}
	// The agent reads this machine's /proc and root filesystem here: figures a guest would give.
	u, err := c.Usage(tctx(t))
	if err != nil || u.CPUs < 1 || u.CPUBusyTicks == 0 || u.CPUBusyTicks > u.CPUTotalTicks ||
		u.MemTotal <= 0 || u.MemAvailable <= 0 || u.MemAvailable > u.MemTotal ||
		u.DiskTotal <= 0 || u.DiskUsed <= 0 || u.DiskUsed > u.DiskTotal {
		t.Fatalf("usage %+v %v", u, err)
	}
	if err := c.Sync(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

// chanWriter reports when the first chunk arrives.
type chanWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
	once  sync.Once
}

func (w *chanWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return w.buf.Write(p)
}

func TestExecStreams(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	w := &chanWriter{first: make(chan struct{})}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		if _, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: "echo a; sleep 2; echo b", User: "root"}, nil, w, nil); err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-w.first:
	case <-done:
		t.Fatal("exec finished before its first chunk was delivered")
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("first chunk after %v", d)
	}
	select {
	case <-done:
		t.Fatal("exec finished too early")
	default:
	}
	<-done
	if w.buf.String() != "a\nb\n" {
		t.Fatalf("got %q", w.buf.String())
	}
}

func TestExecStdin(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	var out bytes.Buffer
	res, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: "cat; echo done", User: "root"}, strings.NewReader("hello\nworld\n"), &out, nil)
	if err != nil || res.ExitCode != 0 || out.String() != "hello\nworld\ndone\n" {
		t.Fatalf("%q %+v %v", out.String(), res, err)
	}
	// Big stdin through a command that reads it all.
	big := make([]byte, 3<<20)
	rand.Read(big)
	out.Reset()
	if _, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: "sha256sum", User: "root"}, bytes.NewReader(big), &out, nil); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256(big)); !strings.HasPrefix(out.String(), want) {
		t.Fatalf("stdin corrupted: %q vs %s", out.String(), want)
	}
	// No stdin: EOF at once.
	out.Reset()
	if _, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: "cat; echo eof", User: "root"}, nil, &out, nil); err != nil || out.String() != "eof\n" {
		t.Fatalf("%q %v", out.String(), err)
	}
	// A command that ignores its stdin must not hang on it.
	out.Reset()
	if _, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: "echo quick", User: "root"}, bytes.NewReader(big), &out, nil); err != nil || out.String() != "quick\n" {
		t.Fatalf("%q %v", out.String(), err)
	}
}

// gone reports whether pid no longer runs (absent or a zombie nobody reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("pid %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	start := time.Now()
	out, _, res := run(t, c, guest.ExecRequest{Cmd: "sleep 100 & echo $!; sleep 100", User: "root", Timeout: 500 * time.Millisecond})
	if !res.TimedOut || res.Signal != "SIGKILL" {
		t.Fatalf("%+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	waitGone(t, pid)
}

func TestExecBackgroundChildDoesNotBlock(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	start := time.Now()
	out, _, res := run(t, c, guest.ExecRequest{Cmd: "sleep 30 & echo $!; echo bye", User: "root"})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("exec waited for a background child: %v", d)
	}
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[1] != "bye" || res.ExitCode != 0 {
		t.Fatalf("%q %+v", out, res)
	}
	pid, _ := strconv.Atoi(lines[0])
	if gone(pid) {
		t.Fatal("background child was killed")
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

func TestExecCancelKills(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	w := &chanWriter{first: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, guest.ExecRequest{Cmd: "echo $$; exec sleep 100", User: "root"}, nil, w, nil)
		errc <- err
	}()
	<-w.first
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not abort Exec")
	}
	w.mu.Lock()
	pid, _ := strconv.Atoi(strings.TrimSpace(w.buf.String()))
	w.mu.Unlock()
	waitGone(t, pid)
	if _, err := c.Health(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestExecCancelKillsWhenStdinStuck(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	w := &chanWriter{first: make(chan struct{})}
	errc := make(chan error, 1)
	// The child never reads stdin while we push far more than pipe + window.
	stdin := io.LimitReader(zeroReader{}, 64<<20)
	go func() {
		_, err := c.Exec(ctx, guest.ExecRequest{Cmd: "echo $$; exec sleep 100", User: "root"}, stdin, w, nil)
		errc <- err
	}()
	<-w.first
	time.Sleep(300 * time.Millisecond) // let stdin back up
	cancel()
	<-errc
	w.mu.Lock()
	pid, _ := strconv.Atoi(strings.TrimSpace(w.buf.String()))
	w.mu.Unlock()
	// The guest notices through the stream reset after the host's close timeout (10 s).
	deadline := time.Now().Add(20 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatal("process survived its cancelled exec")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestExecEnvCwd(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	dir := t.TempDir()
	out, _, _ := run(t, c, guest.ExecRequest{
		Cmd:  `echo "$FOO|$(pwd)|$HOME|$USER|$LANG|$PATH|$SHELL"`,
		Env:  map[string]string{"FOO": "bar baz"},
		Cwd:  dir,
		User: "root",
	})
	want := fmt.Sprintf("bar baz|%s|/root|root|C.UTF-8|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|", dir)
	if !strings.HasPrefix(out, want) {
		t.Fatalf("got %q want prefix %q", out, want)
	}
	// Default cwd is the home; the request env overrides the defaults.
	out, _, _ = run(t, c, guest.ExecRequest{Cmd: "pwd; echo $LANG", User: "root", Env: map[string]string{"LANG": "de_DE.UTF-8"}})
	if out != "/root\nde_DE.UTF-8\n" {
		t.Fatalf("got %q", out)
	}
	// argv is resolved with the request's PATH.
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "hello-pandastack"), []byte("#!/bin/sh\necho from-path\n"), 0o755)
	out, _, _ = run(t, c, guest.ExecRequest{Argv: []string{"hello-pandastack"}, User: "root", Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}})
	if out != "from-path\n" {
		t.Fatalf("got %q", out)
	}
}

func TestExecUsers(t *testing.T) {
	needRoot(t)
	e := startAgent(t)
	c := connect(t, e)
	out, _, _ := run(t, c, guest.ExecRequest{Cmd: "id -u; id -g", User: "nobody"})
	if out != "65534\n65534\n" {
		t.Fatalf("nobody: %q", out)
	}
	out, _, _ = run(t, c, guest.ExecRequest{Cmd: "id -u; pwd", User: "root"})
	if out != "0\n/root\n" {
		t.Fatalf("root: %q", out)
	}
	out, _, _ = run(t, c, guest.ExecRequest{Cmd: "id -u; echo $HOME; pwd; echo $USER"})
	want := fmt.Sprintf("%d\n%s\n%s\nuser\n", testUserUID, e.userHom, e.userHom)
	if out != want {
		t.Fatalf("default user: %q want %q", out, want)
	}
	// nobody's home does not exist: cwd falls back to /.
	out, _, _ = run(t, c, guest.ExecRequest{Cmd: "pwd", User: "nobody"})
	if out != "/\n" {
		t.Fatalf("nobody cwd: %q", out)
	}
}

func writeBytes(t *testing.T, c *guest.Client, path, user string, mode os.FileMode, b []byte) guest.FileInfo {
	t.Helper()
	fi, err := c.WriteFile(tctx(t), path, user, mode, bytes.NewReader(b))
	if err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return fi
}

func readBytes(t *testing.T, c *guest.Client, path, user string) ([]byte, guest.FileInfo) {
	t.Helper()
	r, fi, err := c.ReadFile(tctx(t), path, user)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b, fi
}

func TestFilesRoundTrip(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	dir := t.TempDir()

	big := make([]byte, 20<<20)
	rand.Read(big)
	p := filepath.Join(dir, "a/b/c/big.bin") // parents created
	fi := writeBytes(t, c, p, "root", 0, big)
	if fi.Type != "file" || fi.Size != int64(len(big)) || fi.Mode != "0644" || fi.Name != "big.bin" || fi.Path != p {
		t.Fatalf("stat after write: %+v", fi)
	}
	// Read through a hasher: the content never needs to be held on our side either.
	r, rfi, err := c.ReadFile(tctx(t), p, "root")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	r.Close()
	if err != nil || n != int64(len(big)) || rfi.Size != n {
		t.Fatalf("read %d bytes, %v, %+v", n, err, rfi)
	}
	if want := sha256.Sum256(big); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("sha256 mismatch")
	}

	empty := filepath.Join(dir, "empty")
	if fi := writeBytes(t, c, empty, "root", 0o600, nil); fi.Size != 0 || fi.Mode != "0600" {
		t.Fatalf("%+v", fi)
	}
	if b, _ := readBytes(t, c, empty, "root"); len(b) != 0 {
		t.Fatalf("empty file read %d bytes", len(b))
	}
	bin := []byte{0xff, 0xfe, 0x00, 0x80, 'P', 'A', 'N', 'D', 'A', '\n', 0xc3, 0x28}
	writeBytes(t, c, filepath.Join(dir, "bin"), "root", 0, bin)
	if b, _ := readBytes(t, c, filepath.Join(dir, "bin"), "root"); !bytes.Equal(b, bin) {
		t.Fatalf("binary round trip: %x", b)
	}
	// Overwrite replaces atomically; no temp files left behind.
	writeBytes(t, c, filepath.Join(dir, "bin"), "root", 0o755, []byte("new"))
	if b, fi := readBytes(t, c, filepath.Join(dir, "bin"), "root"); string(b) != "new" || fi.Mode != "0755" {
		t.Fatalf("overwrite: %q %+v", b, fi)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "pandastack-") {
			t.Fatalf("temp file left: %s", e.Name())
		}
	}

	// stat
	st, err := c.Stat(tctx(t), filepath.Join(dir, "a"), "root")
	if err != nil || st.Type != "dir" || st.Name != "a" || st.Mtime.IsZero() || st.Mtime.Location() != time.UTC {
		t.Fatalf("%+v %v", st, err)
	}
	os.Symlink("bin", filepath.Join(dir, "link"))
	st, err = c.Stat(tctx(t), filepath.Join(dir, "link"), "root")
	if err != nil || st.Type != "symlink" || st.Target != "bin" {
		t.Fatalf("%+v %v", st, err)
	}
	// Writing through a symlink writes its target.
	writeBytes(t, c, filepath.Join(dir, "link"), "root", 0, []byte("via link"))
	if b, _ := readBytes(t, c, filepath.Join(dir, "bin"), "root"); string(b) != "via link" {
		t.Fatalf("write via link: %q", b)
	}

	// list
	names := func(fis []guest.FileInfo) string {
		var s []string
		for _, f := range fis {
			s = append(s, strings.TrimPrefix(f.Path, dir))
		}
		return strings.Join(s, " ")
	}
	l, err := c.List(tctx(t), dir, "root", 0)
	if err != nil || names(l) != "/a /bin /empty /link" {
		t.Fatalf("depth 1: %q %v", names(l), err)
	}
	l, err = c.List(tctx(t), dir, "root", 2)
	if err != nil || names(l) != "/a /a/b /bin /empty /link" {
		t.Fatalf("depth 2: %q %v", names(l), err)
	}
	l, err = c.List(tctx(t), dir, "root", 99)
	if err != nil || names(l) != "/a /a/b /a/b/c /a/b/c/big.bin /bin /empty /link" {
		t.Fatalf("depth max: %q %v", names(l), err)
	}
	_, err = c.List(tctx(t), filepath.Join(dir, "bin"), "root", 1)
	wantCode(t, err, guest.CodeNotADirectory)

	// mkdir, move, remove
	nd := filepath.Join(dir, "x/y/z")
	if err := c.Mkdir(tctx(t), nd, "root"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(tctx(t), nd, "root"); err != nil {
		t.Fatalf("mkdir -p twice: %v", err)
	}
	wantCode(t, c.Mkdir(tctx(t), filepath.Join(dir, "bin"), "root"), guest.CodeAlreadyExists)
	if err := c.Move(tctx(t), filepath.Join(dir, "bin"), filepath.Join(nd, "moved"), "root"); err != nil {
		t.Fatal(err)
	}
	if b, _ := readBytes(t, c, filepath.Join(nd, "moved"), "root"); string(b) != "via link" {
		t.Fatalf("moved content %q", b)
	}
	wantCode(t, c.Move(tctx(t), filepath.Join(dir, "nope"), filepath.Join(dir, "nope2"), "root"), guest.CodeNotFound)
	wantCode(t, c.Remove(tctx(t), filepath.Join(dir, "x"), "root", false), guest.CodeNotEmpty)
	if err := c.Remove(tctx(t), filepath.Join(dir, "x"), "root", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
	if err := c.Remove(tctx(t), empty, "root", false); err != nil {
		t.Fatal(err)
	}

	// errors
	_, _, err = c.ReadFile(tctx(t), filepath.Join(dir, "missing"), "root")
	wantCode(t, err, guest.CodeNotFound)
	_, err = c.Stat(tctx(t), filepath.Join(dir, "missing"), "root")
	wantCode(t, err, guest.CodeNotFound)
	wantCode(t, c.Remove(tctx(t), filepath.Join(dir, "missing"), "root", true), guest.CodeNotFound)
	_, err = c.Stat(tctx(t), "relative/path", "root")
	wantCode(t, err, guest.CodeInvalidArgument)
	_, err = c.WriteFile(tctx(t), "rel", "root", 0, strings.NewReader("x"))
	wantCode(t, err, guest.CodeInvalidArgument)
	_, err = c.Stat(tctx(t), "/a\x00b", "root")
	wantCode(t, err, guest.CodeInvalidArgument)
	_, err = c.Stat(tctx(t), "/"+strings.Repeat("a", 5000), "root")
	wantCode(t, err, guest.CodeInvalidArgument)
	_, _, err = c.ReadFile(tctx(t), dir, "root")
	wantCode(t, err, guest.CodeIsADirectory)
	_, err = c.WriteFile(tctx(t), filepath.Join(dir, "a"), "root", 0, strings.NewReader("x"))
	wantCode(t, err, guest.CodeIsADirectory)
	writeBytes(t, c, filepath.Join(dir, "plain"), "root", 0, []byte("x"))
	_, err = c.WriteFile(tctx(t), filepath.Join(dir, "plain", "under-a-file"), "root", 0, strings.NewReader("x"))
	wantCode(t, err, guest.CodeNotADirectory)
	_, err = c.Stat(tctx(t), "/etc", "no-such-user-xyz")
	wantCode(t, err, guest.CodeInvalidArgument)
	wantCode(t, c.Remove(tctx(t), "/", "root", true), guest.CodeInvalidArgument)
}

// failingReader returns some bytes then an error.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source broke")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

func TestWriteFailureLeavesNoHalfFile(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	writeBytes(t, c, p, "root", 0, []byte("original"))
	if _, err := c.WriteFile(tctx(t), p, "root", 0, &failingReader{n: 1 << 20}); err == nil {
		t.Fatal("write with a failing source succeeded")
	}
	if b, _ := os.ReadFile(p); string(b) != "original" {
		t.Fatalf("target changed: %q", b)
	}
	// The guest drops its temp file asynchronously.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leftovers: %v", ents)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFilePermissions(t *testing.T) {
	needRoot(t)
	e := startAgent(t)
	c := connect(t, e)
	dir := worldDir(t)
	secret := filepath.Join(dir, "shadow")
	os.WriteFile(secret, []byte("root:secret"), 0o640)

	_, _, err := c.ReadFile(tctx(t), secret, "nobody")
	wantCode(t, err, guest.CodePermissionDenied)
	_, err = c.WriteFile(tctx(t), secret, "nobody", 0, strings.NewReader("pwned"))
	wantCode(t, err, guest.CodePermissionDenied)
	// The error names the path given, not the agent's temp file next to it.
	if msg := err.Error(); !strings.Contains(msg, secret) || strings.Contains(msg, ".pandastack-") {
		t.Errorf("write error %q: want the path %s, not the temp file", msg, secret)
	}
	wantCode(t, c.Remove(tctx(t), secret, "nobody", false), guest.CodePermissionDenied)
	wantCode(t, c.Mkdir(tctx(t), filepath.Join(dir, "d"), "nobody"), guest.CodePermissionDenied)
	if b, _ := os.ReadFile(secret); string(b) != "root:secret" {
		t.Fatalf("secret changed: %q", b)
	}
	// Root can.
	writeBytes(t, c, secret, "root", 0o640, []byte("root:new"))
	if b, _ := readBytes(t, c, secret, "root"); string(b) != "root:new" {
		t.Fatalf("root read %q", b)
	}

	// In a directory nobody owns, nobody's files and parents are nobody's.
	nd := filepath.Join(dir, "nobodys")
	os.Mkdir(nd, 0o755)
	os.Chown(nd, 65534, 65534)
	writeBytes(t, c, filepath.Join(nd, "p/q/file"), "nobody", 0, []byte("hi"))
	for _, p := range []string{"p", "p/q", "p/q/file"} {
		fi, err := os.Stat(filepath.Join(nd, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Fatalf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
	// The default user ("user", uid 4242) cannot write into nobody's directory.
	_, err = c.WriteFile(tctx(t), filepath.Join(nd, "x"), "", 0, strings.NewReader("x"))
	wantCode(t, err, guest.CodePermissionDenied)
	// The agent's own threads keep root's identity afterwards.
	if err := os.WriteFile(filepath.Join(dir, "still-root"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Many concurrent ops as different users do not bleed into each other.
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := []string{"nobody", "root"}[i%2]
			_, _, err := c.ReadFile(tctx(t), secret, user)
			if (user == "root") != (err == nil) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d permission checks went wrong under concurrency", bad.Load())
	}
}

func TestReconnect(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	if _, err := c.Health(tctx(t)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		guest.CloseConnForTest(c)
		out, _, _ := run(t, c, guest.ExecRequest{Cmd: "echo again", User: "root"})
		if out != "again\n" {
			t.Fatalf("%q", out)
		}
	}
}

func TestDeadAgentGivesError(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), guest.ExecRequest{Cmd: "sleep 30", User: "root", Timeout: 40 * time.Second}, nil, nil, nil)
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	e.stop()
	select {
	case err := <-errc:
		if !errors.Is(err, guest.ErrConnectionLost) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec hung on a dead agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Health(ctx); err == nil {
		t.Fatal("health succeeded without an agent")
	}
	c.Close()
	if _, err := c.Health(context.Background()); !errors.Is(err, guest.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

type countWriter struct{ n atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

func TestHugeStdout(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	var peak atomic.Uint64
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	var out countWriter
	const size = 100 << 20
	res, err := c.Exec(tctx(t), guest.ExecRequest{Cmd: fmt.Sprintf("head -c %d /dev/zero", size), User: "root"}, nil, &out, nil)
	close(stop)
	<-sampled
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if out.n.Load() != size {
		t.Fatalf("got %d bytes", out.n.Load())
	}
	// Agent and client share this process: neither may buffer the stream.
	if grow := int64(peak.Load()) - int64(base.HeapInuse); grow > 48<<20 {
		t.Fatalf("heap grew by %d MiB", grow>>20)
	}
}

func TestOversizedFrameClosesOnlyThatStream(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	for _, hdr := range [][]byte{
		{guest.FrameRequest, 0, 0x20, 0, 0}, // 2 MiB
		{'Z', 0, 0, 0, 2},                   // unknown type
	} {
		st, err := guest.OpenRawStreamForTest(tctx(t), c)
		if err != nil {
			t.Fatal(err)
		}
		st.Write(hdr)
		st.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, p, err := guest.NewFrameReader(st).Next()
		if err != nil || typ != guest.FrameError {
			t.Fatalf("want error frame, got %q %q %v", typ, p, err)
		}
		var ge guest.Error
		json.Unmarshal(p, &ge)
		if ge.Code != guest.CodeInvalidArgument {
			t.Fatalf("%+v", ge)
		}
		st.Close()
	}
	// The session still serves new calls.
	if _, err := c.Health(tctx(t)); err != nil {
		t.Fatal(err)
	}
	// An oversized frame inside an exec's stdin also ends just that call.
	st, _ := guest.OpenRawStreamForTest(tctx(t), c)
	guest.WriteJSONFrame(st, guest.FrameRequest, guest.Request{Op: guest.OpExec, Cmd: "exec sleep 100", User: "root", Stdin: true})
	st.Write([]byte{guest.FrameData, 0xff, 0, 0, 0})
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, _, err := guest.NewFrameReader(st).Next()
	if err != nil || typ != guest.FrameError {
		t.Fatalf("exec: want error frame, got %q %v", typ, err)
	}
	st.Close()
	if out, _, _ := run(t, c, guest.ExecRequest{Cmd: "echo ok", User: "root"}); out != "ok\n" {
		t.Fatalf("%q", out)
	}
}

// rawHandshake plays the host side by hand against the agent's socket.
func TestHandshakeToleratesGarbage(t *testing.T) {
	e := startAgent(t)
	conn, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	garbage := make([]byte, 10000)
	rand.Read(garbage)
	conn.Write(garbage)
	conn.Write([]byte("\nPANDASTACK-HELLO {not json\nPANDASTACK-GO deadbeef\nPANDASTACK-HEL"))
	conn.Write(bytes.Repeat([]byte("z"), 6000)) // an overlong line
	conn.Write([]byte("\n\x00\x00\x00\x0c"))    // a yamux-looking header

	nonce := "00112233445566778899aabbccddeeff"
	seed := base64.StdEncoding.EncodeToString(make([]byte, 32))
	hello := fmt.Sprintf("PANDASTACK-HELLO {\"nonce\":%q,\"time_unix_ns\":%d,\"seed\":%q}\n", nonce, time.Now().UnixNano(), seed)
	conn.Write([]byte("stale-bytes-without-newline" + hello))
	conn.Write([]byte(hello)) // a resend: must not produce a second READY

	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	prefix := "PANDASTACK-READY " + nonce + " "
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("got %q", line)
	}
	var ready guest.Ready
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, prefix)), &ready); err != nil || ready.Version != guest.Version {
		t.Fatalf("ready %q: %v", line, err)
	}
	conn.Write([]byte(hello))
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if extra, err := br.ReadString('\n'); err == nil || extra != "" {
		t.Fatalf("second READY or other output: %q", extra)
	}
	conn.SetReadDeadline(time.Time{})
	conn.Write([]byte("PANDASTACK-GO " + nonce + "\n"))

	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	sess, err := yamux.Client(struct {
		io.Reader
		io.WriteCloser
	}{br, conn}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	guest.WriteJSONFrame(st, guest.FrameRequest, guest.Request{Op: guest.OpHealth})
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, p, err := guest.NewFrameReader(st).Next()
	if err != nil || typ != guest.FrameResult {
		t.Fatalf("%q %v", typ, err)
	}
	var h guest.Health
	if json.Unmarshal(p, &h); !h.OK {
		t.Fatalf("%s", p)
	}
}

func TestConcurrentCalls(t *testing.T) {
	e := startAgent(t)
	c := connect(t, e)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			_, err := c.Exec(tctx(t), guest.ExecRequest{Argv: []string{"echo", strconv.Itoa(i)}, User: "root"}, nil, &out, nil)
			if err == nil && out.String() != strconv.Itoa(i)+"\n" {
				err = fmt.Errorf("call %d got %q", i, out.String())
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []string
	for err := range errs {
		all = append(all, err.Error())
	}
	sort.Strings(all)
	if len(all) > 0 {
		t.Fatal(strings.Join(all, "\n"))
	}
}

func TestConnectRetriesUntilSocketAppears(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "late.sock")
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go agent.New(agent.Options{DefaultUser: "root"}).ServeListener(ctx, ln)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := guest.Connect(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	// And gives up with the context.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := guest.Connect(ctx2, filepath.Join(dir, "never.sock")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
}

// TestDialPort: a connection to a loopback port through the agent carries bytes both ways and
// half-closes (the server sees EOF, then answers); a port nobody listens on is not_found.
func TestDialPort(t *testing.T) {
	c := connect(t, startAgent(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(conn) // until the client's half-close
		conn.Write(append([]byte("got "), b...))
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := c.DialPort(tctx(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("hello"))
	conn.Close() // yamux: a half-close, the answer still comes
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "got hello" {
		t.Errorf("through the agent: %q, %v", b, err)
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	free := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	_, err = c.DialPort(tctx(t), free)
	wantCode(t, err, guest.CodeNotFound)
}
