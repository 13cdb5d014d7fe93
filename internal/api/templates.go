package api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/templates"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	cat, own, up, err := s.tmpl.List(r.Context(), id.TeamID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]v1.Template, 0, len(cat)+len(own))
	for _, t := range cat {
		out = append(out, catalogView(t, up))
	}
	for _, t := range own {
		out = append(out, teamView(t, up))
	}
	writeJSON(w, http.StatusOK, v1.Templates{Templates: out})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	tt, ct, up, err := s.tmpl.Get(r.Context(), id.TeamID, r.PathValue("name"))
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case tt != nil:
		writeJSON(w, http.StatusOK, teamView(*tt, up))
	default:
		writeJSON(w, http.StatusOK, catalogView(*ct, up))
	}
}

// readSpec reads a template spec (YAML or JSON, size-limited) from the body and checks it.
func (s *Server) readSpec(ctx context.Context, w http.ResponseWriter, r *http.Request) (template.Spec, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, template.MaxSpecBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return template.Spec{}, errdefs.New(errdefs.TooLarge, "the spec is larger than the %d-byte limit", template.MaxSpecBytes)
	}
	if err != nil {
		return template.Spec{}, invalid("could not read the spec: %v", err)
	}
	spec, err := template.Parse(data)
	if err == nil {
		err = spec.Validate()
	}
	if err != nil {
		return template.Spec{}, invalid("%v", err)
	}
	if err := validateMetadata(spec.Metadata); err != nil {
		return template.Spec{}, err
	}
	return spec, s.tmpl.CheckSpec(ctx, spec)
}

// buildTemplate is POST /v1/templates: build a team template on a host, relaying the host's
// progress lines as they come. The answer is NDJSON ({"progress": line}…, then {"template": …} or
// {"error": …}); errors found before the build starts are plain JSON error answers. The team's
// record is written only when the build succeeded. A client that goes away cancels the build.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	spec, err := s.readSpec(r.Context(), w, r)
	var b templates.Build
	if err == nil {
		b, err = s.tmpl.Plan(r.Context(), id.TeamID, spec)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), templates.BuildTimeout)
	defer cancel()
	out := &ndjson{w: w}
	rec, baked, err := s.tmpl.Run(ctx, id.TeamID, b, func(line string) {
		out.send(v1.BuildEvent{Progress: &line})
	})
	if err != nil {
		var age *agentclient.Error
		inStream := errors.As(err, &age) && age.Status == 0
		if !out.started && !inStream {
			s.writeError(w, r, err)
			return
		}
		out.send(v1.BuildEvent{Error: s.streamError(w, r, err)})
		return
	}
	view := teamView(rec, nil)
	view.Available, view.Baked = true, baked
	out.send(v1.BuildEvent{Template: &view})
}

// streamError words an error for the end of a stream, like writeError does for a whole answer.
func (s *Server) streamError(w http.ResponseWriter, r *http.Request, err error) *v1.ErrorDetail {
	var age *agentclient.Error
	if errors.As(err, &age) && age.Status == 0 {
		return &v1.ErrorDetail{Code: age.Code, Message: age.Message}
	}
	if e, ok := toAPIError(err); ok {
		return &v1.ErrorDetail{Code: e.code, Message: e.message}
	}
	rid := w.Header().Get("X-Request-Id")
	s.log.Error("internal error", "request_id", rid, "method", r.Method, "path", r.URL.Path, "err", err)
	return &v1.ErrorDetail{Code: errdefs.Internal.Code(), Message: "internal error: the build did not finish (request id " + rid + ")"}
}

// deleteTemplate is DELETE /v1/templates/{name}: only a team's own template, and only when
// nothing of the team uses it.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.reply(w, r, http.StatusNoContent, nil, s.tmpl.Delete(r.Context(), id.TeamID, r.PathValue("name")))
}
