package api

import (
	"context"
	"net/http"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/sandboxes"
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
		Count *int    `json:"count"`
		Host  *string `json:"host"`
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
	if err == nil {
		err = pinnable(r.Context(), req.Host)
	}
	release := func() {}
	var copies []sandboxes.VolumeCopy
	if err == nil {
		copies, err = s.svc.ForkVolumes(r.Context(), sb)
	}
	if err == nil { // each child gets a copy of each volume
		release, err = s.holdSandboxesAnd(r.Context(), sb.TeamID, sb.Template, int64(count), volumeCopiesNeed(copies, count))
	}
	var children []store.Sandbox
	if err == nil {
		host := sb.HostID
		if req.Host != nil {
			host = *req.Host
		}
		children, err = s.svc.ForkTo(r.Context(), sb, count, host)
	}
	release()
	s.reply(w, r, http.StatusCreated, v1.Sandboxes{Sandboxes: list(children, viewOf)}, err)
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
		sn, err = s.snapshotWithinQuota(r.Context(), sb)
	}
	s.reply(w, r, http.StatusCreated, snapshotViewOf(sn), err)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	f := store.SnapshotFilter{TeamID: id.TeamID, Limit: DefaultListLimit, Unowned: true}
	err := pageParams(r, &f.Limit, &f.Cursor, func(key, v string, _ []string) error {
		if key != "sandbox_id" {
			return invalid("unknown query parameter %q (use sandbox_id, limit or cursor)", truncate(key))
		}
		f.SandboxID = v
		return nil
	})
	page, next, err := fetchPage(r.Context(), err, f, s.store.ListSnapshots)
	s.reply(w, r, http.StatusOK, v1.SnapshotPage{NextCursor: cursor(next), Snapshots: list(page, snapshotViewOf)}, err)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := owned(r, "snapshot", s.store.GetTeamSnapshot)
	s.reply(w, r, http.StatusOK, snapshotViewOf(sn), err)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.reply(w, r, http.StatusNoContent, nil, s.svc.DeleteSnapshot(r.Context(), id.TeamID, r.PathValue("id")))
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
	s.reply(w, r, http.StatusOK, viewOf(sb), err)
}
