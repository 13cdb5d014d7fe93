package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/codeinterp"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// codeTarget decodes the body into req (when not nil), checks it, and loads the target sandbox
// and its host's client; it answers the error itself and reports whether the handler may go on.
func (s *Server) codeTarget(w http.ResponseWriter, r *http.Request, req any, check func() error) (store.Sandbox, *agentclient.Client, bool) {
	var err error
	if req != nil {
		err = decodeJSON(w, r, req, true) // an empty body is {} (a run then lacks its code)
	}
	if err == nil && check != nil {
		err = check()
	}
	return s.targetOK(w, r, err)
}

// runCode is POST /v1/sandboxes/{id}/code: NDJSON events with Accept: application/x-ndjson, the
// buffered execution otherwise.
func (s *Server) runCode(w http.ResponseWriter, r *http.Request) {
	var req v1.CodeRequest
	sb, c, ok := s.codeTarget(w, r, &req, func() error { return codeinterp.CheckRun(&req) })
	if !ok {
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		x, err := codeinterp.Collect(r.Context(), c, sb.ID, req)
		s.svc.Touched(r.Context(), sb, c, err)
		s.reply(w, r, http.StatusOK, x, err)
		return
	}
	// Headers go out with the first event, so a sandbox without a code interpreter (or a context
	// that does not exist) still gets its error status.
	started := false
	rc := http.NewResponseController(w)
	err := codeinterp.Run(r.Context(), c, sb.ID, req, func(ev v1.CodeEvent) error {
		if !started {
			started = true
			s.svc.Touched(r.Context(), sb, c, nil)
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		line, _ := json.Marshal(ev)
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err // the client left
		}
		return rc.Flush()
	})
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started:
		s.svc.Touched(r.Context(), sb, c, err)
		s.writeError(w, r, err)
	default:
		e, ok := errdefs.As(err)
		msg := "the execution's stream broke (request id " + w.Header().Get("X-Request-Id") + ")"
		if ok && e.Kind != errdefs.Internal {
			msg = e.Message
		}
		line, _ := json.Marshal(v1.CodeEvent{StreamError: &v1.ErrorDetail{Code: errdefs.KindOf(err).Code(), Message: msg}})
		w.Write(append(line, '\n'))
		s.log.Warn("code stream broke", "sandbox", sb.ID, "err", err)
	}
}

func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request) {
	var req v1.CreateCodeContextRequest
	sb, c, ok := s.codeTarget(w, r, &req, func() error { return codeinterp.CheckContext(&req) })
	if !ok {
		return
	}
	cc, err := codeinterp.CreateContext(r.Context(), c, sb.ID, req)
	s.svc.Touched(r.Context(), sb, c, err)
	s.reply(w, r, http.StatusCreated, cc, err)
}

func (s *Server) listCodeContexts(w http.ResponseWriter, r *http.Request) {
	sb, c, ok := s.codeTarget(w, r, nil, nil)
	if !ok {
		return
	}
	list, err := codeinterp.ListContexts(r.Context(), c, sb.ID)
	s.svc.Touched(r.Context(), sb, c, err)
	s.reply(w, r, http.StatusOK, v1.CodeContextList{Contexts: list}, err)
}

func (s *Server) deleteCodeContext(w http.ResponseWriter, r *http.Request) {
	cid := r.PathValue("context")
	sb, c, ok := s.codeTarget(w, r, nil, func() error { return codeinterp.CheckContextID(cid) })
	if !ok {
		return
	}
	err := codeinterp.DeleteContext(r.Context(), c, sb.ID, cid)
	s.svc.Touched(r.Context(), sb, c, err)
	s.reply(w, r, http.StatusNoContent, nil, err)
}

func (s *Server) interruptCode(w http.ResponseWriter, r *http.Request) {
	var req v1.CodeInterruptRequest
	sb, c, ok := s.codeTarget(w, r, &req, func() error { return codeinterp.CheckContextID(req.ContextID) })
	if !ok {
		return
	}
	err := codeinterp.Interrupt(r.Context(), c, sb.ID, req.ContextID)
	s.svc.Touched(r.Context(), sb, c, err)
	s.reply(w, r, http.StatusNoContent, nil, err)
}
