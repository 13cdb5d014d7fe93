package store

import (
	"context"
	"time"
)

// AuditEntry is one mutating API call, as the audit log keeps it: who (the key), what (method and
// route pattern), which resource, the answer's status, the request id and the caller's address.
// It never holds a request body, a secret or file contents: the API writes only these fields.
type AuditEntry struct {
	ID         string
	TeamID     string
	KeyID      string
	Method     string
	Route      string // the route's pattern, e.g. /v1/sandboxes/{id}
	ResourceID string // "" when the call named none and created none
	Status     int
	RequestID  string
	Source     string // the caller's address (the connection's, without the port)
	CreatedAt  time.Time
}

// AuditFilter selects a team's audit entries: Since (zero: all), ResourceID ("" : all), and
// the page.
type AuditFilter struct {
	TeamID     string
	Since      time.Time
	ResourceID string
	Limit      int
	Cursor     string
}

// AppendAudit stores e (CreatedAt defaults to now).
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) error {
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.now().UTC()
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO audit_log (id, team_id, key_id, method, route, resource_id, status, request_id, source, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ID, e.TeamID, e.KeyID, e.Method, e.Route, e.ResourceID, e.Status, e.RequestID, e.Source, micros(e.CreatedAt))
	return err
}

const auditCols = `id, team_id, key_id, method, route, resource_id, status, request_id, source, created_at`

var scanAudit = scanFields(func(e *AuditEntry) []any {
	return []any{&e.ID, &e.TeamID, &e.KeyID, &e.Method, &e.Route, &e.ResourceID, &e.Status, &e.RequestID, &e.Source, timeCol(&e.CreatedAt)}
})

// ListAudit pages through a team's audit entries, newest first; another team's are never seen.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, string, error) {
	lq := listQuery{sel: `SELECT ` + auditCols + ` FROM audit_log`, where: []string{`team_id = ?`}, args: []any{f.TeamID}}
	if !f.Since.IsZero() {
		lq.where = append(lq.where, `created_at >= ?`)
		lq.args = append(lq.args, micros(f.Since))
	}
	if f.ResourceID != "" {
		lq.where = append(lq.where, `resource_id = ?`)
		lq.args = append(lq.args, f.ResourceID)
	}
	return queryPage(ctx, s, lq, f.Limit, f.Cursor, scanAudit, func(e AuditEntry) (time.Time, string) { return e.CreatedAt, e.ID })
}

// PruneAudit deletes every team's entries older than before and returns how many went.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM audit_log WHERE created_at < ?`, micros(before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// auditSchema is the audit log's part of each migration. Rows outlive their key and team (no
// foreign keys): the record of a revoked key's calls stays until retention prunes it.
var auditSchema = []schemaStep{
	{6, []string{
		`CREATE TABLE audit_log (
			id          TEXT PRIMARY KEY,
			team_id     TEXT NOT NULL,
			key_id      TEXT NOT NULL,
			method      TEXT NOT NULL,
			route       TEXT NOT NULL,
			resource_id TEXT NOT NULL DEFAULT '',
			status      INTEGER NOT NULL,
			request_id  TEXT NOT NULL,
			source      TEXT NOT NULL,
			created_at  BIGINT NOT NULL
		)`,
		`CREATE INDEX audit_log_team ON audit_log (team_id, created_at)`,
		`CREATE INDEX audit_log_created ON audit_log (created_at)`,
	}},
}
