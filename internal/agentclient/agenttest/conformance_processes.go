package agenttest

import (
	"context"
	"encoding/json"
	"io"
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
