package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Quota is a team's limits on its running and hibernated sandboxes; 0 means no limit.
type Quota struct {
	Sandboxes int64 // how many at once
	VCPUs     int64 // their vCPUs together
	MemoryMiB int64 // their memory together
}

// teamQuota is the server's default overlaid with the team's own override.
func (s *Server) teamQuota(ctx context.Context, teamID string) (Quota, error) {
	q := s.cfg.Quota
	o, err := s.store.GetQuotaOverride(ctx, teamID)
	for _, f := range []struct {
		dst *int64
		src *int64
	}{{&q.Sandboxes, o.Sandboxes}, {&q.VCPUs, o.VCPUs}, {&q.MemoryMiB, o.MemoryMiB}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return q, err
}

// teamUse is what a team's running and hibernated sandboxes hold, each at its template's size.
func (s *Server) teamUse(ctx context.Context, teamID string) (Quota, error) {
	byTemplate, err := s.store.LiveSandboxTemplates(ctx, teamID)
	if err != nil {
		return Quota{}, err
	}
	var u Quota
	for name, n := range byTemplate {
		cpu, mem, err := s.templateSize(ctx, teamID, name)
		if err != nil {
			return Quota{}, err
		}
		u.Sandboxes += n
		u.VCPUs += n * cpu
		u.MemoryMiB += n * mem
	}
	return u, nil
}

// templateSize is the vCPUs and memory of a sandbox of template name (the defaults for a
// template that no longer exists, or whose size is not known yet).
func (s *Server) templateSize(ctx context.Context, teamID, name string) (vcpus, memMiB int64, err error) {
	cpu, mem := 0, 0
	tt, ct, err := s.tmpl.Find(ctx, teamID, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return 0, 0, err
	case tt != nil:
		cpu, mem = tt.VCPUs, tt.MemoryMiB
	default:
		cpu, mem = ct.VCPUs, ct.MemoryMiB
	}
	if cpu <= 0 {
		cpu = template.DefaultVCPUs
	}
	if mem <= 0 {
		mem = template.DefaultMemoryMiB
	}
	return int64(cpu), int64(mem), nil
}

// checkQuota refuses (429 quota_exceeded, naming the limit and the use) n more sandboxes of
// template tmpl that would take the team over a limit. It is a check before the create, not a
// reservation: creates racing each other may pass it together and overshoot by their number.
func (s *Server) checkQuota(ctx context.Context, teamID, tmpl string, n int64) error {
	q, err := s.teamQuota(ctx, teamID)
	if err != nil || q == (Quota{}) {
		return err
	}
	use, err := s.teamUse(ctx, teamID)
	if err != nil {
		return err
	}
	cpu, mem, err := s.templateSize(ctx, teamID, tmpl)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name             string
		limit, used, add int64
	}{
		{"sandboxes", q.Sandboxes, use.Sandboxes, n},
		{"vcpus", q.VCPUs, use.VCPUs, n * cpu},
		{"memory_mib", q.MemoryMiB, use.MemoryMiB, n * mem},
	} {
		if c.limit > 0 && c.used+c.add > c.limit {
			return errdefs.New(errdefs.Exhausted, "quota exceeded: %s limit %d, in use %d, this call needs %d more (see GET /v1/usage; kill sandboxes, or ask the operator for more)",
				c.name, c.limit, c.used, c.add)
		}
	}
	return nil
}

// usageView is a team's use against its quota.
func (s *Server) usageView(ctx context.Context, teamID string) (v1.Usage, error) {
	q, err := s.teamQuota(ctx, teamID)
	if err != nil {
		return v1.Usage{}, err
	}
	u, err := s.teamUse(ctx, teamID)
	item := func(used, limit int64) v1.UsageItem {
		it := v1.UsageItem{Used: used}
		if limit > 0 {
			it.Limit = &limit
		}
		return it
	}
	return v1.Usage{TeamID: teamID, Sandboxes: item(u.Sandboxes, q.Sandboxes), VCPUs: item(u.VCPUs, q.VCPUs),
		MemoryMiB: item(u.MemoryMiB, q.MemoryMiB)}, err
}

// usage is GET /v1/usage: the caller's team's use against its quota.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	u, err := s.usageView(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, u, err)
}

// setQuota is PUT /v1/teams/{id}/quota (admin keys): replaces a team's own limits.
func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) {
	var req v1.QuotaRequest
	if !s.adminBody(w, r, "set a team's quota", &req, true) {
		return
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"sandboxes", req.Sandboxes}, {"vcpus", req.VCPUs}, {"memory_mib", req.MemoryMiB}} {
		if f.v != nil && *f.v < 0 {
			s.writeError(w, r, invalid("%s must be 0 (no limit) or more, got %d", f.name, *f.v))
			return
		}
	}
	team := r.PathValue("id")
	err := s.store.SetQuotaOverride(r.Context(), team, store.QuotaOverride{Sandboxes: req.Sandboxes, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB})
	if errors.Is(err, store.ErrNotFound) {
		s.writeError(w, r, notFound("team %s not found", truncate(team)))
		return
	}
	var u v1.Usage
	if err == nil {
		u, err = s.usageView(r.Context(), team)
	}
	s.reply(w, r, http.StatusOK, u, err)
}
