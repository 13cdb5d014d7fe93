package sandbox

import (
	"slices"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
)

// A restored copy's first look takes the exits its guest agent had numbered at the restore's
// handshake as its source's (an older agent's: those that ended before the restore); later
// exits, and every exit of a sandbox with nothing to inherit, are logged once.
func TestNewExits(t *testing.T) {
	restore := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	code := func(c int) *int { return &c }
	ps := []guest.ProcessInfo{
		{Pid: 10, Running: true, StartedAt: restore.Add(-time.Hour)},                                                         // the source's, still running
		{Pid: 11, ExitCode: code(0), StartedAt: restore.Add(-time.Hour), ExitedAt: restore.Add(-time.Minute), ExitSeq: 1},    // ended in the source
		{Pid: 14, ExitCode: code(0), StartedAt: restore.Add(-time.Hour), ExitedAt: restore.Add(3 * time.Second), ExitSeq: 2}, // ended in the source, its clock ahead
		{Pid: 12, ExitCode: code(3), StartedAt: restore.Add(-time.Hour), ExitedAt: restore.Add(time.Second), ExitSeq: 3},     // the source's, ended in the copy
		{Pid: 13, ExitCode: code(1), StartedAt: restore.Add(time.Second), ExitedAt: restore.Add(2 * time.Second), ExitSeq: 4},
	}
	for _, tc := range []struct {
		name       string
		seenBefore map[exitKey]bool
		in         inherited
		want       []int
	}{
		{"a restored copy's first look", nil, inherited{seq: 2, before: restore}, []int{12, 13}},
		{"an older agent's copy: by time", nil, inherited{before: restore}, []int{14, 12, 13}},
		{"no inheritance", nil, inherited{}, []int{11, 14, 12, 13}},
		{"seen before", map[exitKey]bool{{11, ps[1].StartedAt}: true, {12, ps[3].StartedAt}: true}, inherited{}, []int{14, 13}},
	} {
		seen, running, exits := newExits("sb_x", ps, tc.seenBefore, tc.in)
		var got []int
		for _, e := range exits {
			if e.SandboxID != "sb_x" {
				t.Fatalf("%s: exit of %q", tc.name, e.SandboxID)
			}
			got = append(got, e.Pid)
		}
		if !slices.Equal(got, tc.want) || !running || len(seen) != 4 {
			t.Fatalf("%s: logged %v (want %v), running %v, seen %v", tc.name, got, tc.want, running, seen)
		}
	}
}

// A restore inherits processes from a snapshot unless its sandbox had none (and from a snapshot
// saved before that was recorded).
func TestRestoredProcs(t *testing.T) {
	m := &Manager{}
	for _, tc := range []struct {
		src  source
		want bool
	}{
		{source{rec: record{Template: "base"}}, false},
		{source{rec: record{SnapshotID: "snap_a"}}, true},
		{source{rec: record{SnapshotID: "snap_a"}, noProcs: true}, false},
	} {
		if got := m.restoredProcs(tc.src); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.src, got, tc.want)
		}
	}
}
