package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// fakeVirtio emulates a virtio-serial port (as virtioPort presents it) behind a QEMU chardev unix
// socket server: one host connection at a time; the guest's read returns 0 while no host is
// connected; guest writes fail while no host is connected (see Write), and bytes written but not
// yet delivered when a host leaves stay queued for the next connection. With hidden set, the
// guest never notices connections coming and going (like a VM restored from a snapshot
// mid-session, or a reconnect faster than the guest could observe).
//
// With notify set it also signals host events (a host connecting, bytes arriving) while the
// guest watches, as the real port does with SIGIO.
type fakeVirtio struct {
	mu        sync.Mutex
	cond      *sync.Cond
	notify    bool
	watching  bool
	events    chan os.Signal
	in        []byte // host→guest, unread
	out       []byte // guest→host, undelivered
	connected bool
	hidden    bool
	openLag   int
	closed    bool
	conn      net.Conn
}

func newFakeVirtio() *fakeVirtio {
	f := &fakeVirtio{events: make(chan os.Signal, 1)}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *fakeVirtio) watchHost(on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watching = on && f.notify
	return f.notify
}

func (f *fakeVirtio) hostEvents() <-chan os.Signal { return f.events }

// hostEvent signals the guest if it watches (f.mu held).
func (f *fakeVirtio) hostEvent() {
	if f.watching {
		select {
		case f.events <- syscall.SIGIO:
		default:
		}
	}
}

func (f *fakeVirtio) guestSeesHost() bool { return f.connected || f.hidden }

func (f *fakeVirtio) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.closed {
			return 0, io.ErrClosedPipe
		}
		if len(f.in) > 0 {
			n := copy(p, f.in)
			f.in = f.in[n:]
			return n, nil
		}
		if !f.guestSeesHost() {
			return 0, nil
		}
		f.cond.Wait()
	}
}

// Write fails with errNoHost while the guest sees no host, as virtioPort's does (the port itself
// would block), and for the first openLag writes after that too: the real port can hand the guest
// a new host's bytes before it reports the host connected.
func (f *fakeVirtio) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, io.ErrClosedPipe
	}
	if !f.guestSeesHost() {
		return 0, errNoHost
	}
	if f.openLag > 0 {
		f.openLag--
		return 0, errNoHost
	}
	f.out = append(f.out, p...)
	f.cond.Broadcast()
	return len(p), nil
}

func (f *fakeVirtio) Close() error {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
	return nil
}

func (f *fakeVirtio) inject(in, out []byte) {
	f.mu.Lock()
	f.in = append(f.in, in...)
	f.out = append(f.out, out...)
	f.cond.Broadcast()
	f.mu.Unlock()
}

// dropHost cuts the current host connection (QEMU would see the socket close).
func (f *fakeVirtio) dropHost() {
	f.mu.Lock()
	c := f.conn
	f.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// serveChardev plays QEMU's chardev socket server.
func (f *fakeVirtio) serveChardev(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.connected, f.conn = true, conn
		f.hostEvent()
		f.cond.Broadcast()
		f.mu.Unlock()
		ended := false
		go func() { // guest → host
			f.mu.Lock()
			defer f.mu.Unlock()
			for {
				for len(f.out) == 0 && !ended && !f.closed {
					f.cond.Wait()
				}
				if ended || f.closed {
					return
				}
				b := f.out
				f.out = nil
				f.mu.Unlock()
				_, err := conn.Write(b)
				f.mu.Lock()
				if err != nil {
					f.out = append(b, f.out...) // undelivered: the next host gets them
					return
				}
			}
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				f.mu.Lock()
				f.in = append(f.in, buf[:n]...)
				f.hostEvent()
				f.cond.Broadcast()
				f.mu.Unlock()
			}
			if err != nil {
				break
			}
		}
		conn.Close()
		f.mu.Lock()
		f.connected, f.conn, ended = false, nil, true
		f.cond.Broadcast()
		f.mu.Unlock()
	}
}

type hooks struct {
	mu     sync.Mutex
	clocks []time.Time
	seeds  [][]byte
	log    testenv.SyncBuffer // the agent's log (the guest's console)
}

// startVirtio runs the agent's real port loop on a fake port exposed as a
// chardev-like unix socket.
func startVirtio(t *testing.T, notify ...bool) (*fakeVirtio, string, *hooks) {
	t.Helper()
	f := newFakeVirtio()
	f.notify = len(notify) > 0 && notify[0]
	sock := filepath.Join(t.TempDir(), "vm.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go f.serveChardev(ln)
	h := &hooks{}
	a := New(Options{
		Logger:      log.New(&h.log, "", 0),
		DefaultUser: "root", SyncClock: true, SeedRNG: true,
		SetClock: func(tm time.Time) error { h.mu.Lock(); h.clocks = append(h.clocks, tm); h.mu.Unlock(); return nil },
		MixSeed:  func(b []byte) error { h.mu.Lock(); h.seeds = append(h.seeds, b); h.mu.Unlock(); return nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.servePort(ctx, newPortMux(f))
	}()
	t.Cleanup(func() {
		ln.Close()
		f.dropHost()
		cancel()
		<-done
	})
	return f, sock, h
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func echo(t *testing.T, c *guest.Client, s string) {
	t.Helper()
	var out bytes.Buffer
	if _, err := c.Exec(tctx(t, 20*time.Second), guest.ExecRequest{Argv: []string{"echo", s}}, nil, &out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != s+"\n" {
		t.Fatalf("got %q", out.String())
	}
}

func TestVirtioHostsComeAndGo(t *testing.T) {
	f, sock, _ := startVirtio(t)
	// Stale bytes both ways before the first host: leftovers of an earlier life.
	f.inject([]byte("\x00\x00\x00\x0c\x00\x00\x00\x01garbage PANDASTACK-GO 1234\n"), []byte("\x00\x01\x00\x00old yamux\n"))
	hostsComeAndGo(t, f, sock)
}

// hostsComeAndGo connects five hosts one after the other, each running a command, then leaving.
func hostsComeAndGo(t *testing.T, f *fakeVirtio, sock string) {
	t.Helper()
	for i := range 5 {
		c, err := guest.Connect(tctx(t, 20*time.Second), sock)
		if err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		echo(t, c, fmt.Sprint("round ", i))
		c.Close()
		f.dropHost()
	}
}

// With host events, a guest without a host waits for them instead of polling: the fast polls
// after a host leaves are turned off and the fallback poll is made longer than the test may run,
// so only the events can let each new host in.
func TestVirtioHostEventsWakeTheGuest(t *testing.T) {
	defer func(p, f time.Duration) { watchedPoll, freshPoll = p, f }(watchedPoll, freshPoll)
	watchedPoll, freshPoll = time.Hour, 0
	f, sock, _ := startVirtio(t, true)
	hostsComeAndGo(t, f, sock)
}

// A VM restored from a snapshot taken mid-session does not see its host change: the new host's
// first HELLO lands in the old yamux session. The guest answers that HELLO, not a resend: this
// host sends one and waits (only the test's deadline bounds it).
func TestVirtioFirstHelloInsideOldSession(t *testing.T) {
	f, sock, h := startVirtio(t)
	f.mu.Lock()
	f.hidden = true
	f.mu.Unlock()
	c1, err := guest.Connect(tctx(t, 10*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c1, "one")
	f.dropHost()
	c1.Close()

	helloOnce(t, sock, "abcd1234")
	// The old session's end is how a restored guest meets its new host, not an error worth a
	// console line.
	if l := h.log.String(); strings.Contains(l, "yamux") {
		t.Fatalf("the agent logged the old session's end as an error:\n%s", l)
	}
}

func TestVirtioGuestWakesMidSession(t *testing.T) {
	f, sock, h := startVirtio(t)
	f.mu.Lock()
	f.hidden = true // the guest will not see the first host leave
	f.mu.Unlock()
	c1, err := guest.Connect(tctx(t, 10*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, c1, "one")
	// A call in flight when the host goes away, leaving half-written yamux behind.
	go c1.Exec(context.Background(), guest.ExecRequest{Cmd: "sleep 1; head -c 1000000 /dev/zero"}, nil, io.Discard, nil)
	time.Sleep(100 * time.Millisecond)
	f.dropHost()
	c1.Close()

	// The new host's hellos land in the guest's old yamux session first; the
	// guest must fall back to scanning and answer a resend.
	c2, err := guest.Connect(tctx(t, 10*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	echo(t, c2, "two")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seeds) != 2 {
		t.Fatalf("want one reseed per host, got %d", len(h.seeds))
	}
	if bytes.Equal(h.seeds[0], h.seeds[1]) || len(h.seeds[0]) != 32 {
		t.Fatal("seeds not per host")
	}
}

func TestVirtioReconnectAfterSessionDeath(t *testing.T) {
	f, sock, _ := startVirtio(t)
	c, err := guest.Connect(tctx(t, 10*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "before")
	// The socket drops under the client: the next call must re-dial and re-handshake.
	f.dropHost()
	time.Sleep(50 * time.Millisecond)
	echo(t, c, "after")
}

func TestHandshakeClockAndSeed(t *testing.T) {
	_, sock, h := startVirtio(t)
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	hostTime := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	seed := bytes.Repeat([]byte{7}, 32)
	hello := func(nonce string, tm time.Time) string {
		return fmt.Sprintf("PANDASTACK-HELLO {\"nonce\":%q,\"time_unix_ns\":%d,\"seed\":%q}\n", nonce, tm.UnixNano(), base64.StdEncoding.EncodeToString(seed))
	}
	for range 3 {
		conn.Write([]byte(hello("aa01", hostTime)))
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PANDASTACK-READY aa01 {") {
		t.Fatalf("%q %v", line, err)
	}
	// A new nonce is a new host: answered, reseeded, clock close enough → untouched.
	conn.Write([]byte(hello("bb02", time.Now())))
	line, err = br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PANDASTACK-READY bb02 {") {
		t.Fatalf("%q %v", line, err)
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if extra, _ := br.ReadString('\n'); extra != "" {
		t.Fatalf("unexpected %q", extra)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clocks) != 1 || !h.clocks[0].Equal(hostTime) {
		t.Fatalf("clock sets: %v", h.clocks)
	}
	if len(h.seeds) != 2 || !bytes.Equal(h.seeds[0], seed) {
		t.Fatalf("seeds: %d", len(h.seeds))
	}
}

func TestErrnoMapping(t *testing.T) {
	for errno, code := range map[syscall.Errno]string{
		syscall.ENOENT: guest.CodeNotFound, syscall.EACCES: guest.CodePermissionDenied,
		syscall.EPERM: guest.CodePermissionDenied, syscall.EEXIST: guest.CodeAlreadyExists,
		syscall.ENOTDIR: guest.CodeNotADirectory, syscall.EISDIR: guest.CodeIsADirectory,
		syscall.ENOSPC: guest.CodeNoSpace, syscall.EDQUOT: guest.CodeNoSpace,
		syscall.ENOTEMPTY: guest.CodeNotEmpty, syscall.EIO: guest.CodeInternal,
		syscall.ENAMETOOLONG: guest.CodeInvalidArgument,
	} {
		err := &os.PathError{Op: "x", Path: "/p", Err: errno}
		if got := toGuestError(err).Code; got != code {
			t.Errorf("%v: got %s want %s", errno, got, code)
		}
	}
	for in, want := range map[string]string{"/a/../b//c/": "/b/c", "/": "/"} {
		if got, err := cleanPath("path", in); err != nil || got != want {
			t.Errorf("%q → %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "a/b", "./x", "/a\x00", "/" + strings.Repeat("x", 4096)} {
		if _, err := cleanPath("path", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]uint32{"": 0o644, "0": 0o644, "0600": 0o600, "4755": 0o4755} {
		if got, err := parseMode(in); err != nil || got != want {
			t.Errorf("mode %q → %o %v", in, got, err)
		}
	}
	for _, bad := range []string{"999", "abc", "17777"} {
		if _, err := parseMode(bad); err == nil {
			t.Errorf("mode %q accepted", bad)
		}
	}
}

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:,,,:/home/user:/bin/bash\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nuser:x:1000:\nsudo:x:27:user\ndocker:x:999:other,user\nnope:x:5:other\n"), 0o644)
	a := New(Options{PasswdFile: passwd, GroupFile: group})
	u, err := a.lookupUser("")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "user" || u.UID != 1000 || u.GID != 1000 || u.Home != "/home/user" || u.Shell != "/bin/bash" ||
		fmt.Sprint(u.Groups) != "[1000 27 999]" {
		t.Fatalf("%+v", u)
	}
	if _, err := a.lookupUser("ghost"); guest.ErrorCode(err) != guest.CodeInvalidArgument {
		t.Fatalf("ghost: %v", err)
	}
	if _, err := a.lookupUser("a:b"); guest.ErrorCode(err) != guest.CodeInvalidArgument {
		t.Fatalf("a:b: %v", err)
	}
}

// threadCreds returns "fsuid fsgid groups" of every thread of this process.
func threadCreds(t *testing.T) map[string]string {
	out := map[string]string{}
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // thread exited
		}
		var uid, gid, groups string
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "Uid:"):
				uid = strings.Fields(l)[4]
			case strings.HasPrefix(l, "Gid:"):
				gid = strings.Fields(l)[4]
			case strings.HasPrefix(l, "Groups:"):
				groups = strings.TrimSpace(strings.TrimPrefix(l, "Groups:"))
			}
		}
		out[p] = uid + " " + gid + " " + groups
	}
	return out
}

func TestAsUserRestoresThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	want := ""
	for _, v := range threadCreds(t) {
		want = v
		break
	}
	nobody := &account{Name: "nobody", UID: 65534, GID: 65534, Groups: []uint32{65534}}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := asUser(nobody, func() error {
				b, err := os.ReadFile("/proc/thread-self/status")
				if err != nil {
					return err
				}
				if !strings.Contains(string(b), "\nUid:\t0\t0\t0\t65534\n") || !strings.Contains(string(b), "\nGroups:\t65534 \n") {
					return fmt.Errorf("identity not applied:\n%s", b)
				}
				_, err = os.ReadFile("/proc/self/environ") // root-only (0400): must fail
				if err == nil {
					return fmt.Errorf("nobody read a root-only file")
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for p, v := range threadCreds(t) {
		if v != want {
			t.Errorf("%s: %q, want %q", p, v, want)
		}
	}
}

// A session's tail is made once with room for a handshake line and must never be reallocated:
// a guest restored mid-session meets its new host's HELLO there, and an allocation on that path
// is page faults in a cold VM.
func TestSessionTailKeepsTheLastLineWithoutAllocating(t *testing.T) {
	s := &sessionConn{tail: make([]byte, 0, guest.MaxHandshakeLine)}
	var all []byte
	chunks := [][]byte{[]byte("abc"), bytes.Repeat([]byte("x"), 1000), bytes.Repeat([]byte("y"), 5000), []byte("\n" + guest.HelloPrefix + "{}\n")}
	allocs := testing.AllocsPerRun(20, func() {
		for _, c := range chunks {
			s.keep(c)
		}
	})
	for range 21 {
		for _, c := range chunks {
			all = append(all, c...)
		}
	}
	if allocs != 0 {
		t.Fatalf("keep allocated %.1f times per run", allocs)
	}
	if got, want := s.retire(nil), all[len(all)-guest.MaxHandshakeLine:]; !bytes.Equal(got, want) {
		t.Fatalf("tail is not the last %d bytes read", guest.MaxHandshakeLine)
	}
	s.keep([]byte("after"))
	if got := s.retire(nil); !bytes.Equal(got, all[len(all)-guest.MaxHandshakeLine:]) {
		t.Fatal("a retired session still keeps what it reads")
	}
}

// The port can hand the guest a new host's HELLO before it reports that host connected; the READY
// must still go out, answering that one HELLO (no resend).
func TestVirtioReadyWhenThePortReportsTheHostLate(t *testing.T) {
	f, sock, _ := startVirtio(t)
	f.mu.Lock()
	f.openLag = 5
	f.mu.Unlock()
	helloOnce(t, sock, "5eed")
}

// helloOnce connects to the port's socket as a new host, sends one HELLO with nonce (no resend)
// and waits for its READY.
func helloOnce(t *testing.T, sock, nonce string) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(guest.HelloPrefix + `{"nonce":"` + nonce + `","time_unix_ns":1,"seed":""}` + "\n")); err != nil {
		t.Fatal(err)
	}
	var sc guest.HandshakeScanner
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no READY for the one HELLO sent: %v", err)
		}
		sc.Feed(buf[:n])
		for line := range sc.Lines() {
			if strings.HasPrefix(line, guest.ReadyPrefix+nonce+" ") {
				return
			}
		}
	}
}
