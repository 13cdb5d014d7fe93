// Package fakehost sets up service tests over a fake host agent (internal/agentclient/agenttest):
// the sandbox and template services whose one host is the agent at a URL (the fake's, or a proxy
// in front of it), over a store (testenv.SQLiteStore).
package fakehost

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/templates"
)

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Services are the sandbox and template services over st, with the agent at agentURL (token
// its bearer token) as their one host, polled once.
func Services(t testing.TB, st *store.Store, agentURL, token string) (*sandboxes.Service, *templates.Service) {
	t.Helper()
	sched := scheduler.New(scheduler.Config{Store: st, Logger: Quiet})
	sched.AddStaticAgent(agentURL, token)
	if err := sched.PollStatic(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sandboxes.New(sandboxes.Config{Store: st, Scheduler: sched, Logger: Quiet, DefaultTTL: time.Minute, MaxTTL: time.Hour}),
		templates.New(st, sched, Quiet)
}
