package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Process exits ("process.exited", docs/events.md). The guest agent keeps each background
// process's exit (the last guest.MaxExitedProcesses of them); the host agent looks at the process
// tables of the running sandboxes that have background processes, once a second, and logs each
// exit it has not seen. The control plane reads the log from a cursor (GET /v1/process-exits) on
// its heartbeat path and records each exit once. Nothing follows a process: a look is one guest
// call that does not count as use (idle hibernation goes on), and a hibernated sandbox is not
// looked at at all.
//
//   - Hibernation: the sandbox is looked at just before its memory is saved; what ends after that
//     look is in the saved table and is logged after the wake (the wake looks again).
//   - Fork, create from a snapshot: the child's table starts as a copy of its source's. Its first
//     look (the exit loop's next round, or a hibernation's or kill's look if one comes first: not
//     on the restore's path, which it would slow by a guest call) takes the exits the guest agent
//     had numbered when it answered the restore's handshake (guest.Ready.ExitSeq) as inherited:
//     they are the source's. The processes still running go on in the child and their exits are
//     the child's; one that ends in the child in the moment between the VM's resume and the
//     handshake is taken for inherited and not logged. (The guest's clock cannot tell them: it
//     may have run ahead in the source and is set back at the handshake.)
//   - Kill: the sandbox is looked at a last time before its VM goes.
//   - Agent restart: the log is memory, and every running sandbox is looked at again; exits logged
//     before are logged again and the control plane's store drops the repeats.
//
// An exit can be missed when more than guest.MaxExitedProcesses processes of one sandbox end
// between two looks, or when the log (MaxExitLog) wraps before the control plane reads it.

// Exit log bounds.
const (
	ExitLook     = time.Second
	MaxExitLog   = 4096
	MaxExitsPage = 200
	exitLookWait = 5 * time.Second
)

type exitKey struct {
	pid     int
	started time.Time
}

type loggedExit struct {
	seq int64
	hostapi.ProcessExit
}

// exitLog is the manager's log of process exits.
type exitLog struct {
	mu   sync.Mutex
	seq  int64 // the last seq handed out; starts at the agent's start time (unix ns)
	list []loggedExit
}

func (l *exitLog) add(e hostapi.ProcessExit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seq == 0 {
		l.seq = time.Now().UnixNano()
	}
	l.seq++
	l.list = append(l.list, loggedExit{l.seq, e})
	if len(l.list) > MaxExitLog {
		l.list = append([]loggedExit(nil), l.list[len(l.list)-MaxExitLog:]...)
	}
}

// ProcessExits returns the exits logged after cursor after (at most MaxExitsPage) and the cursor
// to ask from next.
func (m *Manager) ProcessExits(after int64) hostapi.ProcessExits {
	l := &m.exits
	l.mu.Lock()
	defer l.mu.Unlock()
	out := hostapi.ProcessExits{Exits: []hostapi.ProcessExit{}, Next: max(after, l.seq)}
	for _, e := range l.list {
		if e.seq <= after {
			continue
		}
		if len(out.Exits) == MaxExitsPage {
			break
		}
		out.Exits, out.Next = append(out.Exits, e.ProcessExit), e.seq
	}
	return out
}

// exitLoop looks at the sandboxes with background processes every ExitLook until ctx ends.
func (m *Manager) exitLoop(ctx context.Context) {
	periodic.Every(ctx, ExitLook, func() {
		m.mu.Lock()
		var due []*sandbox
		for _, sb := range m.sandboxes {
			sb.mu.Lock()
			// A copy restored less than a round ago is looked at from the next round: its
			// first look tells its own exits by time (inheritBefore), and a copy's first
			// moments are its first work's (a function's invocation), not a look's.
			fresh := !sb.inheritBefore.IsZero() && time.Since(sb.inheritBefore) < ExitLook
			if sb.procWatch && sb.rec.State == StateRunning && !fresh {
				due = append(due, sb)
			}
			sb.mu.Unlock()
		}
		m.mu.Unlock()
		for _, sb := range due {
			c, err := sb.guest(ctx)
			if err == nil {
				m.lookExits(ctx, sb, c)
			}
		}
	})
}

// lookExits lists sb's processes and logs the exits not seen before; while sb has exits to
// inherit (a restored copy's: sandbox.inheritSeq, inheritBefore), those are its source's and are
// marked seen without logging. A failed look changes nothing.
func (m *Manager) lookExits(ctx context.Context, sb *sandbox, c *guest.Client) {
	sb.look.Lock()
	defer sb.look.Unlock()
	ctx, cancel := context.WithTimeout(ctx, exitLookWait)
	defer cancel()
	gen := sb.lookBegins()
	ps, err := c.ListProcesses(ctx)
	if err != nil {
		return
	}
	for _, e := range sb.lookEnds(gen, ps) {
		m.exits.add(e)
	}
}

// lookBegins is a look's first step: the watch generation its list is compared with.
func (sb *sandbox) lookBegins() uint64 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.watchGen
}

// lookEnds takes the list ps of a look that began at generation gen: the exits to log. The watch
// stays on while a process runs, and when a start began or ended while the list was on its way
// (that process may be missing from ps).
func (sb *sandbox) lookEnds(gen uint64, ps []guest.ProcessInfo) []hostapi.ProcessExit {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	var exits []hostapi.ProcessExit
	var running bool
	sb.exitsSeen, running, exits = newExits(sb.rec.ID, ps, sb.exitsSeen, inherited{sb.inheritSeq, sb.inheritBefore})
	sb.procWatch = running || sb.watchGen != gen
	sb.inheritBefore, sb.inheritSeq = time.Time{}, 0
	return exits
}

// inherited tells a restored copy's inherited exits (sandbox.inheritSeq, inheritBefore); the
// zero value inherits none.
type inherited struct {
	seq    uint64
	before time.Time
}

func (in inherited) has(p guest.ProcessInfo) bool {
	if in.seq > 0 {
		return p.ExitSeq != 0 && p.ExitSeq <= in.seq
	}
	return !in.before.IsZero() && p.ExitedAt.Before(in.before)
}

// newExits compares a sandbox's process table ps with the exits seen at the look before: the
// exits seen now (what left the guest's table cannot come back: only the keys still listed are
// kept), whether a process still runs, and the exits to log. Inherited exits are seen, not
// logged.
func newExits(id string, ps []guest.ProcessInfo, seenBefore map[exitKey]bool, in inherited) (seen map[exitKey]bool, running bool, exits []hostapi.ProcessExit) {
	seen = make(map[exitKey]bool, len(ps))
	for _, p := range ps {
		if p.Running {
			running = true
			continue
		}
		k := exitKey{p.Pid, p.StartedAt}
		seen[k] = true
		if seenBefore[k] || p.ExitCode == nil || in.has(p) {
			continue
		}
		exits = append(exits, hostapi.ProcessExit{SandboxID: id, Pid: p.Pid, Tag: p.Tag, ExitCode: *p.ExitCode, Signal: p.Signal,
			StartedAt: hostapi.Time(p.StartedAt), ExitedAt: hostapi.Time(p.ExitedAt)})
	}
	return seen, running, exits
}

// watchProcs has sb looked at from the next round on (a process is being started, or may run).
// A start calls it twice, before the guest call and after it: a look whose list was answered
// before the guest took the process began after the first call, and must not turn the watch
// off; the second call moves the generation on past it.
func (sb *sandbox) watchProcs() {
	sb.mu.Lock()
	sb.procWatch = true
	sb.watchGen++
	sb.mu.Unlock()
}

// hasProcs reports whether sb has (or had) background processes this agent knows of.
func (sb *sandbox) hasProcs() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.procWatch || len(sb.exitsSeen) > 0
}

// restoredProcs reports whether a sandbox restored from src may hold background processes copied
// from its source: a fork of a sandbox that has them, or a restore of a user snapshot of one.
func (m *Manager) restoredProcs(src source) bool {
	rec := src.rec
	if rec.SnapshotID != "" {
		return !src.noProcs
	}
	if rec.ForkOf == "" {
		return false
	}
	parent, err := m.get(rec.ForkOf)
	return err != nil || parent.hasProcs()
}
