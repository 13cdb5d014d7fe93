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

// A look whose list was answered before the guest took a process being started does not turn the
// watch off, whether the list left before the start began or while it was on its way; the look
// after the start ends does, once nothing runs. (CI once saw a process's exit never reported: the
// watch was turned off by a look between the start's first step and the guest's start.)
func TestLookDuringStart(t *testing.T) {
	code := func(c int) *int { return &c }
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	exited := []guest.ProcessInfo{{Pid: 7, ExitCode: code(0), StartedAt: at, ExitedAt: at.Add(time.Second)}}
	for _, tc := range []struct {
		name string
		// steps: "w" a start's watchProcs, "b" a look begins, "e" that look ends (empty list)
		steps string
		watch bool
	}{
		{"look begins before the start, ends before the guest has it", "bwe", true},
		{"look begins between the start's steps, ends before the guest has it", "wbew", true},
		{"look begins between the start's steps, ends after the start", "wbwe", true},
		{"look begins after the start ends", "wwbe", false},
	} {
		sb := &sandbox{rec: record{ID: "sb"}}
		var gen uint64
		for _, s := range tc.steps {
			switch s {
			case 'w':
				sb.watchProcs()
			case 'b':
				gen = sb.lookBegins()
			case 'e':
				sb.lookEnds(gen, nil)
			}
		}
		if sb.procWatch != tc.watch {
			t.Errorf("%s: watching %v, want %v", tc.name, sb.procWatch, tc.watch)
		}
		// The next look lists the process's exit: logged once, and the watch ends.
		if got := sb.lookEnds(sb.lookBegins(), exited); len(got) != 1 || got[0].Pid != 7 || sb.procWatch {
			t.Errorf("%s: the next look logged %+v (watching after: %v)", tc.name, got, sb.procWatch)
		}
	}
}
