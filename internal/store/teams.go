package store

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// Team owns sandboxes and keys.
type Team struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// APIKey is a stored key: only the SHA-256 of its secret is kept, plus a short prefix of the
// secret that lets a lookup find candidates and lets humans tell keys apart.
type APIKey struct {
	ID     string
	TeamID string
	Name   string
	Prefix string
	Hash   string // hex SHA-256 of the whole secret
	Admin  bool
	// Scopes limit what the key may call (internal/auth's scope names); empty: no limit beyond
	// Admin (every key made before scopes existed).
	Scopes    []string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is valid
	ExpiresAt time.Time // zero: never expires
}

// Expired reports whether the key's expiry has passed at now.
func (k APIKey) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Revoked reports whether the key was revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// CreateTeam adds a team; a duplicate name is ErrConflict.
func (s *Store) CreateTeam(ctx context.Context, t Team) (Team, error) {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = s.now().UTC()
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?)`, t.ID, t.Name, micros(t.CreatedAt))
	if err != nil {
		return Team{}, conflictOr(err)
	}
	t.CreatedAt = fromMicros(micros(t.CreatedAt))
	return t, nil
}

// CreateTeamWithKey adds a team and its first key atomically.
func (s *Store) CreateTeamWithKey(ctx context.Context, t Team, k APIKey) (Team, APIKey, error) {
	now := s.now().UTC()
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now
	}
	k.TeamID = t.ID
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?)`, t.ID, t.Name, micros(t.CreatedAt)); err != nil {
			return err
		}
		return s.insertKey(ctx, tx, k)
	})
	if err != nil {
		return Team{}, APIKey{}, conflictOr(err)
	}
	t.CreatedAt = fromMicros(micros(t.CreatedAt))
	k.CreatedAt = fromMicros(micros(k.CreatedAt))
	return t, k, nil
}

// GetTeam returns the team with id.
func (s *Store) GetTeam(ctx context.Context, id string) (Team, error) {
	return queryOne(ctx, s, `SELECT id, name, created_at FROM teams WHERE id = ?`, scanTeam, id)
}

// GetTeamByName returns the team called name.
func (s *Store) GetTeamByName(ctx context.Context, name string) (Team, error) {
	return queryOne(ctx, s, `SELECT id, name, created_at FROM teams WHERE name = ?`, scanTeam, name)
}

var scanTeam = scanFields(func(t *Team) []any {
	return []any{&t.ID, &t.Name, timeCol(&t.CreatedAt)}
})

// CreateKey stores a key for an existing team.
func (s *Store) CreateKey(ctx context.Context, k APIKey) (APIKey, error) {
	if k.CreatedAt.IsZero() {
		k.CreatedAt = s.now().UTC()
	}
	err := s.insertKey(ctx, s.db, k)
	if err != nil {
		return APIKey{}, conflictOr(err)
	}
	k.CreatedAt = fromMicros(micros(k.CreatedAt))
	return k, nil
}

func (s *Store) insertKey(ctx context.Context, q querier, k APIKey) error {
	var revoked any
	if k.Revoked() {
		revoked = micros(k.RevokedAt)
	}
	var expires any
	if !k.ExpiresAt.IsZero() {
		expires = micros(k.ExpiresAt)
	}
	_, err := s.exec(ctx, q, `INSERT INTO api_keys (id, team_id, name, prefix, hash, admin, created_at, revoked_at, scopes, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.TeamID, k.Name, k.Prefix, k.Hash, boolInt(k.Admin), micros(k.CreatedAt), revoked, strings.Join(k.Scopes, ","), expires)
	return err
}

const keyCols = `id, team_id, name, prefix, hash, admin, created_at, revoked_at, scopes, expires_at`

var scanKey = scanFields(func(k *APIKey) []any {
	return []any{&k.ID, &k.TeamID, &k.Name, &k.Prefix, &k.Hash, boolCol(&k.Admin), timeCol(&k.CreatedAt), timeCol(&k.RevokedAt),
		listCol(&k.Scopes), timeCol(&k.ExpiresAt)}
})

// listCol scans a comma-separated TEXT column into a list (nil for "").
func listCol(l *[]string) sql.Scanner { return (*commaList)(l) }

type commaList []string

func (l *commaList) Scan(src any) error {
	var n sql.NullString
	if err := n.Scan(src); err != nil {
		return err
	}
	*l = nil
	if n.String != "" {
		*l = strings.Split(n.String, ",")
	}
	return nil
}

func (s *Store) keys(ctx context.Context, query string, args ...any) ([]APIKey, error) {
	return queryAll(ctx, s, s.db, query, scanKey, args...)
}

// KeysByPrefix returns every key (revoked ones too) whose display prefix is prefix; the caller
// compares hashes in constant time.
func (s *Store) KeysByPrefix(ctx context.Context, prefix string) ([]APIKey, error) {
	return s.keys(ctx, `SELECT `+keyCols+` FROM api_keys WHERE prefix = ?`, prefix)
}

// ListKeys returns a team's keys, oldest first, revoked ones included.
func (s *Store) ListKeys(ctx context.Context, teamID string) ([]APIKey, error) {
	return s.keys(ctx, `SELECT `+keyCols+` FROM api_keys WHERE team_id = ? ORDER BY created_at, id`, teamID)
}

// GetKey returns a team's key by id (ErrNotFound for another team's key).
func (s *Store) GetKey(ctx context.Context, teamID, id string) (APIKey, error) {
	return queryOne(ctx, s, `SELECT `+keyCols+` FROM api_keys WHERE team_id = ? AND id = ?`, scanKey, teamID, id)
}

// RevokeKey marks a team's key revoked. Revoking a revoked key is a no-op; another team's key is
// ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, teamID, id string) error {
	res, err := s.exec(ctx, s.db, `UPDATE api_keys SET revoked_at = ? WHERE team_id = ? AND id = ? AND revoked_at IS NULL`,
		micros(s.now()), teamID, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.GetKey(ctx, teamID, id); err != nil {
			return err
		}
	}
	return nil
}

// CountKeys counts all keys in the store (revoked too): zero means a fresh install.
func (s *Store) CountKeys(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n)
	return n, err
}

// teamsSchema is the teams and API keys tables' part of each migration.
var teamsSchema = []schemaStep{
	{1, []string{
		`CREATE TABLE teams (
			id         TEXT PRIMARY KEY,
			name       TEXT NOT NULL UNIQUE,
			created_at BIGINT NOT NULL
		)`,
		`CREATE TABLE api_keys (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			name       TEXT NOT NULL DEFAULT '',
			prefix     TEXT NOT NULL,
			hash       TEXT NOT NULL,
			admin      INTEGER NOT NULL DEFAULT 0,
			created_at BIGINT NOT NULL,
			revoked_at BIGINT
		)`,
		`CREATE INDEX api_keys_prefix ON api_keys (prefix)`,
		`CREATE INDEX api_keys_team ON api_keys (team_id, created_at)`,
	}},
	{6, []string{
		`ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE api_keys ADD COLUMN expires_at BIGINT`,
	}},
}
