package hostagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/splice"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// reacher finds where a running sandbox's ports are and marks it in use meanwhile: the sandbox
// manager (sandbox.Manager.Reach), or a stub in tests. Relay connects to a port on the guest's
// loopback through its guest agent instead (sandbox.Manager.Relay).
type reacher interface {
	Reach(ctx context.Context, id string) (addr string, done func(), err error)
	Relay(ctx context.Context, id string, port int) (conn net.Conn, done func(), err error)
}

// maxPort: ports 1-65535 are proxied; the guest decides what listens.
const maxPort = 65535

// handleProxy forwards /v1/sandboxes/{id}/ports/{port}/... to that TCP port in the sandbox
// (HTTP and WebSocket, streamed both ways), waking a hibernated sandbox first. rest is the
// escaped path for the application, passed on unchanged.
func (a *Agent) handleProxy(w http.ResponseWriter, r *http.Request, id, portStr, rest string) {
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > maxPort {
		writeError(w, errdefs.Invalidf("port must be 1-%d", maxPort))
		return
	}
	addr, done, err := a.reach.Reach(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	if strings.EqualFold(r.Header.Get("Upgrade"), hostapi.TCPUpgrade) {
		tunnel(w, r, net.JoinHostPort(addr, strconv.Itoa(port)), port, id)
		return
	}
	target := &url.URL{Scheme: "http", Host: addr + ":" + strconv.Itoa(port)}
	restPath, err := url.PathUnescape(rest)
	if err != nil {
		writeError(w, errdefs.Invalidf("bad path: %v", err))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = restPath, rest
			pr.Out.Host = pr.In.Host // the guest sees the public host name
			if a.cfg.Token != "" && pr.Out.Header.Get("Authorization") == "Bearer "+a.cfg.Token {
				pr.Out.Header.Del("Authorization") // never hand the agent's token to the guest
			}
			pr.SetXForwarded()
		},
		Transport:     proxyTransport,
		FlushInterval: -1, // stream: server-sent events and chunked output pass at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			msg := err.Error()
			if strings.Contains(msg, "connection refused") {
				msg = fmt.Sprintf("nothing listens on port %d in sandbox %s", port, id)
			}
			writeError(w, errdefs.New(errdefs.Unavailable, "%s", msg))
		},
	}
	rp.ServeHTTP(w, r)
}

// tunnel answers a TCP upgrade: it dials the guest port, answers 101 and copies bytes both ways
// until either side closes (hostapi.TCPUpgrade).
func tunnel(w http.ResponseWriter, r *http.Request, addr string, port int, id string) {
	up, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", addr)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "connection refused") {
			msg = fmt.Sprintf("nothing listens on port %d in sandbox %s", port, id)
		}
		writeError(w, errdefs.New(errdefs.Unavailable, "%s", msg))
		return
	}
	defer up.Close()
	upgraded(w, up)
}

// upgraded answers 101 to a TCP upgrade and joins the client's connection with up until both
// directions end.
func upgraded(w http.ResponseWriter, up net.Conn) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, errdefs.New(errdefs.Internal, "tcp upgrade: %v", err))
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + hostapi.TCPUpgrade + "\r\n\r\n"); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	splice.Join(conn, io.MultiReader(brw.Reader, conn), up)
}

// handleRelay is GET /v1/sandboxes/{id}/relay/{port} with a TCP upgrade (hostapi.RelayPath): a
// raw connection to that port on the guest's loopback through its guest agent, not its network
// (the control plane's calls to servers of its own in the guest, e.g. a function's runner). Only
// the agent token reaches it: the public port proxy builds port paths only.
func (a *Agent) handleRelay(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > maxPort {
		writeError(w, errdefs.Invalidf("port must be 1-%d", maxPort))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), hostapi.TCPUpgrade) {
		writeError(w, errdefs.Invalidf("the relay is a TCP upgrade (Upgrade: %s)", hostapi.TCPUpgrade))
		return
	}
	up, done, err := a.reach.Relay(r.Context(), r.PathValue("id"), port)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	defer up.Close()
	upgraded(w, up)
}

// proxyTransport connects to sandbox ports: a dead port fails fast, idle connections are reused.
var proxyTransport = &http.Transport{
	DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	MaxIdleConnsPerHost: 16,
	IdleConnTimeout:     60 * time.Second,
}
