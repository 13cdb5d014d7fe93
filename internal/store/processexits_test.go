package store

import (
	"context"
	"testing"
	"time"
)

// TestProcessExits: an exit is recorded once however often it is reported; a host reports only
// for its own sandboxes; a service's sandboxes make no events; the team sees its exits in order
// and they are pruned.
func TestProcessExits(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
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
