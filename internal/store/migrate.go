package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migration is one schema step. Its statements must be valid on both SQLite and PostgreSQL:
// stick to TEXT, INTEGER and BIGINT columns, plain indexes and foreign keys.
type migration struct {
	version int
	name    string
	stmts   []string
}

// migrations is append-only: never edit a released step, add a new one.
var migrations = []migration{
	{1, "initial schema", []string{
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
		// token is the host agent's bearer secret: the control plane must present it, so it is
		// kept as given (unlike API keys, which are only ever verified).
		`CREATE TABLE hosts (
			id             TEXT PRIMARY KEY,
			url            TEXT NOT NULL,
			token          TEXT NOT NULL DEFAULT '',
			state          TEXT NOT NULL,
			accel          TEXT NOT NULL DEFAULT '',
			mem_mib_total  BIGINT NOT NULL DEFAULT 0,
			mem_mib_free   BIGINT NOT NULL DEFAULT 0,
			slots_total    BIGINT NOT NULL DEFAULT 0,
			slots_used     BIGINT NOT NULL DEFAULT 0,
			templates      TEXT NOT NULL DEFAULT '[]',
			baked          TEXT NOT NULL DEFAULT '[]',
			registered_at  BIGINT NOT NULL,
			last_heartbeat BIGINT NOT NULL
		)`,
		`CREATE TABLE templates (
			name        TEXT PRIMARY KEY,
			description TEXT NOT NULL DEFAULT '',
			vcpus       INTEGER NOT NULL DEFAULT 0,
			memory_mib  INTEGER NOT NULL DEFAULT 0,
			disk_mib    INTEGER NOT NULL DEFAULT 0,
			created_at  BIGINT NOT NULL,
			updated_at  BIGINT NOT NULL
		)`,
		`CREATE TABLE sandboxes (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			template   TEXT NOT NULL,
			state      TEXT NOT NULL,
			host_id    TEXT NOT NULL DEFAULT '',
			metadata   TEXT NOT NULL DEFAULT '{}',
			error      TEXT NOT NULL DEFAULT '',
			created_at BIGINT NOT NULL,
			expires_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL
		)`,
		`CREATE INDEX sandboxes_team_created ON sandboxes (team_id, created_at, id)`,
		`CREATE INDEX sandboxes_state_expires ON sandboxes (state, expires_at)`,
		`CREATE INDEX sandboxes_host_state ON sandboxes (host_id, state)`,
		// Metadata is also kept as rows so `metadata.k=v` filters are one portable, indexed
		// query on both backends (the JSON column is what reads return).
		`CREATE TABLE sandbox_metadata (
			sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
			mkey       TEXT NOT NULL,
			mvalue     TEXT NOT NULL,
			PRIMARY KEY (sandbox_id, mkey)
		)`,
		`CREATE INDEX sandbox_metadata_kv ON sandbox_metadata (mkey, mvalue)`,
	}},
	{2, "snapshots, sandbox lineage and ttl policy", []string{
		// Where a sandbox's memory came from (a fork's parent, a snapshot), and the ttl_seconds
		// it was last given (children of a fork get the parent's; 0 means the server default).
		`ALTER TABLE sandboxes ADD COLUMN fork_of TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sandboxes ADD COLUMN ttl_seconds BIGINT NOT NULL DEFAULT 0`,
		// A snapshot lives on the host that took it (host_id). Deleting one keeps the row
		// (deleted = 1): a host that missed the delete is told again at its next reconcile.
		`CREATE TABLE snapshots (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			sandbox_id TEXT NOT NULL,
			host_id    TEXT NOT NULL,
			template   TEXT NOT NULL,
			size_bytes BIGINT NOT NULL DEFAULT 0,
			created_at BIGINT NOT NULL,
			deleted    INTEGER NOT NULL DEFAULT 0,
			deleted_at BIGINT
		)`,
		`CREATE INDEX snapshots_team_created ON snapshots (team_id, deleted, created_at, id)`,
	}},
	{3, "volumes and their attachments", []string{
		// A volume lives on the host that made it (host_id). Deleting one keeps the row
		// (deleted = 1): a host that missed the delete is told again at its next reconcile.
		// updated_at is also touched by every attach, which serialises attaches of one volume.
		`CREATE TABLE volumes (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			name       TEXT NOT NULL DEFAULT '',
			size_mib   BIGINT NOT NULL,
			host_id    TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			deleted    INTEGER NOT NULL DEFAULT 0,
			deleted_at BIGINT
		)`,
		`CREATE INDEX volumes_team_created ON volumes (team_id, deleted, created_at, id)`,
		// The volumes a sandbox was created with. A row holds its volume while the sandbox is
		// running, hibernated or in error (its host still has it); a killed or lost sandbox's
		// rows are history and hold nothing.
		`CREATE TABLE sandbox_volumes (
			sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
			volume_id  TEXT NOT NULL REFERENCES volumes(id),
			mount_path TEXT NOT NULL,
			read_only  INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (sandbox_id, volume_id)
		)`,
		`CREATE INDEX sandbox_volumes_volume ON sandbox_volumes (volume_id)`,
	}},
	{4, "team templates, catalog aliases and metadata", []string{
		// What hosts report about catalog templates beyond their sizes (JSON).
		`ALTER TABLE templates ADD COLUMN aliases TEXT NOT NULL DEFAULT '[]'`,
		`ALTER TABLE templates ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'`,
		// A template a team built through the API. It lives on one host (host_id) under
		// agent_name, which is unique across teams; name is what the team calls it. spec is the
		// spec as the team sent it (JSON), kept so other builds can start from it.
		`CREATE TABLE team_templates (
			team_id     TEXT NOT NULL REFERENCES teams(id),
			name        TEXT NOT NULL,
			agent_name  TEXT NOT NULL UNIQUE,
			host_id     TEXT NOT NULL,
			spec        TEXT NOT NULL,
			description TEXT NOT NULL DEFAULT '',
			vcpus       INTEGER NOT NULL DEFAULT 0,
			memory_mib  INTEGER NOT NULL DEFAULT 0,
			disk_mib    INTEGER NOT NULL DEFAULT 0,
			size_bytes  BIGINT NOT NULL DEFAULT 0,
			bake_ms     BIGINT NOT NULL DEFAULT 0,
			created_at  BIGINT NOT NULL,
			updated_at  BIGINT NOT NULL,
			PRIMARY KEY (team_id, name)
		)`,
	}},
}

// SchemaVersion is the newest migration this binary knows.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrate applies every missing migration in one transaction each, recording it in
// schema_migrations. Replicas starting together serialise: on PostgreSQL behind a session
// advisory lock held for the whole run; on SQLite behind the write lock that _txlock=immediate
// takes at BEGIN.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer conn.Close()
	if s.dialect == Postgres {
		// An arbitrary constant shared by every replica.
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(7074636974616)`); err != nil {
			return fmt.Errorf("store: migration lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7074636974616)`)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return fmt.Errorf("store: create schema_migrations: %w", err)
	}
	for _, m := range migrations {
		if err := s.applyMigration(ctx, conn, m); err != nil {
			return fmt.Errorf("store: migration %d (%s): %w", m.version, m.name, err)
		}
	}
	// A database written by a newer binary may have a schema this one does not understand.
	var newest sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if newest.Valid && int(newest.Int64) > SchemaVersion() {
		return fmt.Errorf("store: database schema version %d is newer than this binary's %d: upgrade pandastack", newest.Int64, SchemaVersion())
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, conn *sql.Conn, m migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	for _, stmt := range m.stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%w\n%s", err, stmt)
		}
	}
	if _, err := s.exec(ctx, tx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, micros(s.now())); err != nil {
		return err
	}
	return tx.Commit()
}

// AppliedMigrations lists the versions recorded in schema_migrations, oldest first.
func (s *Store) AppliedMigrations(ctx context.Context) ([]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
