package agenttest

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// readOutput reads a process's output from off: its text (both streams, in order), checking that
// the offsets run on without a gap, and the end line.
func (k *contract) readOutput(t *testing.T, pid int, off int64, follow bool) (string, hostapi.ProcessEvent) {
	t.Helper()
	body := must[io.ReadCloser](t, "process output")(k.c.ProcessOutput(ctx(), k.main.ID, pid, off, follow))
	defer body.Close()
	dec := json.NewDecoder(body)
	text := ""
	for {
		var ev hostapi.ProcessEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("process %d output: no end line (%v)", pid, err)
		}
		switch {
		case ev.Error != nil:
			t.Fatalf("process %d output: %+v", pid, ev.Error)
		case ev.Stdout != nil || ev.Stderr != nil:
			if ev.Offset == nil || *ev.Offset != off || ev.Next == nil {
				t.Fatalf("process %d: chunk %+v, want one at offset %d", pid, ev, off)
			}
			if ev.Stdout != nil {
				text += *ev.Stdout
			} else {
				text += *ev.Stderr
			}
			off = *ev.Next
		default:
			if ev.Next == nil || *ev.Next != off {
				t.Fatalf("process %d: end line %+v, chunks ended at %d", pid, ev, off)
			}
			return text, ev
		}
	}
}

func (k *contract) findProcess(t *testing.T, pid int) agentclient.Process {
	t.Helper()
	for _, p := range must[[]agentclient.Process](t, "list processes")(k.c.ListProcesses(ctx(), k.main.ID)) {
		if p.Pid == pid {
			return p
		}
	}
	t.Fatalf("process %d not listed", pid)
	return agentclient.Process{}
}

// processes: start answers a pid at once; the output reads from an offset and ends with the
// exit; exits are listed; signals reach the process, stdin round-trips, DELETE kills; unknown
// pids and signals are refused.
func (k *contract) processes(t *testing.T) {
	start := func(req agentclient.StartProcessRequest) int {
		t.Helper()
		return must[int](t, "start process")(k.c.StartProcess(ctx(), k.main.ID, req))
	}
	echo := start(agentclient.StartProcessRequest{Cmd: "echo hello"})
	if text, end := k.readOutput(t, echo, 0, true); text != "hello\n" || end.ExitCode == nil || *end.ExitCode != 0 || end.Running {
		t.Errorf("echo: %q, end %+v", text, end)
	}
	if text, _ := k.readOutput(t, echo, 2, false); text != "llo\n" {
		t.Errorf("echo from offset 2: %q", text)
	}
	if p := k.findProcess(t, echo); p.State != "exited" || p.ExitCode == nil || *p.ExitCode != 0 || p.OutputEnd != 6 || p.Cmd != "echo hello" {
		t.Errorf("listed echo: %+v", p)
	}

	sleeper := start(agentclient.StartProcessRequest{Cmd: "sleep 600", Tag: "web server ✓"})
	if p := k.findProcess(t, sleeper); p.State != "running" || p.ExitCode != nil || p.Tag != "web server ✓" {
		t.Errorf("listed sleeper: %+v", p)
	}
	if _, end := k.readOutput(t, sleeper, 0, false); !end.Running {
		t.Errorf("not following a running process: end %+v", end)
	}
	wantErr(t, "unknown signal", k.c.SignalProcess(ctx(), k.main.ID, sleeper, "SEGV"), 400, "invalid_request")
	// A follower of a quiet process is answered at once (headers), before any output: the
	// signal is sent only after that answer.
	guard, cancel := context.WithTimeout(ctx(), time.Minute) // a hang guard, not a measure
	defer cancel()
	follow := must[io.ReadCloser](t, "follow a quiet process")(k.c.ProcessOutput(guard, k.main.ID, sleeper, 0, true))
	must[struct{}](t, "signal TERM")(struct{}{}, k.c.SignalProcess(ctx(), k.main.ID, sleeper, "TERM"))
	var end hostapi.ProcessEvent
	if err := json.NewDecoder(follow).Decode(&end); err != nil || end.ExitCode == nil || *end.ExitCode != 143 || end.Signal != "SIGTERM" {
		t.Errorf("follower after TERM: end %+v (%v)", end, err)
	}
	follow.Close()
	wantErr(t, "signal an exited process", k.c.SignalProcess(ctx(), k.main.ID, sleeper, "TERM"), 409, "conflict")

	cat := start(agentclient.StartProcessRequest{Argv: []string{"cat"}, Stdin: true})
	must[struct{}](t, "stdin")(struct{}{}, k.c.WriteStdin(ctx(), k.main.ID, cat, agentclient.StdinRequest{Data: "ping\n", EOF: true}))
	if text, end := k.readOutput(t, cat, 0, true); text != "ping\n" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("cat: %q, end %+v", text, end)
	}
	wantErr(t, "stdin after eof", k.c.WriteStdin(ctx(), k.main.ID, cat, agentclient.StdinRequest{Data: "x"}), 409, "conflict")

	// On a terminal: listed as such, typed into (a terminal echoes what is typed, then cat
	// prints it), resized; a process without a terminal cannot be resized.
	term := start(agentclient.StartProcessRequest{Argv: []string{"cat"}, PTY: &hostapi.TermSize{Cols: 100, Rows: 30}})
	if p := k.findProcess(t, term); !p.PTY || !p.Stdin || p.State != "running" {
		t.Errorf("listed pty process: %+v", p)
	}
	must[struct{}](t, "type into a pty")(struct{}{}, k.c.WriteStdin(ctx(), k.main.ID, term, agentclient.StdinRequest{Data: "ping\n"}))
	must[struct{}](t, "resize")(struct{}{}, k.c.ResizeProcess(ctx(), k.main.ID, term, 120, 40))
	wantErr(t, "a terminal too large", k.c.ResizeProcess(ctx(), k.main.ID, term, 120, 100000), 400, "invalid_request")
	if p := must[agentclient.Process](t, "kill the pty process")(k.c.KillProcess(ctx(), k.main.ID, term)); p.State != "exited" {
		t.Errorf("killed pty process: %+v", p)
	}
	if text, _ := k.readOutput(t, term, 0, false); !strings.Contains(text, "ping") {
		t.Errorf("pty output %q lacks what was typed", text)
	}

	victim := start(agentclient.StartProcessRequest{Cmd: "sleep 600"})
	wantErr(t, "resize a process without a terminal", k.c.ResizeProcess(ctx(), k.main.ID, victim, 80, 24), 409, "conflict")
	if p := must[agentclient.Process](t, "kill process")(k.c.KillProcess(ctx(), k.main.ID, victim)); p.State != "exited" || p.Signal != "SIGKILL" {
		t.Errorf("killed: %+v", p)
	}

	const nobody = 999999
	wantErr(t, "signal an unknown pid", k.c.SignalProcess(ctx(), k.main.ID, nobody, "TERM"), 404, "not_found")
	wantErr(t, "kill an unknown pid", second(k.c.KillProcess(ctx(), k.main.ID, nobody)), 404, "not_found")
	wantErr(t, "offset past the end", second(k.c.ProcessOutput(ctx(), k.main.ID, echo, 1<<40, false)), 400, "invalid_request")
	wantErr(t, "a tag with a control character", second(k.c.StartProcess(ctx(), k.main.ID, agentclient.StartProcessRequest{Cmd: "true", Tag: "a\nb"})), 400, "invalid_request")
	wantErr(t, "no command", second(k.c.StartProcess(ctx(), k.main.ID, agentclient.StartProcessRequest{})), 400, "invalid_request")
	wantErr(t, "processes of a missing sandbox", second(k.c.ListProcesses(ctx(), missingSandbox)), 404, "not_found")
}

// exitKey names one exit: a process ends once.
type exitKey struct {
	sandbox, started string
	pid              int
}

// exitLog follows GET /v1/process-exits from where it was, as the control plane does.
type exitLog struct {
	c      *agentclient.Client
	cursor int64
	seen   map[exitKey]int // how often each exit was reported
	got    []hostapi.ProcessExit
}

// await reads the exits until one of sandbox's pid is among them (the agent looks at the guests
// on its own time: the loop is a hang guard, not a measure) and returns it.
func (l *exitLog) await(t *testing.T, sandbox string, pid int) hostapi.ProcessExit {
	t.Helper()
	for range 600 {
		page := must[hostapi.ProcessExits](t, "process exits")(l.c.ProcessExits(ctx(), l.cursor))
		if page.Next < l.cursor {
			t.Fatalf("cursor went back: %d after %d", page.Next, l.cursor)
		}
		l.cursor = page.Next
		for _, e := range page.Exits {
			l.seen[exitKey{e.SandboxID, e.StartedAt, e.Pid}]++
			l.got = append(l.got, e)
		}
		for _, e := range l.got {
			if e.SandboxID == sandbox && e.Pid == pid {
				return e
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no exit of process %d of %s reported", pid, sandbox)
	return hostapi.ProcessExit{}
}

// processExits: the agent reports each background process's exit once, with its tag and how it
// ended — across a hibernation (an exit before it is not reported again after the wake, a process
// that ran through it is reported when it ends) and a fork (a child reports the exits in its own
// life, not the ones it inherited; a process running at the fork ends once in each).
func (k *contract) processExits(t *testing.T) {
	id := k.main.ID
	l := &exitLog{c: k.c, seen: map[exitKey]int{}}
	start := func(sb, tag string) int {
		return must[int](t, "start process")(k.c.StartProcess(ctx(), sb, agentclient.StartProcessRequest{Cmd: "sleep 600", Tag: tag}))
	}
	term := func(sb string, pid int) {
		must[struct{}](t, "signal TERM")(struct{}{}, k.c.SignalProcess(ctx(), sb, pid, "TERM"))
	}
	before := start(id, "before")
	through := start(id, "through")
	term(id, before)
	if e := l.await(t, id, before); e.Tag != "before" || e.ExitCode != 143 || e.Signal != "SIGTERM" || !isTime(e.StartedAt) || !isTime(e.ExitedAt) {
		t.Errorf("exit of a TERMed process: %+v", e)
	}
	must[agentclient.Sandbox](t, "hibernate")(k.c.Hibernate(ctx(), id))
	must[agentclient.Sandbox](t, "wake")(k.c.Wake(ctx(), id))
	term(id, through)
	if e := l.await(t, id, through); e.Tag != "through" || e.ExitCode != 143 {
		t.Errorf("exit of a process that ran through a hibernation: %+v", e)
	}

	shared := start(id, "shared")
	pre := start(id, "pre") // ends just before the fork: the parent's exit, whether or not looked at yet
	term(id, pre)
	// The signal is sent, not yet taken: until the guest has the exit in its table, the process
	// still runs and would run on (and end) in the child too, which is then the child's exit.
	for i := 0; ; i++ {
		ps := must[[]agentclient.Process](t, "list processes")(k.c.ListProcesses(ctx(), id))
		if j := slices.IndexFunc(ps, func(p agentclient.Process) bool { return p.Pid == pre }); j >= 0 && ps[j].State == "exited" {
			break
		}
		if i == 600 {
			t.Fatalf("process %d did not exit after TERM: %+v", pre, ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
	child := must[[]agentclient.Sandbox](t, "fork")(k.c.Fork(ctx(), id, 1))[0]
	defer k.c.KillSandbox(ctx(), child.ID)
	if p := must[agentclient.Process](t, "kill in the child")(k.c.KillProcess(ctx(), child.ID, shared)); p.State != "exited" {
		t.Errorf("killed in the child: %+v", p)
	}
	if e := l.await(t, child.ID, shared); e.Tag != "shared" || e.ExitCode != 137 || e.Signal != "SIGKILL" {
		t.Errorf("the child's exit: %+v", e)
	}
	l.await(t, id, pre)
	term(id, shared)
	if e := l.await(t, id, shared); e.ExitCode != 143 {
		t.Errorf("the parent's exit of the process it shares with its child: %+v", e)
	}
	// A last look after everything ended: nothing twice, nothing inherited.
	l.await(t, id, shared)
	for key, n := range l.seen {
		if n != 1 {
			t.Errorf("exit %+v reported %d times", key, n)
		}
		if key.sandbox == child.ID && key.pid != shared {
			t.Errorf("the child reported an exit it inherited: %+v", key)
		}
	}
	if err := k.c.KillSandbox(ctx(), child.ID); err != nil {
		t.Errorf("kill %s: %v", child.ID, err)
	}
}
