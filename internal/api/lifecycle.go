package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Fork, snapshots, hibernate and wake. The host agent does the work (docs/hostagent-api.md);
// the control plane checks input and ownership, places the result (a fork's children on their
// parent's host, a sandbox made from a snapshot on the snapshot's host), records it, and keeps
// the recorded state following the host's: the host may hibernate an idle sandbox by itself,
// and any call on a hibernated sandbox wakes it. All of that is the sandbox service's
// (internal/sandboxes); these handlers decode, check ownership and encode.

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Count *int `json:"count"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > agentclient.MaxForkCount {
		s.writeError(w, r, invalid("count must be between 1 and %d, got %d", agentclient.MaxForkCount, count))
		return
	}
	sb, err := s.sandbox(r)
	var children []store.Sandbox
	if err == nil {
		children, err = s.svc.Fork(r.Context(), sb, count)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, v1.Sandboxes{Sandboxes: list(children, viewOf)})
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	err := decodeJSON(w, r, &req, true)
	var sb store.Sandbox
	if err == nil {
		sb, err = s.sandbox(r)
	}
	var sn store.Snapshot
	if err == nil {
		sn, err = s.svc.Snapshot(r.Context(), sb)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotViewOf(sn))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	f := store.SnapshotFilter{TeamID: id.TeamID, Limit: DefaultListLimit}
	for key, vals := range r.URL.Query() {
		v := vals[len(vals)-1]
		switch key {
		case "sandbox_id":
			f.SandboxID = v
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				s.writeError(w, r, invalid("limit must be an integer between 1 and %d", MaxListLimit))
				return
			}
			f.Limit = n
		case "cursor":
			f.Cursor = v
		default:
			s.writeError(w, r, invalid("unknown query parameter %q (use sandbox_id, limit or cursor)", truncate(key)))
			return
		}
	}
	page, next, err := s.store.ListSnapshots(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v1.SnapshotPage{NextCursor: cursor(next), Snapshots: list(page, snapshotViewOf)})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	snID := r.PathValue("id")
	sn, err := s.store.GetTeamSnapshot(r.Context(), id.TeamID, snID)
	if errors.Is(err, store.ErrNotFound) {
		err = notFound("snapshot %s not found", truncate(snID))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotViewOf(sn))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	if err := s.svc.DeleteSnapshot(r.Context(), id.TeamID, r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) hibernate(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, s.svc.Hibernate)
}

func (s *Server) wake(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, s.svc.Wake)
}

// lifecycle answers hibernate or wake: the sandbox in the state its host reports.
func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, call func(context.Context, store.Sandbox) (store.Sandbox, error)) {
	var req struct{}
	err := decodeJSON(w, r, &req, true)
	var sb store.Sandbox
	if err == nil {
		sb, err = s.sandbox(r)
	}
	if err == nil {
		sb, err = call(r.Context(), sb)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(sb))
}
