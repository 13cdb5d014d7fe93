package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Background processes (docs/processes.md): started, listed, read, written, signalled and
// killed through the sandbox's host agent; the guest agent owns them.

// sandboxRef is a sandbox a call may reach and a client of its host.
type sandboxRef struct {
	rec store.Sandbox
	c   *agentclient.Client
}

// onlyParams refuses query parameters other than the allowed ones.
func onlyParams(q url.Values, allowed ...string) error {
	for k := range q {
		if !slices.Contains(allowed, k) {
			return invalid("unknown query parameter %q (allowed: %s)", truncate(k), strings.Join(allowed, ", "))
		}
	}
	return nil
}

// processTarget is target plus the route's {pid}: a positive number.
func (s *Server) processTarget(r *http.Request) (pid int, sb sandboxRef, err error) {
	pid, err = strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid <= 0 {
		return 0, sb, invalid("pid %q is not a process id (a positive number)", truncate(r.PathValue("pid")))
	}
	sb.rec, sb.c, err = s.target(r)
	return pid, sb, err
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req v1.StartProcessRequest
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = validateCommand(req.Cmd, req.Argv, req.Env)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pid, err := c.StartProcess(r.Context(), sb.ID, agentclient.StartProcessRequest(req))
	s.svc.Touched(r.Context(), sb, c, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, v1.ProcessStarted{Pid: pid})
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ps, err := c.ListProcesses(r.Context(), sb.ID)
	s.svc.Touched(r.Context(), sb, c, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := v1.Processes{Processes: make([]v1.Process, len(ps))}
	for i, p := range ps {
		out.Processes[i] = v1.Process(p)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) processOutput(w http.ResponseWriter, r *http.Request) {
	var offset int64
	var follow bool
	q := r.URL.Query()
	err := onlyParams(q, "offset", "follow")
	if v := q.Get("offset"); err == nil && v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			err = invalid("offset %q is not a byte offset (a number >= 0)", truncate(v))
		}
	}
	if v := q.Get("follow"); err == nil && v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			err = invalid("follow must be 1, 0, true or false")
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pid, sb, err := s.processTarget(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := sb.c.ProcessOutput(r.Context(), sb.rec.ID, pid, offset, follow)
	s.svc.Touched(r.Context(), sb.rec, sb.c, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.relayNDJSON(w, r, sb.rec.ID, "process output", body)
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) {
	var req v1.StdinRequest
	err := decodeJSON(w, r, &req, false)
	if err == nil && len(req.Data) > guest.MaxStdinWrite {
		err = errdefs.New(errdefs.TooLarge, "data is %d bytes; one call writes at most %d", len(req.Data), guest.MaxStdinWrite)
	}
	s.processCall(w, r, err, func(sb sandboxRef, pid int) (any, error) {
		return nil, sb.c.WriteStdin(r.Context(), sb.rec.ID, pid, agentclient.StdinRequest(req))
	})
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req v1.SignalRequest
	err := decodeJSON(w, r, &req, false)
	if _, ok := guest.ParseSignal(req.Signal); err == nil && !ok {
		err = invalid("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", truncate(req.Signal))
	}
	s.processCall(w, r, err, func(sb sandboxRef, pid int) (any, error) {
		return nil, sb.c.SignalProcess(r.Context(), sb.rec.ID, pid, req.Signal)
	})
}

func (s *Server) killProcess(w http.ResponseWriter, r *http.Request) {
	s.processCall(w, r, nil, func(sb sandboxRef, pid int) (any, error) {
		p, err := sb.c.KillProcess(r.Context(), sb.rec.ID, pid)
		return v1.Process(p), err
	})
}

// processCall answers a call on one process: bad input (err) first, then call's answer (JSON,
// or 204 when it has none).
func (s *Server) processCall(w http.ResponseWriter, r *http.Request, err error, call func(sandboxRef, int) (any, error)) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pid, sb, err := s.processTarget(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out, err := call(sb, pid)
	s.svc.Touched(r.Context(), sb.rec, sb.c, err)
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case out == nil:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusOK, out)
	}
}
