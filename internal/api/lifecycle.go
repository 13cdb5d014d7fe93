package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

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
// and any call on a hibernated sandbox wakes it. Forks, and following the host's state, are the
// sandbox service's (internal/sandboxes); these handlers decode, check ownership and encode.

// lifecycleTimeout bounds one snapshot, hibernate or wake on a host; refreshTimeout the state
// check a GET makes on the sandbox's host.
const (
	lifecycleTimeout = sandboxes.LifecycleTimeout
	refreshTimeout   = sandboxes.RefreshTimeout
)

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
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	if err == nil {
		err = s.svc.RefuseWithVolumes(r.Context(), sb, "snapshots")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), lifecycleTimeout)
	defer cancel()
	sn, err := c.CreateSnapshot(ctx, sb.ID)
	if err != nil {
		s.svc.Touched(ctx, sb, c, err)
		s.writeError(w, r, err)
		return
	}
	s.svc.Touched(ctx, sb, c, nil) // a hibernated sandbox was woken for its snapshot
	tmpl := sb.Template
	if sn.Template != "" {
		tmpl = sn.Template
	}
	rec, err := s.store.CreateSnapshot(ctx, store.Snapshot{ID: sn.ID, TeamID: sb.TeamID, SandboxID: sb.ID, HostID: sb.HostID,
		Template: tmpl, SizeBytes: sn.SizeBytes, CreatedAt: s.now()})
	if err != nil {
		// An unrecorded snapshot would only take disk: drop it.
		if derr := c.DeleteSnapshot(ctx, sn.ID); derr != nil {
			s.log.Error("could not delete a snapshot the store failed to record", "snapshot", sn.ID, "host", sb.HostID, "err", derr)
		}
		s.writeError(w, r, err)
		return
	}
	s.log.Info("snapshot taken", "sandbox", sb.ID, "snapshot", rec.ID, "host", rec.HostID, "size_bytes", rec.SizeBytes)
	writeJSON(w, http.StatusCreated, snapshotViewOf(rec))
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

// deleteSnapshot records the snapshot deleted, then deletes it on its host. Sandboxes made from
// it keep running (the host keeps its files until the last of them is gone). A host that is down
// or does not answer does not block the delete: its next reconcile deletes the snapshot there.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	snID := r.PathValue("id")
	sn, err := s.store.GetSnapshot(r.Context(), snID)
	if errors.Is(err, store.ErrNotFound) || err == nil && sn.TeamID != id.TeamID {
		err = notFound("snapshot %s not found", truncate(snID))
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !sn.Deleted {
		if err := s.store.DeleteSnapshot(r.Context(), id.TeamID, sn.ID); err != nil {
			s.writeError(w, r, err)
			return
		}
		h, err := s.store.GetHost(r.Context(), sn.HostID)
		if err == nil && h.State == store.HostUp {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
			err = s.sched.Client(h).DeleteSnapshot(dctx, sn.ID)
			cancel()
		}
		var ae *agentclient.Error
		if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
			s.log.Warn("deleting a snapshot on its host failed; recorded deleted, the host's reconcile will delete it",
				"snapshot", sn.ID, "host", sn.HostID, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) hibernate(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, (*agentclient.Client).Hibernate)
}

func (s *Server) wake(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, (*agentclient.Client).Wake)
}

// lifecycle runs hibernate or wake on the sandbox's host and answers the sandbox in the state the
// host reports.
func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request, call func(*agentclient.Client, context.Context, string) (agentclient.Sandbox, error)) {
	var req struct{}
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), lifecycleTimeout)
	defer cancel()
	a, err := call(c, ctx, sb.ID)
	if err != nil {
		s.svc.Refresh(ctx, sb, c, refreshTimeout) // a failed wake leaves it in state error
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(s.svc.Follow(ctx, sb, a)))
}
