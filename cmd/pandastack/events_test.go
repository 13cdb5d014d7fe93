package main

import (
	"context"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestEventsClient: the Go client follows GET /v1/events (what `pandastack events` prints): a
// sandbox made after the stream is ready arrives as an event; a cancelled context ends it cleanly.
func TestEventsClient(t *testing.T) {
	url, key := startServer(t)
	c := client.New(url, key)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var made client.Sandbox
	var got v1.Event
	err := c.Events(ctx, func(ev v1.Event) (bool, error) {
		if ev.Type == "ready" {
			var err error
			made, err = c.CreateSandbox(ctx, client.CreateRequest{Template: "base"})
			return err != nil, err
		}
		got = ev
		return ev.Type == "sandbox", nil
	})
	if err != nil || got.Sandbox == nil || got.Sandbox.ID != made.ID || got.Sandbox.State != "running" {
		t.Fatalf("events: %+v, %v (made %s)", got, err, made.ID)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := c.Events(cctx, func(v1.Event) (bool, error) { return false, nil }); err != nil {
		t.Fatalf("a cancelled follow: %v", err)
	}
}
