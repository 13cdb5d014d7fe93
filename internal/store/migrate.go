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

// schemaStep is one domain's statements in migration version. Each domain file (teams.go,
// hosts.go, …) declares its own steps; a migration is every domain's statements of that version.
type schemaStep struct {
	version int
	stmts   []string
}

// versionNames names each migration (recorded in schema_migrations). Migrations are append-only:
// never edit a released step (TestMigrationsUnchanged holds their checksums), add a new version.
var versionNames = []string{
	1:  "initial schema",
	2:  "snapshots, sandbox lineage and ttl policy",
	3:  "volumes and their attachments",
	4:  "team templates, catalog aliases and metadata",
	5:  "catalog template sizes and bake times",
	6:  "audit log, scoped keys and team quotas",
	7:  "live sandboxes by expiry",
	8:  "private sandbox ports",
	9:  "quota holds",
	10: "functions and schedules",
	11: "async function runs' leases",
	12: "sandbox changes by team",
	13: "E2B facade's sandbox access tokens",
	14: "managed databases",
	15: "published snapshots and hibernated sandboxes, host drain",
	16: "apps and deployments",
	17: "sandboxes and snapshots owned by a service",
	18: "webhooks and their deliveries",
	19: "quotas on databases, apps, functions and snapshot sizes",
	20: "app deployments' leases",
	21: "E2B facade's restarted code contexts",
	22: "database clients per server replica",
	23: "app deployments' changes by team",
	24: "background processes' exits",
	25: "hosts' report fingerprints",
	26: "database WAL drain leases",
	27: "pruning killed sandboxes",
	28: "stopped sandboxes' slot credits",
	29: "volumes owned by a service",
	30: "live volumes owned by a service",
}

// migrations runs the domains' statements version by version; within a version, in this order
// (tables before the tables that reference them).
var migrations = assemble(teamsSchema, hostsSchema, catalogSchema, sandboxesSchema, snapshotsSchema,
	volumesSchema, teamTemplatesSchema, auditSchema, quotaSchema, quotaHoldsSchema, functionsSchema, schedulesSchema, e2bSchema,
	databasesSchema, databaseClientsSchema, databaseDrainSchema,
	appsSchema, webhooksSchema, processExitsSchema)

// assemble groups the domains' steps into migrations by version.
func assemble(domains ...[]schemaStep) []migration {
	out := make([]migration, 0, len(versionNames)-1)
	for v := 1; v < len(versionNames); v++ {
		m := migration{version: v, name: versionNames[v]}
		for _, steps := range domains {
			for _, st := range steps {
				if st.version == v {
					m.stmts = append(m.stmts, st.stmts...)
				}
			}
		}
		out = append(out, m)
	}
	return out
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
	return queryAll(ctx, s, s.db, `SELECT version FROM schema_migrations ORDER BY version`, scanOne[int])
}
