package hostagent

import (
	"context"
	"net/http"
	"strconv"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Background processes (docs/processes.md): thin handlers over the guest agent's proc_* ops.

func (a *Agent) processRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes", a.busy(a.handleStartProcess))
	mux.HandleFunc("GET /v1/sandboxes/{id}/processes", a.busy(a.handleListProcesses))
	mux.HandleFunc("GET /v1/sandboxes/{id}/processes/{pid}/output", a.busy(a.handleProcessOutput))
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/stdin", a.busy(a.handleProcessStdin))
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/signal", a.busy(a.handleProcessSignal))
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/resize", a.busy(a.handleProcessResize))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/processes/{pid}", a.busy(a.handleKillProcess))
	mux.HandleFunc("GET /v1/sandboxes/{id}/pty", a.busy(a.handlePTY)) // pty.go
	// The exits the agent saw (internal/host/sandbox/exits.go), for the control plane.
	mux.HandleFunc("GET /v1/process-exits", a.handleProcessExits)
}

// handleProcessExits is GET /v1/process-exits?after=N.
func (a *Agent) handleProcessExits(w http.ResponseWriter, r *http.Request) {
	after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if err != nil || after < 0 {
		writeError(w, errdefs.Invalidf("after %q is not a cursor (a number >= 0 from the last answer's next, or 0)", r.URL.Query().Get("after")))
		return
	}
	writeJSON(w, http.StatusOK, a.sandboxes.ProcessExits(after))
}

// ProcessView is the wire form of a guest process.
func ProcessView(p guest.ProcessInfo) hostapi.Process {
	out := hostapi.Process{Pid: p.Pid, Tag: p.Tag, Cmd: p.Cmd, Argv: p.Argv, Cwd: p.Cwd, User: p.User, State: "running",
		ExitCode: p.ExitCode, Signal: p.Signal, StartedAt: hostapi.Time(p.StartedAt), Stdin: p.Stdin, PTY: p.PTY,
		OutputStart: p.OutputStart, OutputEnd: p.OutputEnd}
	if !p.Running {
		out.State = "exited"
		out.ExitedAt = hostapi.Time(p.ExitedAt)
	}
	return out
}

func (a *Agent) handleStartProcess(w http.ResponseWriter, r *http.Request) {
	var req hostapi.StartProcessRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	pid, err := a.sandboxes.StartProcess(r.Context(), r.PathValue("id"), req)
	answer(w, http.StatusCreated)(hostapi.ProcessStarted{Pid: pid}, err)
}

func (a *Agent) handleListProcesses(w http.ResponseWriter, r *http.Request) {
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		ps, err := c.ListProcesses(ctx)
		out := hostapi.ProcessList{Processes: make([]hostapi.Process, len(ps))}
		for i, p := range ps {
			out.Processes[i] = ProcessView(p)
		}
		return out, err
	})
}

// pathPid is the {pid} of the route: a positive number.
func pathPid(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		return 0, errdefs.Invalidf("pid %q is not a process id (a positive number)", r.PathValue("pid"))
	}
	return pid, nil
}

// handleProcessOutput streams a process's output as NDJSON (hostapi.ProcessEvent) from ?offset=
// (default 0), until the exit with ?follow=1, else until what is kept so far was sent. An error
// before the first line is an error answer; after it, the last line.
func (a *Agent) handleProcessOutput(w http.ResponseWriter, r *http.Request) {
	pid, err := pathPid(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	var offset int64
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.ParseInt(s, 10, 64); err != nil || offset < 0 {
			writeError(w, errdefs.Invalidf("offset %q is not a byte offset (a number >= 0)", s))
			return
		}
	}
	follow, err := boolParam(q.Get("follow"))
	if err != nil {
		writeError(w, errdefs.Invalidf("follow: %v", err))
		return
	}
	nd := newNDJSON(w)
	var end guest.ProcessEnd
	err = a.sandboxes.WithGuest(r.Context(), r.PathValue("id"), func(c *guest.Client) (err error) {
		end, err = c.ProcessOutput(r.Context(), pid, offset, follow, nd.begin, func(ch guest.OutputChunk) error {
			s, off, next := string(ch.Data), ch.Offset, ch.Offset+int64(len(ch.Data))
			ev := hostapi.ProcessEvent{Offset: &off, Next: &next}
			if ch.Stderr {
				ev.Stderr = &s
			} else {
				ev.Stdout = &s
			}
			nd.send(ev)
			return nil
		})
		return err
	})
	if err != nil {
		if !nd.started {
			writeError(w, err)
		} else if r.Context().Err() == nil {
			nd.send(errorBody(err))
		}
		return
	}
	ev := hostapi.ProcessEvent{Next: &end.Next, Running: end.Running}
	if !end.Running {
		ev.ExitCode, ev.Signal = &end.ExitCode, end.Signal
	}
	nd.send(ev)
}

// boolParam reads a query flag: "" is false; 1/0, true/false.
func boolParam(s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	return strconv.ParseBool(s)
}

func (a *Agent) handleProcessStdin(w http.ResponseWriter, r *http.Request) {
	var req hostapi.StdinRequest
	pid, err := pathPid(r)
	if err == nil {
		err = decodeJSON(w, r, &req)
	}
	if err == nil && len(req.Data) > guest.MaxStdinWrite {
		err = errdefs.New(errdefs.TooLarge, "stdin data is larger than the %d-byte limit of one call", guest.MaxStdinWrite)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		return nil, c.WriteStdin(ctx, pid, []byte(req.Data), req.EOF)
	})
}

func (a *Agent) handleProcessSignal(w http.ResponseWriter, r *http.Request) {
	var req hostapi.SignalRequest
	pid, err := pathPid(r)
	if err == nil {
		err = decodeJSON(w, r, &req)
	}
	if _, ok := guest.ParseSignal(req.Signal); err == nil && !ok {
		err = errdefs.Invalidf("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", req.Signal)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		return nil, c.SignalProcess(ctx, pid, req.Signal)
	})
}

func (a *Agent) handleProcessResize(w http.ResponseWriter, r *http.Request) {
	var req hostapi.TermSize
	pid, err := pathPid(r)
	if err == nil {
		err = decodeJSON(w, r, &req)
	}
	if err == nil {
		if serr := guest.CheckTermSize(req.Cols, req.Rows); serr != nil {
			err = errdefs.Invalidf("%v", serr)
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		return nil, c.ResizeProcess(ctx, pid, req.Cols, req.Rows)
	})
}

func (a *Agent) handleKillProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := pathPid(r)
	if err != nil {
		writeError(w, err)
		return
	}
	a.guestCall(w, r, func(ctx context.Context, c *guest.Client) (any, error) {
		p, err := c.KillProcess(ctx, pid)
		return ProcessView(p), err
	})
}
