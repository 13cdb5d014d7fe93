package agenttest

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	guestproto "github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// The fake's background processes run the toy commands of exec.go at once: their output is
// there when they start and they exit right away, except `sleep` (runs until signalled or
// killed) and `cat` with stdin (echoes what stdin calls send, exits at eof). Forks, snapshots
// and hibernation carry them with the guest, as the real guest's memory does.

// proc is one fake background process.
type proc struct {
	info   agentclient.Process
	out    []hostapi.ProcessEvent // output chunks, with offsets
	echo   bool                   // `cat` with stdin: stdin comes back as stdout
	ended  chan struct{}          // closed at the exit (followers wait on it)
	logged bool                   // the exit is in the agent's exit log (exits.go)
}

func (p *proc) clone() *proc {
	c := *p
	c.out = slices.Clone(p.out)
	c.ended = make(chan struct{})
	if p.info.State == "exited" {
		close(c.ended)
		c.logged = true // the copy of an exit is the original's (a fork's parent's, a snapshot's source's)
	}
	return &c
}

func (p *proc) write(stream, data string) {
	off := p.info.OutputEnd
	next := off + int64(len(data))
	ev := hostapi.ProcessEvent{Offset: &off, Next: &next}
	if stream == "stderr" {
		ev.Stderr = &data
	} else {
		ev.Stdout = &data
	}
	p.out = append(p.out, ev)
	p.info.OutputEnd = next
}

func (p *proc) exit(code int, signal string) {
	p.info.State, p.info.ExitCode, p.info.Signal = "exited", &code, signal
	p.info.ExitedAt = hostapi.Time(time.Now().UTC())
	p.info.Stdin = false
	close(p.ended)
}

func (a *Agent) startProcess(r *http.Request) (any, *agentclient.Error) {
	var req agentclient.StartProcessRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := validateExec(&agentclient.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: req.Env}); err != nil {
		return nil, err
	}
	if err := guestproto.CheckTag(req.Tag); err != nil {
		return nil, invalid("%v", err)
	}
	if req.PTY != nil {
		if err := guestproto.CheckTermSize(req.PTY.Cols, req.PTY.Rows); err != nil {
			return nil, invalid("%v", err)
		}
	}
	sb, err := a.live(r)
	if err != nil {
		return nil, err
	}
	x, err := sb.interpret(agentclient.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd})
	if err != nil {
		return nil, err
	}
	a.seq++
	user := req.User
	if user == "" {
		user = "user"
	}
	p := &proc{ended: make(chan struct{}), info: agentclient.Process{Pid: 1000 + a.seq, Tag: req.Tag, Cmd: req.Cmd, Argv: req.Argv,
		Cwd: "/home/user", User: user, State: "running", StartedAt: hostapi.Time(time.Now().UTC()), Stdin: req.Stdin || req.PTY != nil,
		PTY: req.PTY != nil}}
	if req.Cwd != "" {
		p.info.Cwd = req.Cwd
	}
	for _, c := range x.out {
		p.write(c.stream, c.data)
	}
	verb, _, _ := strings.Cut(strings.TrimSpace(req.Cmd+strings.Join(req.Argv, " ")), " ")
	switch {
	case verb == "cat" && p.info.Stdin:
		p.echo = true
	case verb == "sleep":
	default:
		p.exit(x.exit, "")
	}
	if sb.procs == nil {
		sb.procs = map[int]*proc{}
	}
	sb.procs[p.info.Pid] = p
	return created{hostapi.ProcessStarted{Pid: p.info.Pid}}, nil
}

// theProcess is the {pid} of a live sandbox.
func (a *Agent) theProcess(r *http.Request) (*proc, *agentclient.Error) {
	pid, perr := strconv.Atoi(r.PathValue("pid"))
	if perr != nil || pid <= 0 {
		return nil, invalid("pid %q is not a process id (a positive number)", r.PathValue("pid"))
	}
	sb, err := a.live(r)
	if err != nil {
		return nil, err
	}
	p, ok := sb.procs[pid]
	if !ok {
		return nil, notFound("no process %d started through the API (see the process list)", pid)
	}
	return p, nil
}

func (a *Agent) listProcesses(r *http.Request) (any, *agentclient.Error) {
	sb, err := a.live(r)
	if err != nil {
		return nil, err
	}
	out := hostapi.ProcessList{Processes: []agentclient.Process{}}
	for _, p := range sb.procs {
		out.Processes = append(out.Processes, p.info)
	}
	slices.SortFunc(out.Processes, func(x, y agentclient.Process) int { return x.Pid - y.Pid })
	return out, nil
}

func (a *Agent) processStdin(r *http.Request) (any, *agentclient.Error) {
	var req agentclient.StdinRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	p, err := a.theProcess(r)
	if err != nil {
		return nil, err
	}
	if !p.info.Stdin {
		return nil, conflict("process %d has no stdin to write to", p.info.Pid)
	}
	if p.echo && req.Data != "" {
		p.write("stdout", req.Data)
	}
	if req.EOF {
		p.info.Stdin = false
		if p.echo {
			p.exit(0, "")
		}
	}
	return nil, nil
}

func (a *Agent) signalProcess(r *http.Request) (any, *agentclient.Error) {
	var req hostapi.SignalRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	sig, ok := guestproto.ParseSignal(req.Signal)
	if !ok {
		return nil, invalid("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", req.Signal)
	}
	p, err := a.theProcess(r)
	if err != nil {
		return nil, err
	}
	if p.info.State == "exited" {
		return nil, conflict("process %d has exited", p.info.Pid)
	}
	if sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		p.exit(128+int(sig), "SIG"+strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG"))
	}
	return nil, nil
}

// resizeProcess is a PTY process's terminal size (the fake keeps none).
func (a *Agent) resizeProcess(r *http.Request) (any, *agentclient.Error) {
	var req hostapi.TermSize
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := guestproto.CheckTermSize(req.Cols, req.Rows); err != nil {
		return nil, invalid("%v", err)
	}
	p, err := a.theProcess(r)
	switch {
	case err != nil:
		return nil, err
	case !p.info.PTY:
		return nil, conflict("process %d has no terminal (start it with a pty)", p.info.Pid)
	case p.info.State == "exited":
		return nil, conflict("process %d has exited", p.info.Pid)
	}
	return nil, nil
}

func (a *Agent) killProcess(r *http.Request) (any, *agentclient.Error) {
	p, err := a.theProcess(r)
	if err != nil {
		return nil, err
	}
	if p.info.State != "exited" {
		p.exit(128+int(syscall.SIGKILL), "SIGKILL")
	}
	p.info.Stdin = false
	return p.info, nil
}

// processOutput streams the chunks from ?offset=, then the end line; a follower of a running
// process waits for its exit (no new output comes but through stdin calls made before).
func (a *Agent) processOutput(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	off, perr := strconv.ParseInt(q.Get("offset"), 10, 64)
	if q.Get("offset") == "" {
		off, perr = 0, nil
	}
	follow, _ := strconv.ParseBool(q.Get("follow"))
	a.mu.Lock()
	p, err := a.theProcess(r)
	if err == nil && (perr != nil || off < 0 || off > p.info.OutputEnd) {
		err = invalid("offset %q is outside the output (0 to %d)", q.Get("offset"), p.info.OutputEnd)
	}
	var ended chan struct{}
	if err == nil {
		ended = p.ended
	}
	a.mu.Unlock()
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200) // at once, as the real agent does once the guest took the request
	http.NewResponseController(w).Flush()
	if follow {
		select {
		case <-ended:
		case <-r.Context().Done():
			return
		}
	}
	a.mu.Lock()
	info, out := p.info, slices.Clone(p.out)
	a.mu.Unlock()
	enc := json.NewEncoder(w)
	for _, ev := range out {
		if *ev.Next <= off {
			continue
		}
		if *ev.Offset < off { // a read from inside a chunk starts there
			o, s := off, ""
			if ev.Stdout != nil {
				s = (*ev.Stdout)[off-*ev.Offset:]
				ev.Stdout = &s
			} else {
				s = (*ev.Stderr)[off-*ev.Offset:]
				ev.Stderr = &s
			}
			ev.Offset = &o
		}
		enc.Encode(ev)
	}
	end := hostapi.ProcessEvent{Next: &info.OutputEnd}
	if info.State == "exited" {
		end.ExitCode, end.Signal = info.ExitCode, info.Signal
	} else {
		end.Running = true
	}
	enc.Encode(end)
}

// processExits is GET /v1/process-exits. Like the real agent, the fake looks at its sandboxes'
// process tables for exits it has not logged yet, logs them, and answers those after the cursor.
func (a *Agent) processExits(r *http.Request) (any, *agentclient.Error) {
	after, perr := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if perr != nil {
		return nil, invalid("after %q is not a cursor (a number)", r.URL.Query().Get("after"))
	}
	sbs := slices.SortedFunc(maps.Values(a.sandboxes), func(x, y *sandbox) int { return x.order - y.order })
	for _, sb := range sbs {
		pids := slices.Sorted(maps.Keys(sb.procs))
		for _, pid := range pids {
			p := sb.procs[pid]
			if p.logged || p.info.State != "exited" {
				continue
			}
			p.logged = true
			a.exitSeq++
			a.exitLog = append(a.exitLog, loggedExit{a.exitSeq, hostapi.ProcessExit{SandboxID: sb.ID, Pid: pid, Tag: p.info.Tag,
				ExitCode: *p.info.ExitCode, Signal: p.info.Signal, StartedAt: p.info.StartedAt, ExitedAt: p.info.ExitedAt}})
		}
	}
	out := hostapi.ProcessExits{Exits: []hostapi.ProcessExit{}, Next: after}
	for _, e := range a.exitLog {
		if e.seq > after {
			out.Exits, out.Next = append(out.Exits, e.ProcessExit), e.seq
		}
	}
	return out, nil
}

type loggedExit struct {
	seq int64
	hostapi.ProcessExit
}
