package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// MaxTeamTemplateNameLen bounds a team template's name: its host knows it as
// NAME-<8 hex of the team>, which must stay a valid template name (63 characters).
const MaxTeamTemplateNameLen = 50

// buildTimeout bounds one template build (debootstrap, npm and steps on a software-emulated CPU
// can take a long time).
const buildTimeout = time.Hour

// agentTemplateName is the name a team template has on its host: unique across teams (two teams
// may both call theirs "web") and still a valid template name.
func agentTemplateName(teamID, name string) string {
	sum := sha256.Sum256([]byte(teamID))
	return name + "-" + hex.EncodeToString(sum[:4])
}

// upHosts returns the hosts that are up.
func (s *Server) upHosts(ctx context.Context) ([]store.Host, error) {
	hosts, err := s.store.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(hosts, func(h store.Host) bool { return h.State != store.HostUp }), nil
}

// catalogTemplate finds a catalog template by name or alias (postgres-16 is postgres-17).
func (s *Server) catalogTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := s.store.GetTemplate(ctx, template.Canonical(name))
	if !errors.Is(err, store.ErrNotFound) {
		return t, err
	}
	// Aliases hosts reported that this binary's catalog does not know.
	all, err := s.store.ListTemplates(ctx)
	if err != nil {
		return store.Template{}, err
	}
	for _, t := range all {
		if slices.Contains(t.Aliases, name) {
			return t, nil
		}
	}
	return store.Template{}, store.ErrNotFound
}

// findTemplate resolves a name as a sandbox create does: the team's own template first, then the
// catalog (aliases included). Exactly one of the results is set; neither is store.ErrNotFound.
func (s *Server) findTemplate(ctx context.Context, teamID, name string) (*store.TeamTemplate, *store.Template, error) {
	if tt, err := s.store.GetTeamTemplate(ctx, teamID, name); err == nil {
		return &tt, nil, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	ct, err := s.catalogTemplate(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return nil, &ct, nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	ctx := r.Context()
	up, err := s.upHosts(ctx)
	var cat []store.Template
	var own []store.TeamTemplate
	if err == nil {
		cat, err = s.store.ListTemplates(ctx)
	}
	if err == nil {
		own, err = s.store.ListTeamTemplates(ctx, id.TeamID)
	}
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
	name := r.PathValue("name")
	tt, ct, err := s.findTemplate(r.Context(), id.TeamID, name)
	var up []store.Host
	if err == nil {
		up, err = s.upHosts(r.Context())
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.writeError(w, r, notFound("template %s not found", truncate(name)))
	case err != nil:
		s.writeError(w, r, err)
	case tt != nil:
		writeJSON(w, http.StatusOK, teamView(*tt, up))
	default:
		writeJSON(w, http.StatusOK, catalogView(*ct, up))
	}
}

// readSpec reads a template spec (YAML or JSON) from the body and checks what the control plane
// can check: its own fields, and that the name is the team's to use.
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
	switch {
	case len(spec.Name) > MaxTeamTemplateNameLen:
		return template.Spec{}, invalid("template name %q is %d characters; at most %d are allowed", truncate(spec.Name), len(spec.Name), MaxTeamTemplateNameLen)
	case len(spec.Aliases) > 0:
		return template.Spec{}, invalid("template %s: aliases are for catalog templates only", spec.Name)
	case spec.From == spec.Name:
		return template.Spec{}, invalid("template %s cannot start from itself", spec.Name)
	case template.IsReserved(spec.Name):
		return template.Spec{}, conflict("template name %s is taken by the catalog: pick another name", spec.Name)
	}
	if _, err := s.store.GetTemplate(ctx, spec.Name); err == nil {
		return template.Spec{}, conflict("template name %s is taken by the catalog: pick another name", spec.Name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return template.Spec{}, err
	}
	return spec, nil
}

// buildTarget picks the host a spec is built on and rewrites its name and from to what that host
// knows them by. A team template lives on one host: a rebuild, or a build from another team
// template, goes there.
func (s *Server) buildTarget(ctx context.Context, teamID string, spec template.Spec) (template.Spec, store.Host, error) {
	hostID := ""
	if prev, err := s.store.GetTeamTemplate(ctx, teamID, spec.Name); err == nil {
		hostID = prev.HostID
	} else if !errors.Is(err, store.ErrNotFound) {
		return spec, store.Host{}, err
	}
	out := spec
	out.Name = agentTemplateName(teamID, spec.Name)
	fromCatalog := ""
	if !strings.HasPrefix(spec.From, "debian:") {
		parent, cat, err := s.findTemplate(ctx, teamID, spec.From)
		if errors.Is(err, store.ErrNotFound) {
			return spec, store.Host{}, invalid("template %s: from %q: no such template (see GET /v1/templates)", spec.Name, truncate(spec.From))
		}
		if err != nil {
			return spec, store.Host{}, err
		}
		if parent != nil {
			if hostID != "" && hostID != parent.HostID {
				return spec, store.Host{}, conflict("template %s is on host %s but %s, which it starts from, is on %s: delete %s first to build it anew",
					spec.Name, hostID, parent.Name, parent.HostID, spec.Name)
			}
			hostID, out.From = parent.HostID, parent.AgentName
		} else {
			fromCatalog, out.From = cat.Name, cat.Name
		}
	}
	// The sizes the spec sets (0: its parent's) are checked against the host's limits before a
	// build starts; the host checks the resolved sizes again.
	checkSize := func(h store.Host) error {
		return s.sched.CheckSize(h.ID, "template "+spec.Name, int64(spec.VCPUs), int64(spec.MemoryMiB))
	}
	if hostID != "" {
		h, err := s.store.GetHost(ctx, hostID)
		if errors.Is(err, store.ErrNotFound) || err == nil && h.State != store.HostUp {
			return spec, store.Host{}, errdefs.Capacityf("host %s, where template %s is built, is down", hostID, spec.Name)
		}
		if err == nil {
			err = checkSize(h)
		}
		return out, h, err
	}
	var hosts []store.Host
	var err error
	if fromCatalog != "" {
		hosts, err = s.sched.Place(ctx, fromCatalog)
	} else {
		// Any host that is up can build from a Debian suite; PlaceVolume ranks them all.
		hosts, err = s.sched.PlaceVolume(ctx)
	}
	if err != nil {
		return spec, store.Host{}, err
	}
	for _, h := range hosts { // the best host that is large enough
		if err = checkSize(h); err == nil {
			return out, h, nil
		}
	}
	return spec, store.Host{}, err
}

// ndjson writes an NDJSON answer, starting it (200) with the first line.
type ndjson struct {
	w       http.ResponseWriter
	started bool
}

func (n *ndjson) send(v any) {
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.WriteHeader(http.StatusOK)
		n.started = true
	}
	enc := json.NewEncoder(n.w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // a client gone away is seen by the build's context
	http.NewResponseController(n.w).Flush()
}

// buildTemplate is POST /v1/templates: build a team template on a host, relaying the host's
// progress lines as they come. The answer is NDJSON ({"progress": line}…, then {"template": …} or
// {"error": …}); errors found before the build starts are plain JSON error answers. The team's
// record is written only when the build succeeded. A client that goes away cancels the build.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	spec, err := s.readSpec(r.Context(), w, r)
	var agentSpec template.Spec
	var h store.Host
	if err == nil {
		agentSpec, h, err = s.buildTarget(r.Context(), id.TeamID, spec)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), buildTimeout)
	defer cancel()
	out := &ndjson{w: w}
	s.log.Info("template build", "team", id.TeamID, "template", spec.Name, "host", h.ID, "as", agentSpec.Name)
	built, err := s.sched.Client(h).BuildTemplate(ctx, agentSpec, func(line string) {
		out.send(v1.BuildEvent{Progress: &line})
	})
	var rec store.TeamTemplate
	if err == nil {
		rec, err = s.store.UpsertTeamTemplate(context.WithoutCancel(ctx), store.TeamTemplate{TeamID: id.TeamID, Name: spec.Name,
			AgentName: agentSpec.Name, HostID: h.ID, Spec: string(spec.JSON()), Description: spec.Description,
			VCPUs: built.VCPUs, MemoryMiB: built.MemoryMiB, DiskMiB: built.DiskMiB, SizeBytes: built.SizeBytes, BakeMS: built.BakeMS})
	}
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
	s.refreshHost(ctx, h)
	view := teamView(rec, nil)
	view.Available, view.Baked = true, built.Baked
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
	s.reply(w, r, http.StatusNoContent, nil, s.removeTemplate(r.Context(), id.TeamID, r.PathValue("name")))
}

func (s *Server) removeTemplate(ctx context.Context, teamID, name string) error {
	tt, err := s.store.GetTeamTemplate(ctx, teamID, name)
	if errors.Is(err, store.ErrNotFound) {
		if _, cerr := s.catalogTemplate(ctx, name); cerr == nil || template.IsReserved(name) {
			return conflict("template %s is a catalog template: only templates your team built can be deleted", truncate(name))
		}
		return notFound("template %s not found", truncate(name))
	}
	if err != nil {
		return err
	}
	sbID, snID, err := s.store.TemplateUse(ctx, teamID, name)
	switch {
	case err != nil:
		return err
	case sbID != "":
		return conflict("template %s is used by sandbox %s: kill its sandboxes first", name, sbID)
	case snID != "":
		return conflict("template %s is used by snapshot %s: delete its snapshots first", name, snID)
	}
	own, err := s.store.ListTeamTemplates(ctx, teamID)
	if err != nil {
		return err
	}
	for _, o := range own {
		if spec, err := template.Parse([]byte(o.Spec)); err == nil && spec.From == name {
			return conflict("template %s is where template %s starts from: delete %s first", name, o.Name, o.Name)
		}
	}
	// The host forgets it first; a host that is gone cannot, and its bake is left behind there.
	if h, err := s.store.GetHost(ctx, tt.HostID); err == nil && h.State == store.HostUp {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err := s.sched.Client(h).DeleteTemplate(dctx, tt.AgentName)
		cancel()
		var age *agentclient.Error
		if err != nil && !(errors.As(err, &age) && age.Status == http.StatusNotFound) {
			return err
		}
	} else {
		s.log.Warn("template deleted while its host is not up: its bake stays there", "template", tt.AgentName, "host", tt.HostID)
	}
	return s.store.DeleteTeamTemplate(context.WithoutCancel(ctx), teamID, name)
}

// refreshHost re-reads a host's report right away, so its template list (and sizes) include a
// template just built there without waiting for its next heartbeat. Best effort.
func (s *Server) refreshHost(ctx context.Context, h store.Host) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	info, err := s.sched.Client(h).Info(ictx)
	if err == nil {
		err = s.sched.Register(ictx, scheduler.RegistrationFromInfo(info, h.URL, h.Token))
	}
	if err != nil {
		s.log.Warn("could not refresh a host after a template build", "host", h.ID, "err", err)
	}
}
