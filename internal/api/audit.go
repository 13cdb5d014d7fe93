package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/periodic"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Defaults of the audit log.
const (
	DefaultAuditRetention     = 30 * 24 * time.Hour
	DefaultAuditPruneInterval = time.Hour
)

// mutating reports whether a method changes state (and so is audited). /mcp is not: the /v1
// calls its tools make are audited each.
func mutating(rt route) bool {
	return rt.path != auth.MCPRoute && (rt.path == auth.TerminalRoute || rt.method != http.MethodGet && rt.method != http.MethodHead && rt.method != http.MethodOptions)
}

// auditWriter records an answer's status and, for routes that name no resource in their path
// (creates), the first bytes of a JSON answer, from which only the created object's id is kept.
type auditWriter struct {
	recorder
	capture bool
	head    bytes.Buffer
}

const auditCaptureBytes = 64 << 10

func (a *auditWriter) Write(b []byte) (int, error) {
	if a.capture && a.head.Len() < auditCaptureBytes {
		a.head.Write(b[:min(len(b), auditCaptureBytes-a.head.Len())])
	}
	return a.recorder.Write(b)
}

// Flush passes a flush on: handlers that assert http.Flusher (connect-go's streams, the E2B
// facade's) stream through the audit too.
func (a *auditWriter) Flush() { http.NewResponseController(a.ResponseWriter).Flush() }

// createdID is the id of the object a create answered with: "id", or a new team's "team.id".
func (a *auditWriter) createdID() string {
	if a.status < 200 || a.status > 299 || a.head.Len() == 0 {
		return ""
	}
	var body struct {
		ID   string `json:"id"`
		Team struct {
			ID string `json:"id"`
		} `json:"team"`
	}
	if json.Unmarshal(a.head.Bytes(), &body) != nil {
		return ""
	}
	if body.ID != "" {
		return body.ID
	}
	return body.Team.ID
}

// audited appends every mutating call of an authenticated route to the audit log once it is
// answered: the key, method, route pattern, resource id, status, request id and source address —
// never the request's body or query, nor the answer beyond a created object's id.
func (s *Server) audited(rt route, next http.Handler) http.Handler {
	if !mutating(rt) {
		return next
	}
	return s.auditedOn(rt, "", next)
}

// auditedOn is audited for a call on resource ("": the route's {id} or {name}, else the id a
// create answered).
func (s *Server) auditedOn(rt route, resource string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		aw := &auditWriter{recorder: recorder{ResponseWriter: w}, capture: resource == "" && !strings.Contains(rt.path, "{")}
		next.ServeHTTP(aw, r)
		id, ok := auth.FromContext(r.Context())
		if !ok {
			return
		}
		res := resource
		if res == "" {
			res = r.PathValue("id")
		}
		if res == "" {
			res = r.PathValue("name")
		}
		if res == "" {
			res = aw.createdID()
		}
		status := aw.status
		if status == 0 {
			status = http.StatusOK
		}
		src := r.RemoteAddr
		if host, _, err := net.SplitHostPort(src); err == nil {
			src = host
		}
		e := store.AuditEntry{ID: auth.NewID("aud_"), TeamID: id.TeamID, KeyID: id.KeyID, Method: rt.method, Route: rt.path,
			ResourceID: res, Status: status, RequestID: w.Header().Get("X-Request-Id"), Source: src, CreatedAt: s.now()}
		// The call is done whatever happens to its client: record it anyway.
		if err := s.store.AppendAudit(context.WithoutCancel(r.Context()), e); err != nil {
			s.log.Error("audit: cannot record a call", "request_id", e.RequestID, "route", rt.path, "err", err)
		}
	})
}

// listAudit is GET /v1/audit: the caller's team's entries, for admin keys only.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	if !s.adminBody(w, r, "read the audit log", nil, false) {
		return
	}
	id, _ := auth.FromContext(r.Context())
	f := store.AuditFilter{TeamID: id.TeamID, Limit: DefaultListLimit}
	err := pageParams(r, &f.Limit, &f.Cursor, func(key, v string, _ []string) error {
		switch key {
		case "since":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return invalid("since must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
			}
			f.Since = t
		case "resource":
			f.ResourceID = v
		default:
			return invalid("unknown query parameter %q (use since, resource, limit or cursor)", truncate(key))
		}
		return nil
	})
	page, next, err := fetchPage(r.Context(), err, f, s.store.ListAudit)
	s.reply(w, r, http.StatusOK, v1.AuditPage{NextCursor: cursor(next), Entries: list(page, auditViewOf)}, err)
}

func auditViewOf(e store.AuditEntry) v1.AuditEntry {
	return v1.AuditEntry{ID: e.ID, KeyID: e.KeyID, Change: changeOf(e), RequestID: e.RequestID, Source: e.Source,
		CreatedAt: v1.Timestamp(e.CreatedAt)}
}

// changeOf is what an audit entry says about the call alone (GET /v1/events' change events).
func changeOf(e store.AuditEntry) v1.Change {
	return v1.Change{Method: e.Method, Route: e.Route, ResourceID: e.ResourceID, Status: e.Status}
}

// RunAuditPruner deletes audit entries older than the retention every interval (and once at
// start) until ctx ends.
func (s *Server) RunAuditPruner(ctx context.Context) {
	s.PruneAudit(ctx)
	periodic.Every(ctx, s.cfg.AuditPruneInterval, func() { s.PruneAudit(ctx) })
}

// PruneAudit deletes the entries older than the retention once.
func (s *Server) PruneAudit(ctx context.Context) {
	// The E2B facade's rows of killed sandboxes go in the same hourly pass.
	if _, err := s.store.PruneE2BSandboxes(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("e2b: prune of killed sandboxes' rows failed", "err", err)
	}
	n, err := s.store.PruneAudit(ctx, s.now().Add(-s.cfg.AuditRetention))
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.Warn("audit: prune failed", "err", err)
	case n > 0:
		s.log.Info("audit: pruned old entries", "entries", n, "retention", s.cfg.AuditRetention.String())
	}
}
