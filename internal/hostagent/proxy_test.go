package hostagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/testenv"
)

// guestAt is a running sandbox sb_x whose ports are at addr.
type guestAt string

func (g guestAt) Reach(_ context.Context, id string) (string, func(), error) {
	if id != "sb_x" {
		return "", nil, errdefs.NotFoundf("sandbox %s not found", id)
	}
	return string(g), func() {}, nil
}

// Relay stands in for the guest agent's loopback dial with a TCP dial of addr:port.
func (g guestAt) Relay(ctx context.Context, id string, port int) (net.Conn, func(), error) {
	addr, done, err := g.Reach(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	c, err := net.Dial("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		return nil, nil, errdefs.New(errdefs.Unavailable, "nothing listens on port %d in sandbox %s", port, id)
	}
	return c, done, nil
}

// The agent's port proxy passes the application's path through as sent and never redirects to
// its own route (no VM: the sandbox's "guest address" is a loopback server that echoes the
// request line).
func TestProxyRawPath(t *testing.T) {
	guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.RequestURI)
	}))
	defer guest.Close()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(guest.URL, "http://"))
	a := &Agent{cfg: Config{Token: "tok"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), reach: guestAt(host)}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	// The proxy is still behind the agent token.
	if res, err := http.Get(srv.URL + "/v1/sandboxes/sb_x/ports/" + port + "/"); err != nil || res.StatusCode != 401 {
		t.Fatalf("proxy without the agent token: %v %v", res, err)
	}
	for _, p := range []string{"//etc", "/a/../b", "/./x", "/x%2Fy", "/a/..%2F..%2Fb", "/..", "/", "//", "/a//b/./"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /v1/sandboxes/sb_x/ports/%s%s?q=1 HTTP/1.1\r\nHost: app\r\n%s: tok\r\nConnection: close\r\n\r\n",
			port, p, "X-Pandastack-Agent-Token")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		b, _ := io.ReadAll(res.Body)
		c.Close()
		if res.StatusCode != 200 || string(b) != p+"?q=1" {
			t.Errorf("GET %s: %d Location %q, the guest got %q; want 200 and the path as sent", p, res.StatusCode, res.Header.Get("Location"), b)
		}
	}
}

// A TCP upgrade on the port path is a raw tunnel to the guest port: bytes both ways, the
// client's half-close reaches the guest, a closed port is the agent's 502 before any upgrade,
// and the agent token is still required.
func TestProxyTCPTunnel(t *testing.T) {
	guest := testenv.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) { // answer everything back after the client's EOF, then close
		b, _ := io.ReadAll(c)
		c.Write(append([]byte("echo:"), b...))
	})
	_, port, _ := net.SplitHostPort(guest.Addr().String())
	a := &Agent{cfg: Config{Token: "tok"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), reach: guestAt("127.0.0.1")}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	ctx := context.Background()

	// The port path's tunnel, and the relay through the guest agent (here a stub's TCP dial).
	for name, dial := range map[string]func(c *agentclient.Client, id string, port int) (net.Conn, error){
		"port": func(c *agentclient.Client, id string, port int) (net.Conn, error) { return c.DialPort(ctx, id, port) },
		"relay": func(c *agentclient.Client, id string, port int) (net.Conn, error) {
			return c.RelayPort(ctx, id, port)
		},
	} {
		c, err := dial(agentclient.New(srv.URL, "tok"), "sb_x", mustAtoi(t, port))
		if err != nil {
			t.Fatal(name, err)
		}
		c.Write([]byte("select 1;\x00binary\xff"))
		c.(interface{ CloseWrite() error }).CloseWrite()
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "echo:select 1;\x00binary\xff" {
			t.Fatalf("%s tunnel: %q %v", name, b, err)
		}

		closed, _ := net.Listen("tcp", "127.0.0.1:0")
		_, cport, _ := net.SplitHostPort(closed.Addr().String())
		closed.Close()
		if _, err := dial(agentclient.New(srv.URL, "tok"), "sb_x", mustAtoi(t, cport)); errdefs.KindOf(asDef(err)) != errdefs.Unavailable ||
			!strings.Contains(err.Error(), "nothing listens on port") {
			t.Fatalf("%s: closed port: %v", name, err)
		}
		if _, err := dial(agentclient.New(srv.URL, "wrong"), "sb_x", mustAtoi(t, port)); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("%s: wrong token: %v", name, err)
		}
		if _, err := dial(agentclient.New(srv.URL, "tok"), "sb_nope", mustAtoi(t, port)); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("%s: unknown sandbox: %v", name, err)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// asDef is an agent client's error as its errdefs kind carrier.
func asDef(err error) error {
	var ae *agentclient.Error
	if errors.As(err, &ae) {
		return ae.Def()
	}
	return err
}
