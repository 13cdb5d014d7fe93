package sandbox

import (
	"context"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
)

// OpenPTY starts an interactive terminal in the sandbox (waking it first): cmd or argv, else the
// user's login shell, with the sandbox's env under the call's. The session ends with ctx or Close.
func (m *Manager) OpenPTY(ctx context.Context, id string, req guest.ExecRequest, cols, rows int) (*guest.PTY, error) {
	switch {
	case req.Cmd != "" && len(req.Argv) > 0:
		return nil, errdefs.Invalidf("a terminal takes cmd or argv, not both")
	case cols < 0 || rows < 0 || cols > guest.MaxTermSize || rows > guest.MaxTermSize:
		return nil, errdefs.Invalidf("terminal size %dx%d is outside 1 to %d", cols, rows, guest.MaxTermSize)
	}
	c, sb, err := m.guest(ctx, id)
	if err != nil {
		return nil, err
	}
	req.Env = execEnv(sb, req.Env)
	p, err := c.OpenPTY(ctx, req, cols, rows)
	if err != nil {
		return nil, m.callErr(sb, err)
	}
	return p, nil
}
