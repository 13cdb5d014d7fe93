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
// killed through the sandbox's host agent; the guest agent owns them. The host's answers are
// the public ones (hostapi's process types are v1's).

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

// stream is an answer written by the handler itself (an NDJSON stream).
type stream func()

// processCall answers a process route: bad input (err) first, then the caller's sandbox (and,
// with pid, the route's {pid}: a positive number), then what call answers: out as JSON with its
// status, 204 for none, or a stream, written once the host has answered.
func (s *Server) processCall(w http.ResponseWriter, r *http.Request, err error, pid bool, call func(sb sandboxRef, pid int) (int, any, error)) {
	n := 0
	if err == nil && pid {
		if n, err = strconv.Atoi(r.PathValue("pid")); err != nil || n <= 0 {
			err = invalid("pid %q is not a process id (a positive number)", truncate(r.PathValue("pid")))
		}
	}
	var sb sandboxRef
	if err == nil {
		sb.rec, sb.c, err = s.target(r)
	}
	var status int
	var out any
	if err == nil {
		status, out, err = call(sb, n)
		s.svc.Touched(r.Context(), sb.rec, sb.c, err)
	}
	switch o := out.(type) {
	case nil:
		if err != nil {
			s.writeError(w, r, err)
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
	case stream:
		o()
	default:
		writeJSON(w, status, out)
	}
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req v1.StartProcessRequest
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = validateCommand(req.Cmd, req.Argv, req.Env)
	}
	if err == nil {
		if terr := guest.CheckTag(req.Tag); terr != nil {
			err = invalid("%v", terr)
		}
	}
	if err == nil && req.PTY != nil {
		err = checkTermSize(*req.PTY)
	}
	s.processCall(w, r, err, false, func(sb sandboxRef, _ int) (int, any, error) {
		pid, err := sb.c.StartProcess(r.Context(), sb.rec.ID, req)
		return http.StatusCreated, ifOK(v1.ProcessStarted{Pid: pid}, err), err
	})
}

// ifOK is out, or nil when err says there is no answer.
func ifOK(out any, err error) any {
	if err != nil {
		return nil
	}
	return out
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	s.processCall(w, r, nil, false, func(sb sandboxRef, _ int) (int, any, error) {
		ps, err := sb.c.ListProcesses(r.Context(), sb.rec.ID)
		return http.StatusOK, ifOK(v1.Processes{Processes: ps}, err), err
	})
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
	if err == nil {
		follow, err = boolQuery(q, "follow")
	}
	s.processCall(w, r, err, true, func(sb sandboxRef, pid int) (int, any, error) {
		body, err := sb.c.ProcessOutput(r.Context(), sb.rec.ID, pid, offset, follow)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, stream(func() { s.relayNDJSON(w, r, sb.rec.ID, "process output", body) }), nil
	})
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) {
	var req v1.StdinRequest
	err := decodeJSON(w, r, &req, false)
	if err == nil && len(req.Data) > guest.MaxStdinWrite {
		err = errdefs.New(errdefs.TooLarge, "data is %d bytes; one call writes at most %d", len(req.Data), guest.MaxStdinWrite)
	}
	s.processCall(w, r, err, true, func(sb sandboxRef, pid int) (int, any, error) {
		return 0, nil, sb.c.WriteStdin(r.Context(), sb.rec.ID, pid, req)
	})
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req v1.SignalRequest
	err := decodeJSON(w, r, &req, false)
	if _, ok := guest.ParseSignal(req.Signal); err == nil && !ok {
		err = invalid("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", truncate(req.Signal))
	}
	s.processCall(w, r, err, true, func(sb sandboxRef, pid int) (int, any, error) {
		return 0, nil, sb.c.SignalProcess(r.Context(), sb.rec.ID, pid, req.Signal)
	})
}

func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request) {
	var req v1.TermSize
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = checkTermSize(req)
	}
	s.processCall(w, r, err, true, func(sb sandboxRef, pid int) (int, any, error) {
		return 0, nil, sb.c.ResizeProcess(r.Context(), sb.rec.ID, pid, req.Cols, req.Rows)
	})
}

func (s *Server) killProcess(w http.ResponseWriter, r *http.Request) {
	s.processCall(w, r, nil, true, func(sb sandboxRef, pid int) (int, any, error) {
		p, err := sb.c.KillProcess(r.Context(), sb.rec.ID, pid)
		return http.StatusOK, ifOK(p, err), err
	})
}

// checkTermSize refuses a terminal size outside 1 to guest.MaxTermSize (0 is the default, 80×24).
func checkTermSize(t v1.TermSize) error {
	if err := guest.CheckTermSize(t.Cols, t.Rows); err != nil {
		return invalid("%v", err)
	}
	return nil
}
