package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/webhooks"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// hooked is an env whose webhooks run (loopback receivers allowed), with a receiver, a webhook to
// it for the event types, and the admin's events stream.
func hooked(t *testing.T, types ...string) (*env, context.Context, *receiver, v1.Webhook, <-chan v1.Event) {
	e := newEnv(t, func(c *Config) { c.Webhooks = webhooks.Policy{AllowLoopback: true} })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rcv := newReceiver(t)
	var hook v1.Webhook
	json.Unmarshal(e.mustStatus(e.do("POST", "/v1/webhooks", e.admin, map[string]any{"url": rcv.URL, "events": types}), 201).body, &hook)
	events := e.eventStream(e.admin)
	go e.srv.RunWebhooks(ctx)
	return e, ctx, rcv, hook, events
}

// TestProcessExitedEvent: a background process's exit reaches the events stream and a webhook
// (signed) as "process.exited" with its pid, tag and how it ended — through the scheduler's poll
// of the host agent, never a stream to the process — once.
func TestProcessExitedEvent(t *testing.T) {
	e, ctx, rcv, hook, events := hooked(t, "process.exited")

	sb := e.create(e.admin, map[string]any{"template": "base"})
	base := "/v1/sandboxes/" + sb.ID + "/processes"
	var started v1.ProcessStarted
	json.Unmarshal(e.mustStatus(e.do("POST", base, e.admin, map[string]any{"cmd": "sleep 600", "tag": "web"}), 201).body, &started)
	e.mustStatus(e.do("POST", fmt.Sprintf("%s/%d/signal", base, started.Pid), e.admin, map[string]any{"signal": "TERM"}), 204)
	check := func(what string, typ string, p *v1.ProcessExit) {
		t.Helper()
		if typ != "process.exited" || p == nil || p.SandboxID != sb.ID || p.Pid != started.Pid || p.Tag != "web" || p.ExitCode != 143 ||
			p.Signal != "SIGTERM" || p.StartedAt == "" || p.ExitedAt == "" {
			t.Fatalf("%s: %s %+v", what, typ, p)
		}
	}
	e.waitFor("the webhook's delivery", func() bool {
		e.sched.PollStatic(ctx) // the host's report, with the exits it saw
		return len(rcv.requests()) > 0
	})
	r := rcv.requests()[0]
	if err := webhooks.Verify(hook.Secret, r.header.Get(webhooks.HeaderSignature), r.body, e.clock.Now(), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	var ev v1.WebhookEvent
	json.Unmarshal(r.body, &ev)
	check("webhook", ev.Type, ev.Process)
	got := nextEvent(t, events, "process.exited")
	check("events stream", got.Type, got.Process)

	// Reported again (as an agent does after a restart, its cursor lost), it is not recorded again.
	page, err := agentclient.New(e.agent.URL(), agentToken).ProcessExits(ctx, 0)
	if err != nil || len(page.Exits) != 1 {
		t.Fatalf("the agent's exits: %+v %v", page, err)
	}
	if err := e.sched.Heartbeat(ctx, scheduler.Registration{HostID: "host-a", URL: e.agent.URL(), Token: agentToken, ProcessExits: page.Exits}); err != nil {
		t.Fatal(err)
	}
	row, _ := e.st.GetSandbox(ctx, sb.ID)
	if all, err := e.st.ProcessExitsSince(ctx, row.TeamID, time.Time{}, 10); err != nil || len(all) != 1 {
		t.Fatalf("recorded: %+v %v", all, err)
	}
	var ds v1.WebhookDeliveries
	json.Unmarshal(e.mustStatus(e.do("GET", "/v1/webhooks/"+hook.ID+"/deliveries", e.admin, nil), 200).body, &ds)
	if len(ds.Deliveries) != 1 || ds.Deliveries[0].Event != "process.exited" {
		t.Fatalf("deliveries: %+v", ds.Deliveries)
	}
}
