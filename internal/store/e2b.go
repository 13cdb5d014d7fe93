package store

import "context"

// The E2B facade's per-sandbox envd access token (internal/e2bcompat): the stock SDKs send it on
// every data-plane call of a sandbox and get it again from each connect, so it is kept as it was
// issued (like a sandbox's id, it is worth nothing without the team's E2B key or the sandbox).

var e2bSchema = []schemaStep{
	{12, []string{
		`CREATE TABLE e2b_sandboxes (
			sandbox_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, access_token TEXT NOT NULL, created_at BIGINT NOT NULL
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
