// Package agent is the guest side of the PandaStack guest protocol: it owns the
// virtio-serial port inside the VM, answers the handshake (syncing the clock and
// reseeding the kernel RNG on every new host, since snapshot clones share
// memory), serves yamux streams (exec and file operations run as the requested
// user), and, when it is PID 1, the minimal init duties (see RunInit).
package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
)

// Options configure an Agent. The zero value is what runs in the VM except
// for SyncClock/SeedRNG, which ServePort callers turn on.
type Options struct {
	Logger *log.Logger // nil: discard

	// DefaultUser is the account for requests with user "". Default "user".
	DefaultUser string
	PasswdFile  string // default /etc/passwd
	GroupFile   string // default /etc/group

	// SyncClock sets CLOCK_REALTIME from the host's hello; SeedRNG mixes the
	// hello's seed into the kernel RNG. Both only make sense inside the VM.
	SyncClock bool
	SeedRNG   bool

	// Hooks replace the system calls behind SyncClock/SeedRNG (tests).
	SetClock func(time.Time) error
	MixSeed  func([]byte) error
}

// Agent serves the guest protocol.
type Agent struct {
	opts   Options
	log    *log.Logger
	start  time.Time
	bootID string
	procs  procTable // background processes (process.go)
	ready  string    // the READY line's JSON body
	// endLogged: the first session's end has been logged. The bake waits for that line before
	// it snapshots; later ends (every fork child and woken sandbox starts with one) are routine,
	// and under TCG a console line runs ~450 cold guest blocks (formatting, the serial driver)
	// ahead of the new host's HELLO.
	endLogged atomic.Bool
}

// New returns an agent.
func New(opts Options) *Agent {
	if opts.DefaultUser == "" {
		opts.DefaultUser = "user"
	}
	if opts.PasswdFile == "" {
		opts.PasswdFile = "/etc/passwd"
	}
	if opts.GroupFile == "" {
		opts.GroupFile = "/etc/group"
	}
	if opts.SetClock == nil {
		opts.SetClock = setSystemClock
	}
	if opts.MixSeed == nil {
		opts.MixSeed = mixKernelSeed
	}
	lg := opts.Logger
	if lg == nil {
		lg = log.New(io.Discard, "", 0)
	}
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	a := &Agent{opts: opts, log: lg, start: time.Now(), bootID: strings.TrimSpace(string(b)), procs: procTable{procs: map[int]*proc{}}}
	ready, _ := json.Marshal(guest.Ready{Version: guest.Version, BootID: a.bootID})
	a.ready = string(ready)
	return a
}

// ServeVirtio finds the virtio-serial port called name (waiting for it to
// appear), opens it and serves it until ctx ends or the device fails.
func (a *Agent) ServeVirtio(ctx context.Context, name string) error {
	var path string
	for i := 0; ; i++ {
		p, err := findPort(name)
		if err == nil {
			path = p
			break
		}
		if i%150 == 0 { // every 30 s: the console is shared
			a.log.Printf("waiting for virtio port %q: %v", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	var port *virtioPort
	for {
		p, err := openPort(path)
		if err == nil {
			port = p
			break
		}
		a.log.Printf("open %s: %v", path, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	a.log.Printf("serving on %s (%s)", path, name)
	m := newPortMux(port)
	// A host still in a yamux session with a previous agent process sees this
	// line as a protocol error and re-handshakes; a host mid-handshake ignores it.
	go m.announce([]byte("\n" + guest.HandshakeMarker + "AGENT-START\n"))
	return a.servePort(ctx, m)
}

// ServeListener serves each accepted connection as its own port (scanning →
// yamux → scanning until the connection ends). For running on a host in tests.
func (a *Agent) ServeListener(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newPortMux(connDevice{conn})
			err := a.servePort(ctx, m)
			m.shutdown(io.EOF)
			if err != nil && err != io.EOF && ctx.Err() == nil {
				a.log.Printf("connection ended: %v", err)
			}
		}()
	}
}

// servePort alternates between the handshake scanner and a yamux session
// until the device fails or ctx ends.
func (a *Agent) servePort(ctx context.Context, m *portMux) error {
	stop := context.AfterFunc(ctx, func() { m.shutdown(ctx.Err()) })
	defer stop()
	// The buffers every session and scan reuses are made here, once per port: a guest restored
	// mid-session (a fork child, a woken sandbox) then meets its new host without allocating. Under
	// TCG a fresh heap span there cost page faults and a stack growth, ~300 cold guest blocks ahead
	// of the answer to the new host's HELLO.
	hs := &handshakeState{buf: make([]byte, 16<<10)}
	tail := make([]byte, 0, guest.MaxHandshakeLine)
	seed := make([]byte, 0, guest.MaxHandshakeLine) // the last bytes of the session that ended
	for {
		c := m.attach()
		rest, err := a.scan(c, hs, seed)
		if err != nil {
			return err
		}
		// An ended session's sessionConn was retired (it writes tail no more; its bytes were copied
		// to seed): this session can reuse the array.
		sc := &sessionConn{c: c, rest: rest, tail: tail[:0]}
		sess, err := yamux.Server(sc, a.yamuxConfig())
		if err != nil {
			return err
		}
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				break
			}
			go a.handleStream(st)
		}
		// Stop reading/writing for this session before the scanner takes over.
		// Close may block on a device write queued for an absent host; its
		// streams' handlers see their streams die either way.
		c.detach()
		closed := make(chan struct{})
		go func() {
			sess.Close()
			close(closed)
		}()
		seed = sc.retire(seed[:0])
		if a.endLogged.CompareAndSwap(false, true) {
			// The bake snapshots the VM when it sees this line: let the session's goroutines end
			// first (bounded, in case Close is stuck on a write), or every VM restored from the
			// template would run their teardown (~150 cold guest blocks under TCG) before its
			// first HELLO.
			select {
			case <-closed:
			case <-time.After(time.Second):
			}
			a.log.Printf("session ended; scanning for a new host")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (a *Agent) yamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	// No keepalive: a restored snapshot must not wake up to a timed-out session.
	cfg.EnableKeepAlive = false
	cfg.ConnectionWriteTimeout = 30 * time.Second
	cfg.MaxStreamWindowSize = 256 << 10 // host→guest buffering per stream; guest memory is small
	cfg.LogOutput = nil
	cfg.Logger = sessionLogger{a.log}
	return cfg
}

// sessionLogger is yamux's logger without the lines of a session's ordinary end. A VM saved
// mid-session (every fork child, every woken sandbox) reads its new host's HELLO inside the old
// yamux session, which then fails with "Invalid protocol version": that is how the guest learns
// of the new host (sessionConn.tail), not an error, and under TCG the console line ran ~450 cold
// guest blocks (formatting, the serial driver) ahead of the answer to that HELLO. A write that
// fails with errDetached or errNoHost is the same end seen from the sending side.
type sessionLogger struct{ *log.Logger }

func (l sessionLogger) Printf(format string, v ...any) {
	if strings.Contains(format, "Invalid protocol version") {
		return
	}
	for _, x := range v {
		if err, ok := x.(error); ok && (errors.Is(err, errDetached) || errors.Is(err, errNoHost)) {
			return
		}
	}
	l.Logger.Printf(format, v...)
}

// handshakeState survives across sessions on one port.
type handshakeState struct {
	seen     []string // recent nonces already answered (hellos are resent every 20 ms)
	answered string   // nonce of our last READY, which a GO must match

	sc  guest.HandshakeScanner // empty between scans (Rest); its buffer is kept
	buf []byte                 // what scan reads into
}

func (h *handshakeState) remember(n string) {
	h.seen = append(h.seen, n)
	if len(h.seen) > 16 {
		h.seen = h.seen[1:]
	}
}

func (h *handshakeState) forget(n string) {
	h.seen = slices.DeleteFunc(h.seen, func(s string) bool { return s == n })
}

func (h *handshakeState) known(n string) bool {
	for _, s := range h.seen {
		if s == n {
			return true
		}
	}
	return false
}

// scan discards everything but handshake lines until a GO for the nonce we
// answered, starting with seed; it returns the bytes after the GO line (the start of yamux).
func (a *Agent) scan(c *consumer, hs *handshakeState, seed []byte) ([]byte, error) {
	sc, buf := &hs.sc, hs.buf
	sc.Feed(seed)
	for {
		for s := range sc.Lines() {
			switch {
			case strings.HasPrefix(s, guest.HelloPrefix):
				if err := a.onHello(c, hs, s[len(guest.HelloPrefix):]); err != nil {
					return nil, err
				}
			case strings.HasPrefix(s, guest.GoPrefix):
				if n := strings.TrimSpace(s[len(guest.GoPrefix):]); hs.answered != "" && n == hs.answered {
					hs.answered = ""
					return sc.Rest(), nil
				}
			}
		}
		n, err := c.Read(buf)
		switch {
		case err == errHostGone:
			continue // stale state is fine: the next host sends a fresh nonce
		case err != nil:
			return nil, err
		}
		sc.Feed(buf[:n])
	}
}

func validNonce(n string) bool {
	if n == "" || len(n) > 128 {
		return false
	}
	for _, r := range n {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
			return false
		}
	}
	return true
}

func (a *Agent) onHello(c *consumer, hs *handshakeState, body string) error {
	var h guest.Hello
	if json.Unmarshal([]byte(body), &h) != nil || !validNonce(h.Nonce) {
		return nil // garbage that happens to look like a hello
	}
	if hs.known(h.Nonce) {
		return nil // a resend: no second READY
	}
	hs.remember(h.Nonce)
	// READY first (its body is made once, New, until a background process has exited), then the
	// clock and the RNG while the host's GO is on its way: that is the round trip the host waits
	// out anyway.
	ready := a.ready
	if seq := a.procs.lastExitSeq(); seq > 0 {
		b, _ := json.Marshal(guest.Ready{Version: guest.Version, BootID: a.bootID, ExitSeq: seq})
		ready = string(b)
	}
	if _, err := c.Write([]byte(guest.ReadyPrefix + h.Nonce + " " + ready + "\n")); err != nil {
		if err == errDetached {
			return err
		}
		if errors.Is(err, errNoHost) {
			// It left after its HELLO (or never showed): a resend of this nonce gets an answer,
			// and a new host sends its own.
			hs.forget(h.Nonce)
			return nil
		}
		a.log.Printf("write READY: %v", err)
		return err
	}
	hs.answered = h.Nonce
	// A new host: this may be one of many clones restored from one snapshot, so fix the clock and
	// make the RNG diverge before anything else runs (no request is served before GO, which the
	// scanner reads after this returns).
	if a.opts.SyncClock && h.TimeUnixNs > 0 {
		host := time.Unix(0, h.TimeUnixNs)
		if d := time.Since(host); d > 50*time.Millisecond || d < -50*time.Millisecond {
			// No log line when it works: every restore corrects the clock, and under TCG the line
			// (formatting, then the serial console) ran ~1,000 cold guest blocks ahead of the first
			// request.
			if err := a.opts.SetClock(host); err != nil {
				a.log.Printf("set clock: %v", err)
			}
		}
	}
	if a.opts.SeedRNG {
		if seed, err := base64.StdEncoding.DecodeString(h.Seed); err == nil && len(seed) > 0 {
			if err := a.opts.MixSeed(seed); err != nil {
				a.log.Printf("reseed rng: %v", err)
			}
		}
	}
	return nil
}
