package e2bcompat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process"
	"github.com/pandastack/pandastack/internal/e2bcompat/proto/process/processconnect"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// envd's process.Process over PandaStack's background processes (docs/processes.md): Start is a
// process start then its output followed; Connect follows from the output's current end.

// defaultKeepalive is how often a silent stream sends a keepalive when the client asks no
// interval (envd's default).
const defaultKeepalive = 90 * time.Second

type processService struct {
	processconnect.UnimplementedProcessHandler
	s    *Server
	ptys ptys
}

// pidOf is the pid a selector names: a pid, or a tag given at start (the newest running process
// or pty with it; tags are PandaStack's process tags).
func (p *processService) pidOf(ctx context.Context, t target, sel *process.ProcessSelector) (int, error) {
	if sel == nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is required"))
	}
	if tsel, ok := sel.Selector.(*process.ProcessSelector_Tag); ok {
		if pid := p.ptys.byTag(t.sb.ID, tsel.Tag); pid != 0 {
			return int(pid), nil
		}
		ps, err := t.c.ListProcesses(ctx, t.sb.ID)
		if err != nil {
			return 0, connectErr(err)
		}
		found := 0
		for _, pr := range ps { // oldest start first: the last match is the newest
			if pr.Tag == tsel.Tag && pr.State == "running" {
				found = pr.Pid
			}
		}
		if found == 0 {
			return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", truncate(tsel.Tag)))
		}
		return found, nil
	}
	pid := int(sel.GetPid())
	if pid <= 0 {
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("pid must be a positive number"))
	}
	return pid, nil
}

func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	t := targetOf(ctx)
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	if err := p.s.b.CheckEnv("envs", cfg.GetEnvs()); err != nil {
		return connectErr(err)
	}
	if err := guest.CheckTag(m.GetTag()); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m.Pty != nil {
		return p.startPTY(ctx, t, m, func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) })
	}
	stdin := m.Stdin == nil || m.GetStdin() // envd keeps stdin open unless told not to
	sreq := agentclient.StartProcessRequest{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(),
		User: t.user, Stdin: stdin, Tag: m.GetTag()}
	if cfg.Cwd != nil {
		sreq.Cwd = absPath(t.user, cfg.GetCwd())
	}
	pid, err := t.c.StartProcess(ctx, t.sb.ID, sreq)
	if err != nil {
		return connectErr(err)
	}
	// envd's Connect-Timeout-Ms is the process's lifetime: it is killed at the deadline, whether
	// its client still follows it or went away first (the SDK gives up at the same moment).
	var lifetime *time.Timer
	if dl, ok := ctx.Deadline(); ok {
		lifetime = time.AfterFunc(time.Until(dl), func() {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			t.c.SignalProcess(kctx, t.sb.ID, pid, "KILL") // an exited process refuses: nothing to do
		})
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	err = p.follow(ctx, t, pid, 0, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), send)
	switch {
	case err == nil && lifetime != nil:
		lifetime.Stop() // it ended
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("the command was killed at its timeout"))
	}
	return err
}

func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	t := targetOf(ctx)
	pid, err := p.pidOf(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	if s, isPTY, err := p.ptys.get(t.sb.ID, pid); isPTY {
		if err != nil {
			return err
		}
		// pty.connect: its output from now on, then its end.
		return followPTY(ctx, s, uint32(pid), s.subscribe(), func(ev *process.ProcessEvent) error {
			return stream.Send(&process.ConnectResponse{Event: ev})
		})
	}
	ps, err := t.c.ListProcesses(ctx, t.sb.ID)
	if err != nil {
		return connectErr(err)
	}
	var from int64 = -1
	for _, pr := range ps {
		if pr.Pid == pid && pr.State == "running" {
			from = pr.OutputEnd
		}
	}
	if from < 0 {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", pid))
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	return p.follow(ctx, t, pid, from, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), send)
}

// keepaliveOf reads the Keepalive-Ping-Interval header (seconds).
func keepaliveOf(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}

// follow sends the start event, then the process's output from offset as data events (with
// keepalives while it is silent), then its end.
func (p *processService) follow(ctx context.Context, t target, pid int, offset int64, keepalive time.Duration, send func(*process.ProcessEvent) error) error {
	if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: uint32(pid)}}}); err != nil {
		return err
	}
	body, err := t.c.ProcessOutput(ctx, t.sb.ID, pid, offset, true)
	if err != nil {
		return connectErr(err)
	}
	defer body.Close()
	lines := make(chan v1.ProcessEvent)
	readErr := make(chan error, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var ev v1.ProcessEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				readErr <- fmt.Errorf("the host sent a bad output line: %w", err)
				return
			}
			select {
			case lines <- ev:
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case ev, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil && ctx.Err() == nil {
					return connect.NewError(connect.CodeUnavailable, err)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return connect.NewError(connect.CodeUnavailable, errors.New("the process's output stream ended without its exit"))
			}
			if done, err := sendEvent(ev, send); done || err != nil {
				return err
			}
		}
	}
}

// sendEvent translates one output line; done when it was the end.
func sendEvent(ev v1.ProcessEvent, send func(*process.ProcessEvent) error) (done bool, err error) {
	data := func(d *process.ProcessEvent_DataEvent) error {
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}})
	}
	switch {
	case ev.Error != nil:
		return true, connectErr(errdefs.FromHTTP(0, ev.Error.Code, ev.Error.Message))
	case ev.Stdout != nil:
		return false, data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: []byte(*ev.Stdout)}})
	case ev.Stderr != nil:
		return false, data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: []byte(*ev.Stderr)}})
	case ev.ExitCode != nil || ev.Signal != "":
		end := &process.ProcessEvent_EndEvent{Exited: true}
		if ev.Signal != "" {
			end.ExitCode, end.Exited, end.Status = -1, false, "signal: "+ev.Signal
		} else {
			end.ExitCode, end.Status = int32(*ev.ExitCode), fmt.Sprintf("exit status %d", *ev.ExitCode)
		}
		return true, send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}})
	}
	return false, nil
}

func (p *processService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	t := targetOf(ctx)
	ps, err := t.c.ListProcesses(ctx, t.sb.ID)
	if err != nil {
		return nil, connectErr(err)
	}
	out := &process.ListResponse{Processes: p.ptys.list(t.sb.ID)}
	for _, pr := range ps {
		if pr.State != "running" {
			continue
		}
		cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", pr.Cmd}, Cwd: &pr.Cwd}
		if len(pr.Argv) > 0 {
			cfg.Cmd, cfg.Args = pr.Argv[0], pr.Argv[1:]
		}
		out.Processes = append(out.Processes, &process.ProcessInfo{Pid: uint32(pr.Pid), Config: cfg, Tag: optional(pr.Tag)})
	}
	return connect.NewResponse(out), nil
}

func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	t := targetOf(ctx)
	pid, err := p.pidOf(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	in := req.Msg.GetInput()
	if s, isPTY, err := p.ptys.get(t.sb.ID, pid); isPTY || err != nil {
		if err == nil {
			_, err = s.term.Write(in.GetPty())
		}
		if err != nil {
			return nil, connectErr(err)
		}
		return connect.NewResponse(&process.SendInputResponse{}), nil
	}
	data := in.GetStdin()
	for len(data) > 0 {
		n := min(len(data), guest.MaxStdinWrite)
		if err := t.c.WriteStdin(ctx, t.sb.ID, pid, agentclient.StdinRequest{Data: string(data[:n])}); err != nil {
			return nil, connectErr(err)
		}
		data = data[n:]
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	t := targetOf(ctx)
	pid, err := p.pidOf(ctx, t, req.Msg.GetProcess())
	if err == nil {
		err = connectErr(t.c.WriteStdin(ctx, t.sb.ID, pid, agentclient.StdinRequest{EOF: true}))
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	t := targetOf(ctx)
	pid, err := p.pidOf(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sig := "KILL"
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	case process.Signal_SIGNAL_SIGKILL:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"))
	}
	if s, isPTY, err := p.ptys.get(t.sb.ID, pid); isPTY {
		if err == nil {
			s.killed.Store(true)
			s.term.Close() // hangs the terminal up: its program ends
		}
		return connect.NewResponse(&process.SendSignalResponse{}), err
	}
	if sig == "KILL" {
		// The kill waits for the tree's exit, so a List right after the answer no longer
		// shows the process (a bare signal left it "running" until the guest reaped it).
		_, err = t.c.KillProcess(ctx, t.sb.ID, pid)
	} else {
		err = t.c.SignalProcess(ctx, t.sb.ID, pid, sig)
	}
	if err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// Update resizes a pty.
func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	t := targetOf(ctx)
	pid, err := p.pidOf(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	s, isPTY, err := p.ptys.get(t.sb.ID, pid)
	switch {
	case err != nil:
		return nil, err
	case !isPTY:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process %d has no pty", pid))
	case req.Msg.GetPty() == nil:
		return connect.NewResponse(&process.UpdateResponse{}), nil
	}
	size := req.Msg.GetPty().GetSize()
	if err := s.term.Resize(int(size.GetCols()), int(size.GetRows())); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}
