package store

import (
	"context"
	"errors"
)

// The E2B facade's per-sandbox state (internal/e2bcompat): the envd access token the stock SDKs
// send on every data-plane call of a sandbox and get again from each connect, so it is kept as it
// was issued (like a sandbox's id, it is worth nothing without the team's E2B key or the
// sandbox); and what the sandbox's timeout does, kill or pause (E2B's lifecycle.onTimeout).

var e2bSchema = []schemaStep{
	{13, []string{
		`CREATE TABLE e2b_sandboxes (
			sandbox_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, access_token TEXT NOT NULL, created_at BIGINT NOT NULL,
			pause_on_timeout INTEGER NOT NULL DEFAULT 0
		)`,
	}},
}

// E2BAccessToken returns the envd access token of a sandbox of teamID, recording fresh as its
// token when it has none yet (a sandbox made through /v1, or a fork). Concurrent callers get the
// same token.
func (s *Store) E2BAccessToken(ctx context.Context, teamID, sandboxID, fresh string) (string, error) {
	if _, err := s.exec(ctx, s.db, `INSERT INTO e2b_sandboxes (sandbox_id, team_id, access_token, created_at)
		VALUES (?, ?, ?, ?) ON CONFLICT (sandbox_id) DO NOTHING`, sandboxID, teamID, fresh, micros(s.now())); err != nil {
		return "", err
	}
	return queryOne(ctx, s, `SELECT access_token FROM e2b_sandboxes WHERE sandbox_id = ? AND team_id = ?`,
		scanFields(func(t *string) []any { return []any{t} }), sandboxID, teamID)
}

// SetPauseOnTimeout records that sandboxID (whose E2B row exists: E2BAccessToken made it) is
// hibernated, not killed, when its timeout runs out.
func (s *Store) SetPauseOnTimeout(ctx context.Context, sandboxID string, pause bool) error {
	_, err := s.exec(ctx, s.db, `UPDATE e2b_sandboxes SET pause_on_timeout = ? WHERE sandbox_id = ?`, boolInt(pause), sandboxID)
	return err
}

// PausesOnTimeout reports whether sandboxID is hibernated, not killed, when its timeout runs out.
func (s *Store) PausesOnTimeout(ctx context.Context, sandboxID string) (bool, error) {
	n, err := queryOne(ctx, s, `SELECT pause_on_timeout FROM e2b_sandboxes WHERE sandbox_id = ?`,
		scanFields(func(n *int64) []any { return []any{n} }), sandboxID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return n != 0, err
}

// PruneE2BSandboxes deletes the E2B rows of sandboxes that are killed (or gone) and returns how
// many it deleted.
func (s *Store) PruneE2BSandboxes(ctx context.Context) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM e2b_sandboxes WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes WHERE sandboxes.id = e2b_sandboxes.sandbox_id AND sandboxes.state <> '`+StateKilled+`')`)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
