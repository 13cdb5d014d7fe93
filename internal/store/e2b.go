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
	// A code context the facade restarted is a fresh context under the id the SDK keeps.
	{21, []string{
		`CREATE TABLE e2b_code_contexts (
			sandbox_id TEXT NOT NULL, e2b_id TEXT NOT NULL, context_id TEXT NOT NULL,
			PRIMARY KEY (sandbox_id, e2b_id)
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

// PausingOnTimeout returns which of ids are hibernated, not killed, when their timeout runs out
// (PausesOnTimeout for many: the reaper asks once per batch).
func (s *Store) PausingOnTimeout(ctx context.Context, ids []string) (map[string]bool, error) {
	pausing := map[string]bool{}
	if len(ids) == 0 {
		return pausing, nil
	}
	in, args := inList(ids)
	got, err := queryAll(ctx, s, s.db, `SELECT sandbox_id FROM e2b_sandboxes WHERE pause_on_timeout <> 0 AND sandbox_id IN `+in, scanOne[string], args...)
	for _, id := range got {
		pausing[id] = true
	}
	return pausing, err
}

// PruneE2BSandboxes deletes the E2B rows of sandboxes that are killed (or gone), their code
// contexts' too, and returns how many sandbox rows it deleted.
func (s *Store) PruneE2BSandboxes(ctx context.Context) (int64, error) {
	if _, err := s.exec(ctx, s.db, `DELETE FROM e2b_code_contexts WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes WHERE sandboxes.id = e2b_code_contexts.sandbox_id AND sandboxes.state <> '`+StateKilled+`')`); err != nil {
		return 0, err
	}
	res, err := s.exec(ctx, s.db, `DELETE FROM e2b_sandboxes WHERE NOT EXISTS (
		SELECT 1 FROM sandboxes WHERE sandboxes.id = e2b_sandboxes.sandbox_id AND sandboxes.state <> '`+StateKilled+`')`)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// E2BCodeContexts returns a sandbox's restarted code contexts: the id the SDK knows → the id of
// the context that now stands for it.
func (s *Store) E2BCodeContexts(ctx context.Context, sandboxID string) (map[string]string, error) {
	rows, err := s.query(ctx, s.db, `SELECT e2b_id, context_id FROM e2b_code_contexts WHERE sandbox_id = ?`, sandboxID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var e2bID, id string
		if err := rows.Scan(&e2bID, &id); err != nil {
			return nil, err
		}
		out[e2bID] = id
	}
	return out, rows.Err()
}

// SetE2BCodeContext records that context id now stands for e2bID in a sandbox ("": e2bID is
// gone, or is itself again).
func (s *Store) SetE2BCodeContext(ctx context.Context, sandboxID, e2bID, id string) error {
	if id == "" || id == e2bID {
		_, err := s.exec(ctx, s.db, `DELETE FROM e2b_code_contexts WHERE sandbox_id = ? AND e2b_id = ?`, sandboxID, e2bID)
		return err
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO e2b_code_contexts (sandbox_id, e2b_id, context_id) VALUES (?, ?, ?)
		ON CONFLICT (sandbox_id, e2b_id) DO UPDATE SET context_id = excluded.context_id`, sandboxID, e2bID, id)
	return err
}
