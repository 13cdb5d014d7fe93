package hostagent

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// maxTerminalMessage bounds one WebSocket message from the client (keystrokes, a paste, a resize).
const maxTerminalMessage = 1 << 20

// handlePTY is GET /v1/sandboxes/{id}/pty: an interactive terminal over a WebSocket. Query: cmd
// (a shell line; default the user's login shell), user, cwd, cols, rows. Binary messages carry
// the terminal's bytes both ways; text messages are hostapi.TerminalMessage (docs/processes.md).
// Errors before the terminal starts are plain error answers; the socket closing hangs it up.
func (a *Agent) handlePTY(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := func(name string) int {
		n, err := strconv.Atoi(q.Get(name))
		if q.Get(name) != "" && (err != nil || n < 1 || n > guest.MaxTermSize) {
			return -1
		}
		return n
	}
	cols, rows := size("cols"), size("rows")
	if cols < 0 || rows < 0 {
		writeError(w, errdefs.Invalidf("cols and rows must be 1 to %d", guest.MaxTermSize))
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	p, err := a.sandboxes.OpenPTY(ctx, r.PathValue("id"), guest.ExecRequest{Cmd: q.Get("cmd"), Cwd: q.Get("cwd"), User: q.Get("user")}, cols, rows)
	if err != nil {
		writeError(w, err)
		return
	}
	defer p.Close()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the client
	}
	defer conn.CloseNow()
	conn.SetReadLimit(maxTerminalMessage)

	go func() { // the client's keystrokes and resizes; its going away ends the session
		defer cancel()
		for {
			typ, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				err = p.Input(b)
			} else {
				var m hostapi.TerminalMessage
				if json.Unmarshal(b, &m) == nil && m.Type == "resize" {
					err = p.Resize(m.Cols, m.Rows)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		out, res, err := p.Next()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e := apiError(err)
				sendTerminal(ctx, conn, hostapi.TerminalMessage{Type: "error", Error: &v1.ErrorDetail{Code: e.WireCode(), Message: e.Message}})
				conn.Close(websocket.StatusInternalError, "the terminal broke")
			}
			return
		case res != nil:
			code := res.ExitCode
			sendTerminal(ctx, conn, hostapi.TerminalMessage{Type: "exit", ExitCode: &code, Signal: res.Signal})
			conn.Close(websocket.StatusNormalClosure, "exited")
			return
		}
		if conn.Write(ctx, websocket.MessageBinary, out) != nil {
			return
		}
	}
}

func sendTerminal(ctx context.Context, conn *websocket.Conn, m hostapi.TerminalMessage) {
	b, _ := json.Marshal(m)
	conn.Write(ctx, websocket.MessageText, b)
}
