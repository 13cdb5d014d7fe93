package agenttest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestContractHostAgent holds the real host agent (real microVMs, PANDASTACK_VM_TESTS=1) to the
// contract the fake meets in TestContractFake. One agent, a handful of sandboxes, one at a time;
// VMMs prepared for the next create, as the agent command has them.
func TestContractHostAgent(t *testing.T) {
	testenv.NeedVMs(t)
	const token = "contract-token"
	a, err := hostagent.New(context.Background(), hostagent.Config{DataDir: testenv.DataDir(t), Token: token,
		GuestAgent: testenv.GuestAgent(t), ImageCacheDir: testenv.ImageCache(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PreparedTemplates: hostagent.DefaultPreparedTemplates, DiskReserveMiB: testenv.DiskReserveMiB})
	if err != nil {
		t.Fatalf("host agent: %v", err)
	}
	srv := httptest.NewServer(a.Handler())
	c := agentclient.New(srv.URL, token)
	defer func() {
		// Whatever a failed check left behind goes, so the agent can release its pool.
		sbs, _ := c.ListSandboxes(context.Background())
		for _, sb := range sbs {
			c.KillSandbox(context.Background(), sb.ID)
		}
		srv.Close()
		if err := a.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	agenttest.Run(t, agenttest.Target{Client: c, Template: "base"})
}
