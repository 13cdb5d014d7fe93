package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/template"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Quota is a team's limits (0: none) on its running and hibernated sandboxes, its volumes,
// databases, apps, functions and snapshot sizes; the same shape holds a team's use and what a
// call asks for.
type Quota = store.QuotaAmount

// quotaHoldTTL is how long a call's quota hold lasts if the call never releases it (its server
// died): longer than any create, fork or volume call takes.
const quotaHoldTTL = 10 * time.Minute

// teamQuota is the server's default overlaid with the team's own override.
func (s *Server) teamQuota(ctx context.Context, teamID string) (Quota, error) {
	q := s.cfg.Quota
	o, err := s.store.GetQuotaOverride(ctx, teamID)
	limits := q.Fields()
	for i, v := range o.Fields() {
		if *v != nil {
			*limits[i] = **v
		}
	}
	return q, err
}

// teamUse is what a team holds: its running and hibernated sandboxes, each at its template's
// size, its volumes, databases, apps, functions and snapshots.
func (s *Server) teamUse(ctx context.Context, teamID string) (Quota, error) {
	var u Quota
	var err error
	if u.Volumes, u.VolumeMiB, err = s.store.VolumeUse(ctx, teamID); err != nil {
		return Quota{}, err
	}
	if u.Databases, u.Apps, u.Functions, u.SnapshotMiB, err = s.store.ServiceUse(ctx, teamID); err != nil {
		return Quota{}, err
	}
	byTemplate, err := s.store.LiveSandboxTemplates(ctx, teamID)
	if err != nil {
		return Quota{}, err
	}
	for name, n := range byTemplate {
		need, err := s.sandboxNeed(ctx, teamID, name, n)
		if err != nil {
			return Quota{}, err
		}
		u.Sandboxes += need.Sandboxes
		u.VCPUs += need.VCPUs
		u.MemoryMiB += need.MemoryMiB
	}
	return u, nil
}

// sandboxNeed is what n sandboxes of template tmpl hold.
func (s *Server) sandboxNeed(ctx context.Context, teamID, tmpl string, n int64) (Quota, error) {
	cpu, mem, err := s.templateSize(ctx, teamID, tmpl)
	return Quota{Sandboxes: n, VCPUs: n * cpu, MemoryMiB: n * mem}, err
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

// holdSandboxQuota holds n more sandboxes of template tmpl against the team's limits (see
// holdQuota).
func (s *Server) holdSandboxQuota(ctx context.Context, teamID, tmpl string, n int64) (release func(), err error) {
	return s.holdSandboxesAnd(ctx, teamID, tmpl, n, Quota{})
}

// volumeCopiesNeed is the volume quota n sandboxes that each get copies hold.
func volumeCopiesNeed(copies []sandboxes.VolumeCopy, n int) Quota {
	var q Quota
	q.Volumes, q.VolumeMiB = sandboxes.CopiesNeed(copies, n)
	return q
}

// holdSandboxesAnd holds n sandboxes of template tmpl and also more (a database, an app, a
// function: each is a sandbox of the team's as well).
func (s *Server) holdSandboxesAnd(ctx context.Context, teamID, tmpl string, n int64, more Quota) (release func(), err error) {
	q, err := s.teamQuota(ctx, teamID)
	if err != nil || q == (Quota{}) {
		return func() {}, err // no limits: not even the template's size is looked up
	}
	need := more
	if n > 0 {
		sb, err := s.sandboxNeed(ctx, teamID, tmpl, n)
		if err != nil {
			return func() {}, err
		}
		need.Sandboxes, need.VCPUs, need.MemoryMiB = sb.Sandboxes, sb.VCPUs, sb.MemoryMiB
	}
	return s.holdWithin(ctx, teamID, q, need)
}

// holdQuota refuses (429 quota_exceeded, naming the limit and the use) a call that needs need
// more and would take the team over a limit. Otherwise it holds need until the caller calls
// release, once the resource is recorded or the call failed. The check counts recorded use and
// other calls' holds under the team's lock, on every replica, so calls racing for the last slot
// cannot both pass; the lock covers the check only, not the work.
func (s *Server) holdQuota(ctx context.Context, teamID string, need Quota) (release func(), err error) {
	q, err := s.teamQuota(ctx, teamID)
	if err != nil || q == (Quota{}) {
		return func() {}, err
	}
	return s.holdWithin(ctx, teamID, q, need)
}

// holdWithin is holdQuota under the team's limits q (not all zero).
func (s *Server) holdWithin(ctx context.Context, teamID string, q, need Quota) (release func(), err error) {
	noop := func() {}
	id := auth.NewID("qh_")
	err = s.store.WithTeamLock(ctx, teamID, func() error {
		// Holds first, then recorded use: a call records its resource before it releases its
		// hold, so one whose hold is gone when the holds are read has its resource recorded
		// before the use is read — counted in one or the other (or both), never in neither.
		// (Read the other way round, a call that recorded and released in between was missed:
		// TestServiceQuotaRace let a fourth app in under a limit of 3, 2 runs in 80.)
		held, err := s.store.HeldQuota(ctx, teamID)
		if err != nil {
			return err
		}
		use, err := s.teamUse(ctx, teamID)
		if err != nil {
			return err
		}
		limits, uses, helds, needs := q.Fields(), use.Fields(), held.Fields(), need.Fields()
		for i, name := range store.QuotaNames {
			limit, used, add := *limits[i], *uses[i]+*helds[i], *needs[i]
			if limit > 0 && add > 0 && used+add > limit {
				return errdefs.New(errdefs.Exhausted, "quota exceeded: %s limit %d, in use %d, this call needs %d more (see GET /v1/usage; free some, or ask the operator for more)",
					name, limit, used, add)
			}
		}
		return s.store.AddQuotaHold(ctx, id, teamID, need, quotaHoldTTL)
	})
	if err != nil {
		return noop, err
	}
	return func() {
		if err := s.store.ReleaseQuotaHold(context.WithoutCancel(ctx), id); err != nil {
			s.log.Warn("quota hold not released; it lapses by itself", "hold", id, "err", err)
		}
	}, nil
}

// usageView is a team's use against its quota.
func (s *Server) usageView(ctx context.Context, teamID string) (v1.Usage, error) {
	q, err := s.teamQuota(ctx, teamID)
	if err != nil {
		return v1.Usage{}, err
	}
	u, err := s.teamUse(ctx, teamID)
	view := v1.Usage{TeamID: teamID}
	limits, uses := q.Fields(), u.Fields()
	for i, it := range view.Items() {
		it.Used = *uses[i]
		if limit := *limits[i]; limit > 0 {
			it.Limit = &limit
		}
	}
	return view, err
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
	var o store.QuotaOverride
	limits := o.Fields()
	for i, v := range req.Limits() {
		*limits[i] = *v
		if *v != nil && **v < 0 {
			s.writeError(w, r, invalid("%s must be 0 (no limit) or more, got %d", store.QuotaNames[i], **v))
			return
		}
	}
	team := r.PathValue("id")
	err := s.store.SetQuotaOverride(r.Context(), team, o)
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

// snapshotWithinQuota takes a snapshot of sb if the team's snapshot sizes have room for it. Its
// size is known only once taken, so the call holds the sandbox's memory size (what its memory
// image takes at most; the disk's changes come on top) until the snapshot is recorded.
func (s *Server) snapshotWithinQuota(ctx context.Context, sb store.Sandbox) (store.Snapshot, error) {
	q, err := s.teamQuota(ctx, sb.TeamID)
	if err != nil {
		return store.Snapshot{}, err
	}
	release := func() {}
	if q.SnapshotMiB > 0 {
		_, mem, err := s.templateSize(ctx, sb.TeamID, sb.Template)
		if err != nil {
			return store.Snapshot{}, err
		}
		if release, err = s.holdWithin(ctx, sb.TeamID, q, Quota{SnapshotMiB: mem}); err != nil {
			return store.Snapshot{}, err
		}
	}
	defer release()
	return s.svc.Snapshot(ctx, sb)
}
