package api

import (
	"context"
	"net/http"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Hosts are the operator's: only admin keys list them or pin a sandbox to one.

// listHosts is GET /v1/hosts: every host agent the store knows, with its live sandboxes.
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) {
	if !s.adminBody(w, r, "list the hosts", nil, true) {
		return
	}
	hosts, err := s.store.ListHosts(r.Context())
	var live map[string]int64
	if err == nil {
		live, err = s.store.LiveSandboxesByHost(r.Context())
	}
	s.reply(w, r, http.StatusOK, v1.Hosts{Hosts: list(hosts, func(h store.Host) v1.Host {
		return v1.Host{ID: h.ID, URL: h.URL, State: h.State, Accel: h.Accel, Sandboxes: live[h.ID],
			FreeSlots: max(h.SlotsTotal-h.SlotsUsed, 0), SlotsTotal: h.SlotsTotal, MemMiBTotal: h.MemMiBTotal,
			MemMiBFree: h.MemMiBFree, Templates: orEmpty(h.Templates), Baked: orEmpty(h.Baked), LastHeartbeat: v1.Timestamp(h.LastHeartbeat),
			Draining: h.Draining}
	})}, err)
}

// drainHost stops placements on a host and hibernates its sandboxes so each wakes elsewhere.
func (s *Server) drainHost(w http.ResponseWriter, r *http.Request) {
	if !s.adminBody(w, r, "drain a host", nil, true) {
		return
	}
	rep, err := s.svc.Drain(r.Context(), r.PathValue("id"))
	out := v1.DrainReport{Host: rep.Host, Moved: rep.Moved, Kept: list(rep.Kept, func(k sandboxes.KeptSandbox) v1.KeptSandbox {
		return v1.KeptSandbox{SandboxID: k.ID, Reason: k.Reason}
	})}
	s.reply(w, r, http.StatusOK, out, err)
}

// hostDoctor reports (GET) or repairs (POST …/repair) what crashes left on a host.
func (s *Server) hostDoctor(w http.ResponseWriter, r *http.Request) {
	repair := r.Method == http.MethodPost
	if !s.adminBody(w, r, "run the doctor on a host", nil, true) {
		return
	}
	found, err := s.svc.Doctor(r.Context(), r.PathValue("id"), repair)
	s.reply(w, r, http.StatusOK, v1.DoctorReport{Host: r.PathValue("id"), Findings: orEmpty(found)}, err)
}

// undrainHost places sandboxes on a drained host again.
func (s *Server) undrainHost(w http.ResponseWriter, r *http.Request) {
	if !s.adminBody(w, r, "end a host's drain", nil, true) {
		return
	}
	err := s.svc.Undrain(r.Context(), r.PathValue("id"))
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// pinnable refuses a host pin (create or fork `host`) from a key that is not an admin key, or an
// empty one; nil host is no pin.
func pinnable(ctx context.Context, host *string) error {
	if host == nil {
		return nil
	}
	if id, _ := auth.FromContext(ctx); !id.Admin {
		return errdefs.New(errdefs.Forbidden, "only an admin key can pin a sandbox to a host")
	}
	if *host == "" {
		return invalid("host must name a host (GET /v1/hosts), not be empty")
	}
	return nil
}

// orEmpty is s, or an empty slice for nil (a view's list answers [], never null).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// orEmptyMap is m, or an empty map for nil (a view's object answers {}, never null).
func orEmptyMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
