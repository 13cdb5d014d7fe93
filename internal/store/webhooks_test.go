package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestDeliveriesOncePerEventAndClaim: replicas recording the same event make one delivery; replicas
// claiming at once each get distinct deliveries; a retry is claimable only when due; finished ones
// are neither claimed nor kept past the retention.
func TestDeliveriesOncePerEventAndClaim(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		d := func(id, key string) Delivery {
			return Delivery{ID: id, WebhookID: "wh_a", TeamID: "team_a", EventKey: key, EventType: "sandbox.killed", Payload: "{}",
				State: DeliveryPending, NextAt: now, CreatedAt: now, UpdatedAt: now}
		}
		for i, c := range []struct {
			d    Delivery
			want bool
		}{{d("whd_1", "k1"), true}, {d("whd_2", "k1"), false}, {d("whd_3", "k2"), true}, {d("whd_4", "k3"), true}} {
			if got, err := s.EnqueueDelivery(ctx, c.d); err != nil || got != c.want {
				t.Fatalf("enqueue %d: %v %v, want %v", i, got, err, c.want)
			}
		}
		// Two replicas claim at once: every due delivery goes to exactly one.
		var mu sync.Mutex
		claimed := map[string]int{}
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds, err := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				for _, x := range ds {
					claimed[x.ID]++
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(claimed) != 3 || claimed["whd_1"] != 1 || claimed["whd_3"] != 1 || claimed["whd_4"] != 1 {
			t.Fatalf("claims %v", claimed)
		}
		if ds, _ := s.ClaimDeliveries(ctx, now, now.Add(time.Minute), 10); len(ds) != 0 {
			t.Fatalf("leased deliveries claimed again: %v", ds)
		}
		// whd_1 failed: a retry in 10 s; whd_3 succeeded.
		retry := d("whd_1", "k1")
		retry.Attempts, retry.NextAt, retry.StatusCode, retry.Error = 1, now.Add(10*time.Second), 500, "HTTP 500"
		ok := d("whd_3", "k2")
		ok.State, ok.Attempts, ok.StatusCode = DeliverySucceeded, 1, 204
		for _, x := range []Delivery{retry, ok} {
			if err := s.FinishAttempt(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		if ds, _ := s.ClaimDeliveries(ctx, now.Add(5*time.Second), now.Add(time.Minute), 10); len(ds) != 0 {
			t.Fatalf("claimed before due: %v", ds)
		}
		ds, err := s.ClaimDeliveries(ctx, now.Add(11*time.Second), now.Add(2*time.Minute), 10)
		if err != nil || len(ds) != 1 || ds[0].ID != "whd_1" || ds[0].Attempts != 1 || ds[0].StatusCode != 500 {
			t.Fatalf("the due retry: %+v %v", ds, err)
		}
		list, err := s.ListDeliveries(ctx, "team_a", "wh_a", 10)
		if err != nil || len(list) != 3 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if other, _ := s.ListDeliveries(ctx, "team_b", "wh_a", 10); len(other) != 0 {
			t.Fatalf("another team lists %v", other)
		}
		if n, err := s.PruneDeliveries(ctx, now.Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("prune: %d %v (only the succeeded one)", n, err)
		}
	})
}

// TestProcessExits: an exit is recorded once however often it is reported; a host reports only
// for its own sandboxes; a service's sandboxes make no events; the team sees its exits in order
// and they are pruned.
func TestProcessExits(t *testing.T) {
	eachBackend(t, func(ctx context.Context, t *testing.T, s *Store) {
		clk := withTeams(t, s, "team_a", "team_b")
		for _, sb := range []Sandbox{
			{ID: "sb_a", TeamID: "team_a", HostID: "h1"}, {ID: "sb_b", TeamID: "team_b", HostID: "h2"},
			{ID: "sb_svc", TeamID: "team_a", HostID: "h1", Owner: OwnerFunction},
		} {
			sb.Template, sb.State, sb.ExpiresAt = "base", StateRunning, clk.now().Add(time.Hour)
			if _, err := s.CreateSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		start := clk.now().Truncate(time.Microsecond)
		exit := func(sb string, pid int) ProcessExit {
			return ProcessExit{SandboxID: sb, Pid: pid, Tag: "job", ExitCode: 3, Signal: "", StartedAt: start, ExitedAt: start.Add(time.Second)}
		}
		for i, c := range []struct {
			host  string
			exits []ProcessExit
			want  int
		}{
			{"h1", []ProcessExit{exit("sb_a", 10), exit("sb_a", 11)}, 2},
			{"h1", []ProcessExit{exit("sb_a", 10), exit("sb_a", 12)}, 1}, // 10 again: once
			{"h1", []ProcessExit{exit("sb_b", 10)}, 0},                   // not h1's sandbox
			{"h1", []ProcessExit{exit("sb_svc", 10), exit("sb_gone", 1)}, 0},
			{"h2", []ProcessExit{exit("sb_b", 10)}, 1},
		} {
			if n, err := s.RecordProcessExits(ctx, c.host, c.exits); err != nil || n != c.want {
				t.Fatalf("report %d: %d new (%v), want %d", i, n, err, c.want)
			}
		}
		got, err := s.ProcessExitsSince(ctx, "team_a", time.Time{}, 10)
		if err != nil || len(got) != 3 {
			t.Fatalf("team_a's exits: %+v %v", got, err)
		}
		if e := got[0]; e.SandboxID != "sb_a" || e.Pid != 10 || e.Tag != "job" || e.ExitCode != 3 || !e.StartedAt.Equal(start) ||
			!e.ExitedAt.Equal(start.Add(time.Second)) || e.TeamID != "team_a" || e.RecordedAt.IsZero() {
			t.Errorf("exit %+v", e)
		}
		if got, _ := s.ProcessExitsSince(ctx, "team_a", got[2].RecordedAt, 10); len(got) != 0 {
			t.Errorf("after the last: %+v", got)
		}
		if n, err := s.PruneProcessExits(ctx, clk.now().Add(time.Hour)); err != nil || n != 4 {
			t.Errorf("pruned %d (%v), want 4", n, err)
		}
	})
}
