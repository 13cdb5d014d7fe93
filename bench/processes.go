package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// processSuite: starting a background process against an exec of the same command (interleaved,
// the goal is start ≤ exec), the stdin → output round trip of a running process read by a
// follower (the output stream's latency from the guest to the client, plus a stdin call), and a
// keystroke's echo on an interactive terminal (goal ≤ 30 ms), and a directory watch's event
// latency (a write in the guest → the event at the client) against that echo round trip.
func (b *bench) processSuite(ctx context.Context, res map[string]float64) error {
	sb, err := b.agent.Create(ctx, hostagent.CreateRequest{Template: "base"})
	if err != nil {
		return err
	}
	defer b.agent.Kill(sb.ID)
	base := "/v1/sandboxes/" + sb.ID + "/processes"
	start := timed(func() error { return b.post(base, map[string]any{"cmd": "true"}, 201) })
	exec := timed(func() error { return b.post("/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": "true"}, 200) })
	lat, err := interleaved(60, start, exec)
	if err != nil {
		return err
	}
	res["process_start_p50_ms"], res["process_start_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	res["process_exec_p50_ms"] = pct(lat[1], 50)
	res["process_start_over_exec"] = res["process_start_p50_ms"] / res["process_exec_p50_ms"]

	// A cat with a follower: each sample writes a line to its stdin and waits for the follower
	// to see it come back.
	catPid, err := b.startProcess(base, map[string]any{"argv": []string{"cat"}, "stdin": true})
	if err != nil {
		return err
	}
	pid := strconv.Itoa(catPid)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(fctx, "GET", b.url+base+"/"+pid+"/output?follow=1", nil)
	follow, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer follow.Body.Close()
	lines := bufio.NewScanner(follow.Body)
	roundTrip := timed(func() error {
		if err := b.post(base+"/"+pid+"/stdin", map[string]any{"data": "x\n"}, 204); err != nil {
			return err
		}
		if !lines.Scan() {
			return fmt.Errorf("the follower's stream ended: %v", lines.Err())
		}
		return nil
	})

	// A directory watch's latency: a shell appends to a file for each stdin line; the sample ends
	// when the watch reports the write. Interleaved with the echo round trip above (the same stdin
	// call, the output stream instead of the watch): the baseline of the same run.
	if err := b.post("/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": "mkdir -p /tmp/benchw"}, 200); err != nil {
		return err
	}
	writer, err := b.startProcess(base, map[string]any{"cmd": "while read l; do echo x >> /tmp/benchw/f; done", "stdin": true})
	if err != nil {
		return err
	}
	wreq, _ := http.NewRequestWithContext(fctx, "GET", b.url+"/v1/sandboxes/"+sb.ID+"/files/watch?path=/tmp/benchw", nil)
	watch, err := http.DefaultClient.Do(wreq)
	if err != nil {
		return err
	}
	defer watch.Body.Close()
	events := bufio.NewScanner(watch.Body)
	if !events.Scan() || !strings.Contains(events.Text(), `"ready"`) {
		return fmt.Errorf("watch: no ready line (%d): %s %v", watch.StatusCode, events.Text(), events.Err())
	}
	watchTrip := timed(func() error {
		if err := b.post(base+"/"+strconv.Itoa(writer)+"/stdin", map[string]any{"data": "x\n"}, 204); err != nil {
			return err
		}
		for events.Scan() {
			if strings.Contains(events.Text(), `"write"`) {
				return nil
			}
		}
		return fmt.Errorf("the watch stream ended: %v", events.Err())
	})
	if lat, err = interleaved(60, roundTrip, watchTrip); err != nil {
		return err
	}
	res["process_stdin_echo_p50_ms"], res["process_stdin_echo_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	res["watch_event_p50_ms"], res["watch_event_p99_ms"] = pct(lat[1], 50), pct(lat[1], 99)
	res["watch_event_over_stdin_echo"] = res["watch_event_p50_ms"] / res["process_stdin_echo_p50_ms"]

	// A keystroke's echo on an interactive terminal (GET …/pty, a WebSocket): `cat` on the
	// terminal, whose line discipline echoes each key at once.
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.url, "http")+"/v1/sandboxes/"+sb.ID+"/pty?cmd=cat", nil)
	if err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	defer conn.CloseNow()
	keystroke := timed(func() error {
		if err := conn.Write(ctx, websocket.MessageBinary, []byte("k")); err != nil {
			return err
		}
		for {
			typ, msg, err := conn.Read(ctx)
			if err != nil {
				return err
			}
			if typ == websocket.MessageBinary && bytes.Contains(msg, []byte("k")) {
				return nil
			}
		}
	})
	if lat, err = interleaved(100, keystroke); err != nil {
		return err
	}
	res["pty_keystroke_echo_p50_ms"], res["pty_keystroke_echo_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	return nil
}

// startProcess starts a background process (POST base) and returns its pid.
func (b *bench) startProcess(base string, req map[string]any) (int, error) {
	body, _ := json.Marshal(req)
	resp, err := http.Post(b.url+base, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var started hostapi.ProcessStarted
	if err := json.NewDecoder(resp.Body).Decode(&started); err != nil || started.Pid == 0 {
		return 0, fmt.Errorf("start %v: %d %v", req, resp.StatusCode, err)
	}
	return started.Pid, nil
}
