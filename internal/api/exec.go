package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// MaxExecTimeoutSeconds bounds timeout_seconds of one exec (the host agent's own limit).
const MaxExecTimeoutSeconds = 86400

// target loads the caller's sandbox, if calls can reach it (running, or hibernated: its host wakes
// it), and a client for its host.
func (s *Server) target(r *http.Request) (store.Sandbox, *agentclient.Client, error) {
	sb, err := s.sandbox(r)
	if err != nil {
		return sb, nil, err
	}
	c, err := s.svc.Target(r.Context(), sb)
	return sb, c, err
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	req, ok := decoded[v1.ExecRequest](s, w, r, false)
	if !ok {
		return
	}
	err := validateCommand(req.Cmd, req.Argv, req.Env)
	if err == nil && req.TimeoutSeconds != nil && (*req.TimeoutSeconds <= 0 || *req.TimeoutSeconds > MaxExecTimeoutSeconds) {
		err = invalid("timeout_seconds must be greater than 0 and at most %d", MaxExecTimeoutSeconds)
	}
	sb, c, ok := s.targetOK(w, r, err)
	if !ok {
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		res, err := c.Exec(r.Context(), sb.ID, req) // the host takes the same request
		s.svc.Touched(r.Context(), sb, c, err)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		// The host's answer also names a killing signal; the public one does not.
		writeJSON(w, http.StatusOK, v1.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode, TimedOut: res.TimedOut,
			DurationMS: res.DurationMS, StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated})
		return
	}
	body, err := c.ExecStream(r.Context(), sb.ID, req)
	s.svc.Touched(r.Context(), sb, c, err) // the host answers the stream's headers once it is awake
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.relayNDJSON(w, r, sb.ID, "exec", body)
}

// validateCommand checks what exec and a process start take: cmd or argv, and env.
func validateCommand(cmd string, argv []string, env map[string]string) error {
	switch {
	case cmd == "" && len(argv) == 0:
		return invalid("give cmd (a shell command line) or argv (a program and its arguments)")
	case cmd != "" && len(argv) > 0:
		return invalid("give cmd or argv, not both")
	case len(argv) > 0 && argv[0] == "":
		return invalid("argv[0] must name a program")
	}
	return validateEnv("env", env)
}

// relayNDJSON passes an NDJSON stream from the sandbox's host through to the client as it comes
// (body is closed). An error after the headers went out becomes the stream's last line.
func (s *Server) relayNDJSON(w http.ResponseWriter, r *http.Request, sandboxID, what string, body io.ReadCloser) {
	defer body.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // tell fronting proxies not to buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := copyFlushing(w, body); err != nil && r.Context().Err() == nil {
		// Headers are gone; the stream's last line is the only place left for an error.
		line, _ := json.Marshal(errorBody(errdefs.Internal.Code(),
			"the stream from the sandbox's host broke (request id "+w.Header().Get("X-Request-Id")+")"))
		w.Write(append(line, '\n'))
		s.log.Warn(what+" stream broke", "sandbox", sandboxID, "err", err)
	}
}

// copyFlushing copies src to w, flushing after every read so each NDJSON line reaches the client
// as soon as the host sends it.
func copyFlushing(w http.ResponseWriter, src io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client left; nothing more to do
			}
			rc.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
