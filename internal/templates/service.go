// Package templates is the control plane's template service: the catalog (templates every host
// bakes from this binary's specs) and each team's own templates (built from a spec on one host).
// It resolves a name as a create does, builds a team template on the right host and records it
// only when the build succeeded, and deletes one only when nothing of the team uses it. The HTTP
// API decodes and encodes around it; it knows nothing of HTTP.
//
// Invariant: a team template lives on exactly one host, under a name unique across teams
// (AgentName); a rebuild, and a build from it, go to that host.
package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
)

// MaxTeamTemplateNameLen bounds a team template's name: its host knows it as
// NAME-<8 hex of the team>, which must stay a valid template name (63 characters).
const MaxTeamTemplateNameLen = 50

// BuildTimeout bounds one template build (debootstrap, npm and steps on a software-emulated CPU
// can take a long time).
const BuildTimeout = time.Hour

// Scheduler is what the service needs from internal/scheduler.
type Scheduler interface {
	Place(ctx context.Context, template string) ([]store.Host, error)
	PlaceVolume(ctx context.Context) ([]store.Host, error)
	CheckSize(hostID, what string, vcpus, memMiB int64) error
	Register(ctx context.Context, reg scheduler.Registration) error
	Client(h store.Host) *agentclient.Client
}

// Service resolves, builds and deletes templates. Create with New.
type Service struct {
	store *store.Store
	sched Scheduler
	log   *slog.Logger
}

// New returns a service over st and sched.
func New(st *store.Store, sched Scheduler, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: st, sched: sched, log: log}
}

// AgentName is the name a team template has on its host: unique across teams (two teams may both
// call theirs "web") and still a valid template name.
func AgentName(teamID, name string) string {
	sum := sha256.Sum256([]byte(teamID))
	return name + "-" + hex.EncodeToString(sum[:4])
}

// UpHosts returns the hosts that are up.
func (s *Service) UpHosts(ctx context.Context) ([]store.Host, error) {
	hosts, err := s.store.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(hosts, func(h store.Host) bool { return h.State != store.HostUp }), nil
}

// Catalog finds a catalog template by name or alias (postgres-16 is postgres-17).
func (s *Service) Catalog(ctx context.Context, name string) (store.Template, error) {
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

// Find resolves a name as a sandbox create does: the team's own template first, then the catalog
// (aliases included). Exactly one of the results is set, or the error is store.ErrNotFound.
func (s *Service) Find(ctx context.Context, teamID, name string) (*store.TeamTemplate, *store.Template, error) {
	if tt, err := s.store.GetTeamTemplate(ctx, teamID, name); err == nil {
		return &tt, nil, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	ct, err := s.Catalog(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return nil, &ct, nil
}

// List is the catalog and the team's own templates, with the hosts that are up.
func (s *Service) List(ctx context.Context, teamID string) (cat []store.Template, own []store.TeamTemplate, up []store.Host, err error) {
	if up, err = s.UpHosts(ctx); err != nil {
		return
	}
	if cat, err = s.store.ListTemplates(ctx); err != nil {
		return
	}
	own, err = s.store.ListTeamTemplates(ctx, teamID)
	return
}

// Get is one template by name as the team sees it (Find), with the hosts that are up; a missing
// one is errdefs.NotFound.
func (s *Service) Get(ctx context.Context, teamID, name string) (*store.TeamTemplate, *store.Template, []store.Host, error) {
	tt, ct, err := s.Find(ctx, teamID, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, errdefs.NotFoundf("template %s not found", truncate(name))
	}
	if err != nil {
		return nil, nil, nil, err
	}
	up, err := s.UpHosts(ctx)
	return tt, ct, up, err
}

// CheckSpec checks what the control plane can check of a parsed, valid spec: the name is the
// team's to use and the spec starts from something else.
func (s *Service) CheckSpec(ctx context.Context, spec template.Spec) error {
	switch {
	case len(spec.Name) > MaxTeamTemplateNameLen:
		return errdefs.Invalidf("template name %q is %d characters; at most %d are allowed", truncate(spec.Name), len(spec.Name), MaxTeamTemplateNameLen)
	case len(spec.Aliases) > 0:
		return errdefs.Invalidf("template %s: aliases are for catalog templates only", spec.Name)
	case spec.From == spec.Name:
		return errdefs.Invalidf("template %s cannot start from itself", spec.Name)
	case template.IsReserved(spec.Name):
		return errdefs.Conflictf("template name %s is taken by the catalog: pick another name", spec.Name)
	}
	if _, err := s.store.GetTemplate(ctx, spec.Name); err == nil {
		return errdefs.Conflictf("template name %s is taken by the catalog: pick another name", spec.Name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// Build is a build about to start: the host it runs on and the spec as that host knows it.
type Build struct {
	Spec      template.Spec // as the team wrote it
	AgentSpec template.Spec // name and from as the host knows them
	Host      store.Host
}

// Plan picks the host spec is built on and rewrites its name and from to what that host knows
// them by. The sizes the spec sets (0: its parent's) are checked against the host's limits here,
// before a build starts; the host checks the resolved sizes again.
func (s *Service) Plan(ctx context.Context, teamID string, spec template.Spec) (Build, error) {
	hostID := ""
	if prev, err := s.store.GetTeamTemplate(ctx, teamID, spec.Name); err == nil {
		hostID = prev.HostID
	} else if !errors.Is(err, store.ErrNotFound) {
		return Build{}, err
	}
	out := spec
	out.Name = AgentName(teamID, spec.Name)
	fromCatalog := ""
	if !strings.HasPrefix(spec.From, "debian:") {
		parent, cat, err := s.Find(ctx, teamID, spec.From)
		if errors.Is(err, store.ErrNotFound) {
			return Build{}, errdefs.Invalidf("template %s: from %q: no such template (see GET /v1/templates)", spec.Name, truncate(spec.From))
		}
		if err != nil {
			return Build{}, err
		}
		if parent != nil {
			if hostID != "" && hostID != parent.HostID {
				return Build{}, errdefs.Conflictf("template %s is on host %s but %s, which it starts from, is on %s: delete %s first to build it anew",
					spec.Name, hostID, parent.Name, parent.HostID, spec.Name)
			}
			hostID, out.From = parent.HostID, parent.AgentName
		} else {
			fromCatalog, out.From = cat.Name, cat.Name
		}
	}
	checkSize := func(h store.Host) error {
		return s.sched.CheckSize(h.ID, "template "+spec.Name, int64(spec.VCPUs), int64(spec.MemoryMiB))
	}
	if hostID != "" {
		h, err := s.store.GetHost(ctx, hostID)
		if errors.Is(err, store.ErrNotFound) || err == nil && h.State != store.HostUp {
			return Build{}, errdefs.Capacityf("host %s, where template %s is built, is down", hostID, spec.Name)
		}
		if err == nil {
			err = checkSize(h)
		}
		return Build{Spec: spec, AgentSpec: out, Host: h}, err
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
		return Build{}, err
	}
	for _, h := range hosts { // the best host that is large enough
		if err = checkSize(h); err == nil {
			return Build{Spec: spec, AgentSpec: out, Host: h}, nil
		}
	}
	return Build{}, err
}

// Run builds b on its host, passing the host's progress lines to progress, and records the
// team's template only when the build succeeded. The record is returned with whether the host
// baked it.
func (s *Service) Run(ctx context.Context, teamID string, b Build, progress func(string)) (store.TeamTemplate, bool, error) {
	s.log.Info("template build", "team", teamID, "template", b.Spec.Name, "host", b.Host.ID, "as", b.AgentSpec.Name)
	built, err := s.sched.Client(b.Host).BuildTemplate(ctx, b.AgentSpec, progress)
	if err != nil {
		return store.TeamTemplate{}, false, err
	}
	faultpoint.Reach("server.template.built") // baked on the host, unrecorded
	rec, err := s.store.UpsertTeamTemplate(context.WithoutCancel(ctx), store.TeamTemplate{TeamID: teamID, Name: b.Spec.Name,
		AgentName: b.AgentSpec.Name, HostID: b.Host.ID, Spec: string(b.Spec.JSON()), Description: b.Spec.Description,
		VCPUs: built.VCPUs, MemoryMiB: built.MemoryMiB, DiskMiB: built.DiskMiB, SizeBytes: built.SizeBytes, BakeMS: built.BakeMS})
	if err != nil {
		return store.TeamTemplate{}, false, err
	}
	s.refreshHost(ctx, b.Host)
	return rec, built.Baked, nil
}

// Delete removes the team's own template name, only when no sandbox, snapshot or other template
// of the team uses it. The host forgets it first; a host that is down keeps its bake.
func (s *Service) Delete(ctx context.Context, teamID, name string) error {
	tt, err := s.store.GetTeamTemplate(ctx, teamID, name)
	if errors.Is(err, store.ErrNotFound) {
		if _, cerr := s.Catalog(ctx, name); cerr == nil || template.IsReserved(name) {
			return errdefs.Conflictf("template %s is a catalog template: only templates your team built can be deleted", truncate(name))
		}
		return errdefs.NotFoundf("template %s not found", truncate(name))
	}
	if err != nil {
		return err
	}
	sbID, snID, err := s.store.TemplateUse(ctx, teamID, name)
	switch {
	case err != nil:
		return err
	case sbID != "":
		return errdefs.Conflictf("template %s is used by sandbox %s: kill its sandboxes first", name, sbID)
	case snID != "":
		return errdefs.Conflictf("template %s is used by snapshot %s: delete its snapshots first", name, snID)
	}
	own, err := s.store.ListTeamTemplates(ctx, teamID)
	if err != nil {
		return err
	}
	for _, o := range own {
		if spec, err := template.Parse([]byte(o.Spec)); err == nil && spec.From == name {
			return errdefs.Conflictf("template %s is where template %s starts from: delete %s first", name, o.Name, o.Name)
		}
	}
	if h, err := s.store.GetHost(ctx, tt.HostID); err == nil && h.State == store.HostUp {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err := s.sched.Client(h).DeleteTemplate(dctx, tt.AgentName)
		cancel()
		var age *agentclient.Error
		if err != nil && !(errors.As(err, &age) && age.Status == 404) {
			return err
		}
	} else {
		s.log.Warn("template deleted while its host is not up: its bake stays there", "template", tt.AgentName, "host", tt.HostID)
	}
	return s.store.DeleteTeamTemplate(context.WithoutCancel(ctx), teamID, name)
}

// refreshHost re-reads a host's report right away, so its template list (and sizes) include a
// template just built there without waiting for its next heartbeat. Best effort.
func (s *Service) refreshHost(ctx context.Context, h store.Host) {
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

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Resolve is Find for a create: the name to record, the name the host knows it by, and the one
// host that has it (a team template) or "" (any host of the catalog). A missing template is
// errdefs.Invalid naming it.
func (s *Service) Resolve(ctx context.Context, teamID, name string) (recorded, agentName, host string, err error) {
	tt, ct, err := s.Find(ctx, teamID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", "", "", errdefs.Invalidf("unknown template %q (see GET /v1/templates)", truncate(name))
	case err != nil:
		return "", "", "", err
	case tt != nil:
		return tt.Name, tt.AgentName, tt.HostID, nil
	}
	return ct.Name, ct.Name, "", nil
}
