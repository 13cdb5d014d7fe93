package agentclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/splice"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// DialPort opens a raw TCP tunnel to port in sandbox id through the agent (hostapi.TCPUpgrade):
// the returned connection carries that port's bytes both ways. A hibernated sandbox is woken
// first; nothing listening is the agent's 502 as an *Error.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return c.upgrade(ctx, "/"+path.Join("v1/sandboxes", id, "ports", strconv.Itoa(port))+"/")
}

// RelayPort is DialPort through the sandbox's guest agent (hostapi.RelayPath): to port on the
// guest's loopback over the agent's channel, not the guest's network. An agent or guest agent
// without the relay answers an *Error (404 or 400) before anything reached the port.
func (c *Client) RelayPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return c.upgrade(ctx, hostapi.RelayPath(id, port))
}

// upgrade sends a TCP upgrade request for path (of the agent) and returns the upgraded connection.
func (c *Client) upgrade(ctx context.Context, path string) (net.Conn, error) {
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	var conn net.Conn
	if u.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: d, Config: &tls.Config{ServerName: u.Hostname()}}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, &Unreachable{err}
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, _ := http.NewRequest("GET", strings.TrimSuffix(c.BaseURL, "/")+path, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", hostapi.TCPUpgrade)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, &Unreachable{err}
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, &Unreachable{err}
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		conn.Close()
		return nil, decodeError(resp, b)
	}
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("agent tunnel: %w", ctx.Err())
	}
	conn.SetDeadline(time.Time{})
	return &splice.BufferedConn{Conn: conn, R: br}, nil
}
