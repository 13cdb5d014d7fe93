package guest_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// hijackPort stands in for QEMU's end of the agent's virtio port: the host's connection is
// relayed to the real agent until hijack, after which the connection stays open (as QEMU's does)
// but another guest process is on the far side: "silent" reads and never answers, "junk" answers
// everything with garbage and a READY for the wrong nonce.
type hijackPort struct {
	t     *testing.T
	sock  string
	agent string
	mu    sync.Mutex
	mode  string
	pipes []net.Conn // agent-side connections of relays in agent mode
}

func newHijackPort(t *testing.T, e *env) *hijackPort {
	p := &hijackPort{t: t, sock: filepath.Join(t.TempDir(), "port.sock"), agent: e.sock, mode: "agent"}
	testenv.Serve(t, "unix", p.sock, p.relay)
	return p
}

func (p *hijackPort) hijack(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	for _, c := range p.pipes {
		c.Close() // the agent is gone (killed); the host's side stays connected
	}
	p.pipes = nil
}

func (p *hijackPort) relay(host net.Conn) {
	var agent net.Conn
	p.mu.Lock()
	if p.mode == "agent" {
		c, err := net.Dial("unix", p.agent)
		if err == nil {
			agent = c
			p.pipes = append(p.pipes, c)
			go io.Copy(host, c)
		}
	}
	p.mu.Unlock()
	buf := make([]byte, 32<<10)
	for {
		n, err := host.Read(buf)
		if err != nil {
			if agent != nil {
				agent.Close()
			}
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		switch {
		case mode == "junk":
			host.Write([]byte("\x00\x07garbage PANDASTACK-READY 00000000000000000000000000000000 {}\nPANDASTACK-READY x\n\xff\xfe"))
		case mode == "agent" && agent != nil:
			agent.Write(buf[:n])
		}
	}
}

// guard bounds a call so that a hang fails the test instead of stalling it: the client must
// give up well before (guest.ReplyTimeout, shortened to 3 s here, after a 1 s ping delay), and
// before yamux's own keepalive would (15 s interval, 30 s ping timeout).
func guard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, guest.ErrConnectionLost) {
		t.Fatalf("%s: got %v, want guest.ErrConnectionLost (a bounded failure, not a hang)", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// A process that takes the agent's port, and stays silent or answers with garbage: the call in
// flight fails (once the guest misses a ping, or at the first bad frame) and the re-dial's
// handshake gives up after ReplyTimeout instead of waiting for a READY that never comes. With the
// agent back on its port, the same client works again.
func TestHijackedPeerFailsCalls(t *testing.T) {
	guest.SetReplyTimeoutForTest(t, 3*time.Second)
	for _, peer := range []string{"silent", "junk"} {
		t.Run(peer, func(t *testing.T) {
			t.Parallel()
			e := startAgent(t)
			p := newHijackPort(t, e)
			c, err := guest.Connect(guard(t), p.sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Health(guard(t)); err != nil {
				t.Fatal(err)
			}
			p.hijack(peer)
			_, err = c.Exec(guard(t), guest.ExecRequest{Cmd: "sleep 1", User: "root"}, nil, io.Discard, io.Discard)
			wantLost(t, "exec on a "+peer+" peer", err)
			_, err = c.Health(guard(t))
			wantLost(t, "re-dial to a "+peer+" peer", err)
			p.hijack("agent")
			if _, err := c.Health(guard(t)); err != nil {
				t.Fatalf("after the agent is back: %v", err)
			}
		})
	}
}
