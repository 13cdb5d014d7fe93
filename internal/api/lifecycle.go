package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/store"
)

// Fork, snapshots, hibernate and wake. The host agent does the work (docs/hostagent-api.md);
// the control plane checks input and ownership, places the result (a fork's children on their
// parent's host, a sandbox made from a snapshot on the snapshot's host), records it, and keeps
// the recorded state following the host's: the host may hibernate an idle sandbox by itself,
// and any call on a hibernated sandbox wakes it.

// lifecycleTimeout bounds one fork, snapshot, hibernate or wake on a host (restores on a
// software-emulated CPU are slow). Like creates, they run detached from the caller's connection so
// that what a host made is always recorded or undone.
const lifecycleTimeout = 10 * time.Minute

// refreshTimeout bounds the state check a GET makes on the sandbox's host.
const refreshTimeout = 2 * time.Second

// SnapshotView is the public snapshot object.
type SnapshotView struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	CreatedAt string `json:"created_at"`
	SizeBytes int64  `json:"size_bytes"`
}

func snapshotViewOf(sn store.Snapshot) SnapshotView {
	return SnapshotView{ID: sn.ID, SandboxID: sn.SandboxID, Template: sn.Template, CreatedAt: Timestamp(sn.CreatedAt), SizeBytes: sn.SizeBytes}
}

// follow makes the record take the state the host reports for the sandbox (running, hibernated,
// or error with its reason), if the record is still in the state it was read in. It returns the
// record as it now is.
func (s *Server) follow(ctx context.Context, sb store.Sandbox, a agentclient.Sandbox) store.Sandbox {
	reason := ""
	switch a.State {
	case store.StateRunning, store.StateHibernated:
	case store.StateError:
		reason = a.Error
		if reason == "" {
			reason = "the host reports an error"
		}
	default:
		return sb
	}
	if a.State == sb.State && reason == sb.Error {
		return sb
	}
	ctx = context.WithoutCancel(ctx)
	ok, err := s.store.SetSandboxState(ctx, sb.ID, a.State, reason, sb.State)
	if err != nil {
		s.log.Warn("could not record a sandbox's state from its host", "sandbox", sb.ID, "state", a.State, "err", err)
		return sb
	}
	if !ok { // changed meanwhile: answer what is recorded now
		if cur, err := s.store.GetSandbox(ctx, sb.ID); err == nil {
			return cur
		}
		return sb
	}
	sb.State, sb.Error = a.State, reason
	return sb
}

// refresh asks the sandbox's host for its state and follows it. Any failure (the host slow or
// not answering, the sandbox unknown there: the reconcile decides about that) keeps the record.
func (s *Server) refresh(ctx context.Context, sb store.Sandbox, c *agentclient.Client, timeout time.Duration) store.Sandbox {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	a, err := c.GetSandbox(rctx, sb.ID)
	if err != nil {
		s.log.Debug("sandbox state check on its host failed; answering the record", "sandbox", sb.ID, "err", err)
		return sb
	}
	return s.follow(ctx, sb, a)
}

// touched updates the record after an exec or files call went to the host: a hibernated sandbox
// was woken by it, so it is running; a call that failed on a hibernated sandbox, or that the host
// refused as a conflict, may have left it in state error (a wake that failed), so ask.
func (s *Server) touched(ctx context.Context, sb store.Sandbox, c *agentclient.Client, callErr error) {
	var ae *agentclient.Error
	switch {
	case callErr == nil && sb.State == store.StateHibernated:
		if _, err := s.store.SetSandboxState(context.WithoutCancel(ctx), sb.ID, store.StateRunning, "", store.StateHibernated); err != nil {
			s.log.Warn("could not record a woken sandbox running", "sandbox", sb.ID, "err", err)
		}
	case callErr != nil && (sb.State == store.StateHibernated || errors.As(callErr, &ae) && ae.Status == http.StatusConflict):
		s.refresh(ctx, sb, c, refreshTimeout)
	}
}

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
	sb, c, err := s.target(r)
	if err == nil {
		err = s.refuseWithVolumes(r.Context(), sb, "forks")
	}
	if err == nil {
		// Children live on their parent's host: it must have room for all of them. Slots are
		// counted here; the host admits their guest memory against its commit limit (a refusal
		// there is 503 capacity too).
		_, err = s.sched.PlaceOn(r.Context(), sb.HostID, count, 0)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	children, err := s.forkOn(r.Context(), sb, c, count)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]SandboxView, len(children))
	for i, ch := range children {
		out[i] = viewOf(ch)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"sandboxes": out})
}

// forkOn asks the parent's host for count children and records them, all in one transaction.
// The host makes all of them or none; if recording fails they are killed there, so a failed fork
// leaves no child anywhere. Children belong to the parent's team, copy its metadata and get a
// fresh TTL from the parent's ttl policy.
func (s *Server) forkOn(ctx context.Context, parent store.Sandbox, c *agentclient.Client, count int) ([]store.Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimeout)
	defer cancel()
	releases := make([]func(), count)
	for i := range releases {
		releases[i] = s.sched.Reserve(parent.HostID, 0)
	}
	releaseAll := func() {
		for _, f := range releases {
			f()
		}
	}
	got, err := c.Fork(ctx, parent.ID, count)
	if err != nil {
		releaseAll()
		s.touched(ctx, parent, c, err)
		return nil, err
	}
	// The parent was woken for the fork if it was hibernated.
	s.touched(ctx, parent, c, nil)
	undo := func(cause error) ([]store.Sandbox, error) {
		for _, ch := range got {
			if ch.ID == "" {
				continue
			}
			if kerr := c.KillSandbox(ctx, ch.ID); kerr != nil {
				s.log.Error("could not kill a fork child that was not recorded", "sandbox", ch.ID, "host", parent.HostID, "err", kerr)
			}
		}
		releaseAll()
		return nil, cause
	}
	if len(got) != count {
		return undo(errors.New("host " + parent.HostID + " answered a fork of " + strconv.Itoa(count) + " with " + strconv.Itoa(len(got)) + " children"))
	}
	now := s.now()
	recs := make([]store.Sandbox, count)
	for i, ch := range got {
		if ch.ID == "" {
			return undo(errors.New("host " + parent.HostID + " answered a fork with a child without an id"))
		}
		md := make(map[string]string, len(parent.Metadata))
		for k, v := range parent.Metadata {
			md[k] = v
		}
		tmpl := parent.Template
		if ch.Template != "" {
			tmpl = ch.Template
		}
		recs[i] = store.Sandbox{ID: ch.ID, TeamID: parent.TeamID, Template: tmpl, State: store.StateRunning, HostID: parent.HostID,
			Metadata: md, CreatedAt: now, ExpiresAt: now.Add(s.ttlOf(parent.TTLSeconds)), TTLSeconds: parent.TTLSeconds, ForkOf: parent.ID}
	}
	out, err := s.store.CreateSandboxes(ctx, recs)
	if err != nil {
		return undo(err)
	}
	s.log.Info("forked sandbox", "sandbox", parent.ID, "host", parent.HostID, "children", count)
	return out, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeJSON(w, r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, c, err := s.target(r)
	if err == nil {
		err = s.refuseWithVolumes(r.Context(), sb, "snapshots")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), lifecycleTimeout)
	defer cancel()
	sn, err := c.CreateSnapshot(ctx, sb.ID)
	if err != nil {
		s.touched(ctx, sb, c, err)
		s.writeError(w, r, err)
		return
	}
	s.touched(ctx, sb, c, nil) // a hibernated sandbox was woken for its snapshot
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
	out := make([]SnapshotView, 0, len(page))
	for _, sn := range page {
		out = append(out, snapshotViewOf(sn))
	}
	var nextp *string
	if next != "" {
		nextp = &next
	}
	writeJSON(w, http.StatusOK, map[string]any{"snapshots": out, "next_cursor": nextp})
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
		s.refresh(ctx, sb, c, refreshTimeout) // a failed wake leaves it in state error
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(s.follow(ctx, sb, a)))
}
