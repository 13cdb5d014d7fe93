package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TerminalOptions say what a terminal runs (Cmd, a shell line; default the user's login shell),
// as whom, where, and its size (0: 80×24).
type TerminalOptions struct {
	Cmd, User, Cwd string
	Cols, Rows     int
}

// Terminal is an interactive terminal in a sandbox (GET /v1/sandboxes/{id}/pty, a WebSocket).
// Write sends keystrokes; Wait copies what it shows until its program exits.
type Terminal struct {
	conn *websocket.Conn
	ctx  context.Context
}

// Terminal opens an interactive terminal; close it (or let its program exit) to end it.
func (c *Client) Terminal(ctx context.Context, id string, o TerminalOptions) (*Terminal, error) {
	q := url.Values{}
	for k, v := range map[string]string{"cmd": o.Cmd, "user": o.User, "cwd": o.Cwd} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Cols > 0 && o.Rows > 0 {
		q.Set("cols", strconv.Itoa(o.Cols))
		q.Set("rows", strconv.Itoa(o.Rows))
	}
	u := c.BaseURL + sbPath(id, "/pty")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+c.APIKey)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.HTTP, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			ae := &APIError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"), Code: "internal", Message: resp.Status}
			if resp.Body != nil {
				var env v1.ErrorBody
				if b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); json.Unmarshal(b, &env) == nil && env.Error.Code != "" {
					ae.Code, ae.Message = env.Error.Code, env.Error.Message
				}
			}
			return nil, ae
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{BaseURL: c.BaseURL, Err: err}
	}
	conn.SetReadLimit(1 << 20)
	return &Terminal{conn: conn, ctx: ctx}, nil
}

// Write sends keystrokes (any bytes) to the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.conn.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Resize tells the terminal its new size.
func (t *Terminal) Resize(cols, rows int) error {
	b, _ := json.Marshal(v1.TerminalMessage{Type: "resize", Cols: cols, Rows: rows})
	return t.conn.Write(t.ctx, websocket.MessageText, b)
}

// Wait copies the terminal's output to out until its program exits, and returns the exit
// message (ExitCode, Signal).
func (t *Terminal) Wait(out io.Writer) (v1.TerminalMessage, error) {
	for {
		typ, b, err := t.conn.Read(t.ctx)
		if err != nil {
			if t.ctx.Err() != nil {
				return v1.TerminalMessage{}, t.ctx.Err()
			}
			return v1.TerminalMessage{}, fmt.Errorf("the terminal's connection broke: %w", err)
		}
		if typ == websocket.MessageBinary {
			if _, err := out.Write(b); err != nil {
				return v1.TerminalMessage{}, err
			}
			continue
		}
		var m v1.TerminalMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return m, fmt.Errorf("bad terminal message %q", truncateText(string(b)))
		}
		switch {
		case m.Type == "exit" && m.ExitCode != nil:
			t.conn.Close(websocket.StatusNormalClosure, "")
			return m, nil
		case m.Type == "error" && m.Error != nil:
			return m, &APIError{Status: 200, Code: m.Error.Code, Message: m.Error.Message}
		}
	}
}

// Close ends the session (the sandbox hangs the terminal up).
func (t *Terminal) Close() error { return t.conn.Close(websocket.StatusNormalClosure, "") }

func truncateText(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
