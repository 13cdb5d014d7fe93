package agentclient

import (
	"context"

	"github.com/pandastack/pandastack/internal/client"
)

// Terminal opens an interactive terminal in sandbox id: GET /v1/sandboxes/{id}/pty on the host, a
// WebSocket speaking the public API's terminal protocol, so the public client's Terminal speaks it
// (with the host's token). The E2B facade's PTYs use it; the public API passes the connection
// through instead.
func (c *Client) Terminal(ctx context.Context, id string, o client.TerminalOptions) (*client.Terminal, error) {
	pc := client.New(c.BaseURL, c.Token)
	pc.HTTP = c.HTTP
	return pc.Terminal(ctx, id, o)
}
