package guest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/timing"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("guest: client closed")

// ErrConnectionLost wraps failures of the transport (guest gone, session died
// mid-call). The next call re-dials.
var ErrConnectionLost = errors.New("guest: connection lost")

// The steps of a connect, marked in ctx's timing trace (internal/timing).
const (
	StepChannel = "guest_channel" // the channel's socket dialed
	StepHello   = "guest_hello"   // HELLO sent until the guest's READY (and our GO)
)

// dialRetry is how often Connect retries a socket that does not exist yet or refuses.
const dialRetry = 20 * time.Millisecond

// Bounds on a peer that is not (or no longer) the guest agent: root in the guest can kill the
// agent and hold its port open, silent or speaking garbage, while the VM runs on. The host then
// fails calls with ErrConnectionLost within about ReplyTimeout instead of waiting for the
// caller to give up.
// ReplyTimeout bounds a re-dial's handshake (the agent answers HELLO at once) and each ping a
// waiting call sends (yamux answers pings in the guest whatever the command does). It must be
// generous: a TCG guest thrashing under its own memory hog answered neither within 10 s, and
// then recovered. 30 s is yamux's own write timeout here. (A variable only so tests can shorten it.)
var ReplyTimeout = 30 * time.Second

const (
	// probeAfter is how long a call waits for its next frame before pinging the guest.
	probeAfter = time.Second
	// probeEvery is how often a call that still waits pings again.
	probeEvery = 5 * time.Second
)

// Client talks to one guest agent through the unix socket of its VM's
// virtio-serial port. It is safe for concurrent use and re-dials (with a fresh
// handshake) whenever the session has died, so one Client lives as long as the sandbox.
type Client struct {
	path string

	connecting chan struct{} // 1-slot semaphore: one (re)connect at a time; waiters honour their ctx
	closed     chan struct{}
	closeOnce  sync.Once

	mu     sync.Mutex // guards the fields below
	sess   *yamux.Session
	conn   net.Conn
	ready  Ready
	dialed bool // a handshake has succeeded: re-dials are bounded by ReplyTimeout

	replyTimeout time.Duration // ReplyTimeout when the client was made
}

// Ready is the guest agent's READY of the last handshake.
func (c *Client) Ready() Ready {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// Connect dials the unix socket path (retrying while it does not exist or
// refuses, until ctx ends), does the handshake and starts yamux.
func Connect(ctx context.Context, socketPath string) (*Client, error) {
	c := &Client{
		path:       socketPath,
		connecting: make(chan struct{}, 1),
		closed:     make(chan struct{}),
		// Read once: a client's watchdogs may outlive its caller (a test that shortens the
		// variable for itself must not race with another's).
		replyTimeout: ReplyTimeout,
	}
	if _, err := c.session(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Close ends the session. Calls in flight fail.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	s := c.sess
	c.sess, c.conn = nil, nil
	c.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}

// session returns a live session, re-dialing if the current one died.
func (c *Client) session(ctx context.Context) (*yamux.Session, error) {
	if s := c.current(); s != nil {
		return s, nil
	}
	select {
	case c.connecting <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, ErrClosed
	}
	defer func() { <-c.connecting }()
	if s := c.current(); s != nil { // someone else reconnected while we waited
		return s, nil
	}
	select {
	case <-c.closed:
		return nil, ErrClosed
	default:
	}

	// Close() must abort a dial/handshake in progress.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-dctx.Done():
		}
	}()

	conn, err := dialUnix(dctx, c.path)
	if err != nil {
		return nil, c.ctxErr(ctx, err)
	}
	timing.Mark(ctx, StepChannel)
	// The first handshake waits for the guest to boot (the caller's ctx bounds it); a re-dial
	// reaches a running guest whose agent answers at once, unless something else holds its port.
	hctx := dctx
	c.mu.Lock()
	redial := c.dialed
	c.mu.Unlock()
	noReady := errNoReady(c.replyTimeout)
	if redial {
		var hcancel context.CancelFunc
		hctx, hcancel = context.WithTimeoutCause(dctx, c.replyTimeout, noReady)
		defer hcancel()
	}
	rest, ready, err := hostHandshake(hctx, conn)
	if err != nil {
		conn.Close()
		if ctx.Err() == nil && context.Cause(hctx) == noReady {
			return nil, c.ctxErr(ctx, fmt.Errorf("%w: %v", ErrConnectionLost, noReady))
		}
		return nil, c.ctxErr(ctx, err)
	}
	timing.Mark(ctx, StepHello)
	sess, err := yamux.Client(&prefixConn{Conn: conn, rest: rest}, clientConfig())
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.mu.Lock()
	select {
	case <-c.closed:
		c.mu.Unlock()
		sess.Close()
		return nil, ErrClosed
	default:
	}
	old := c.sess
	c.sess, c.conn, c.ready, c.dialed = sess, conn, ready, true
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return sess, nil
}

func errNoReady(within time.Duration) error {
	return fmt.Errorf("guest handshake: no READY from the guest agent within %v (is another process holding its channel?)", within)
}

// probe pings the guest over sess and reports whether it stayed silent for within (a session
// that ended meanwhile is not silence: its calls fail anyway).
func probe(sess *yamux.Session, within time.Duration) (silent bool) {
	done := make(chan struct{})
	go func() { sess.Ping(); close(done) }()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}

func (c *Client) current() *yamux.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil && !c.sess.IsClosed() {
		return c.sess
	}
	return nil
}

func (c *Client) dropSession(s *yamux.Session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess, c.conn = nil, nil
	}
	c.mu.Unlock()
	s.Close()
}

func (c *Client) ctxErr(ctx context.Context, err error) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func clientConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	// Keepalive on the host side turns a hung guest into an error instead of a hang.
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.ConnectionWriteTimeout = 30 * time.Second // generous: TCG guests can be slow
	cfg.MaxStreamWindowSize = 1 << 20             // guest→host bulk (file reads, stdout)
	cfg.StreamOpenTimeout = 60 * time.Second
	// After we close a stream the guest has this long to close its side before we
	// reset it; the reset is what unsticks a guest exec blocked on stdin.
	cfg.StreamCloseTimeout = 10 * time.Second
	cfg.LogOutput = io.Discard
	return cfg
}

func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EAGAIN) {
			return nil, err
		}
		t := time.NewTimer(dialRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// hostHandshake runs the host half: HELLO (repeated) → wait for READY <nonce> →
// GO <nonce>. It returns bytes read past the READY line (they belong to yamux).
func hostHandshake(ctx context.Context, conn net.Conn) ([]byte, Ready, error) {
	var nb [16]byte
	var seed [32]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, Ready{}, err
	}
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, Ready{}, err
	}
	nonce := hex.EncodeToString(nb[:])
	body, _ := json.Marshal(Hello{Nonce: nonce, TimeUnixNs: time.Now().UnixNano(), Seed: base64.StdEncoding.EncodeToString(seed[:])})
	hello := []byte(HelloPrefix + string(body) + "\n")

	// ctx aborts blocked reads and writes through a deadline in the past.
	stopAfter := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stopAfter()

	stopSend := make(chan struct{})
	sendDone := make(chan error, 1)
	go func() {
		t := time.NewTicker(HelloInterval)
		defer t.Stop()
		for {
			if _, err := conn.Write(hello); err != nil {
				sendDone <- err
				return
			}
			select {
			case <-stopSend:
				sendDone <- nil
				return
			case <-t.C:
			}
		}
	}()
	stopSender := func() error {
		close(stopSend)
		return <-sendDone
	}

	var sc HandshakeScanner
	buf := make([]byte, 4096)
	want := ReadyPrefix + nonce + " "
	for {
		for s := range sc.Lines() {
			if !strings.HasPrefix(s, want) {
				continue // garbage, or a READY for an older nonce
			}
			var ready Ready
			if err := json.Unmarshal([]byte(s[len(want):]), &ready); err != nil {
				continue
			}
			rest := sc.Rest()
			// No hello may follow GO: it would land inside the guest's yamux stream.
			if err := stopSender(); err != nil {
				return nil, Ready{}, handshakeErr(ctx, err)
			}
			if _, err := conn.Write([]byte(GoPrefix + nonce + "\n")); err != nil {
				return nil, Ready{}, handshakeErr(ctx, err)
			}
			if !stopAfter() {
				return nil, Ready{}, ctx.Err()
			}
			conn.SetDeadline(time.Time{})
			return rest, ready, nil
		}
		n, err := conn.Read(buf)
		if n > 0 {
			sc.Feed(buf[:n])
			continue
		}
		if err != nil {
			conn.SetDeadline(time.Unix(1, 0)) // unblock the sender
			stopSender()
			return nil, Ready{}, handshakeErr(ctx, err)
		}
	}
}

func handshakeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("guest handshake: %w", err)
}

// prefixConn replays bytes the handshake read ahead, then reads the conn.
type prefixConn struct {
	net.Conn
	rest []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.rest) > 0 {
		n := copy(b, p.rest)
		p.rest = p.rest[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
