package store

import (
	"context"
	"time"
)

// Database is a team's managed PostgreSQL database (internal/database): a sandbox of the
// postgres template (SandboxID) with its owner role and database. Password is the owner's
// password in sealed form (internal/sealed), kept for the HTTP query broker; it is never answered.
type Database struct {
	ID                  string
	TeamID              string
	Name                string
	Version             string
	VCPUs               int64
	MemoryMiB           int64
	StorageGiB          int64
	Extensions          []string
	SuspendAfterSeconds int64
	SandboxID           string
	Owner               string
	DBName              string
	Password            string
	State               string
	ParentID            string // a branch's parent database
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

const databaseCols = `id, team_id, name, version, vcpus, memory_mib, storage_gib, extensions, suspend_after_seconds,
	sandbox_id, owner, db_name, password, state, parent_id, created_at, updated_at`

var scanDatabase = scanFields(func(d *Database) []any {
	return []any{&d.ID, &d.TeamID, &d.Name, &d.Version, &d.VCPUs, &d.MemoryMiB, &d.StorageGiB, jsonCol(&d.Extensions),
		&d.SuspendAfterSeconds, &d.SandboxID, &d.Owner, &d.DBName, &d.Password, &d.State, &d.ParentID, timeCol(&d.CreatedAt), timeCol(&d.UpdatedAt)}
})

// CreateDatabase records a new database (created and updated now); a name the team already
// uses is ErrConflict.
func (s *Store) CreateDatabase(ctx context.Context, d Database) (Database, error) {
	d.CreatedAt = fromMicros(micros(s.now().UTC()))
	d.UpdatedAt = d.CreatedAt
	if d.Extensions == nil {
		d.Extensions = []string{}
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO databases (`+databaseCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.ID, d.TeamID, d.Name, d.Version, d.VCPUs, d.MemoryMiB, d.StorageGiB, jsonText(d.Extensions), d.SuspendAfterSeconds,
		d.SandboxID, d.Owner, d.DBName, d.Password, d.State, d.ParentID, micros(d.CreatedAt), micros(d.UpdatedAt))
	if err != nil {
		return Database{}, conflictOr(err)
	}
	return d, nil
}

// GetDatabase returns a database of any team (the router and broker: the id is the address).
func (s *Store) GetDatabase(ctx context.Context, id string) (Database, error) {
	return queryOne(ctx, s, `SELECT `+databaseCols+` FROM databases WHERE id = ?`, scanDatabase, id)
}

// GetTeamDatabase returns teamID's database id; another team's is ErrNotFound like a missing one.
func (s *Store) GetTeamDatabase(ctx context.Context, teamID, id string) (Database, error) {
	return queryOne(ctx, s, `SELECT `+databaseCols+` FROM databases WHERE id = ? AND team_id = ?`, scanDatabase, id, teamID)
}

// GetTeamDatabaseByName returns teamID's database called name.
func (s *Store) GetTeamDatabaseByName(ctx context.Context, teamID, name string) (Database, error) {
	return queryOne(ctx, s, `SELECT `+databaseCols+` FROM databases WHERE team_id = ? AND name = ?`, scanDatabase, teamID, name)
}

// ListTeamDatabases returns a team's databases, newest first.
func (s *Store) ListTeamDatabases(ctx context.Context, teamID string) ([]Database, error) {
	return queryAll(ctx, s, s.db, `SELECT `+databaseCols+` FROM databases WHERE team_id = ? ORDER BY created_at DESC, id DESC`,
		scanDatabase, teamID)
}

// ListAllDatabases returns every team's databases (the backup schedule's work list).
func (s *Store) ListAllDatabases(ctx context.Context) ([]Database, error) {
	return queryAll(ctx, s, s.db, `SELECT `+databaseCols+` FROM databases ORDER BY id`, scanDatabase)
}

// ListSuspendableDatabases returns every team's databases whose suspend_after_seconds is set.
func (s *Store) ListSuspendableDatabases(ctx context.Context) ([]Database, error) {
	return queryAll(ctx, s, s.db, `SELECT `+databaseCols+` FROM databases WHERE suspend_after_seconds > 0 ORDER BY id`, scanDatabase)
}

// ListDatabasesWithDeadVM returns every team's databases whose VM has died (its sandbox failed or
// was killed), to be given a new one (internal/database, heal.go).
func (s *Store) ListDatabasesWithDeadVM(ctx context.Context) ([]Database, error) {
	return queryAll(ctx, s, s.db, `SELECT `+prefixCols("d.", databaseCols)+` FROM databases d JOIN sandboxes sb ON sb.id = d.sandbox_id
		WHERE sb.state IN (?, ?) ORDER BY d.id`, scanDatabase, StateError, StateKilled)
}

// SetDatabaseSandbox moves database id from its VM was to its VM now; ErrConflict when its VM is
// no longer was (another replica moved it first), ErrNotFound when there is no such database.
func (s *Store) SetDatabaseSandbox(ctx context.Context, id, was, now string) error {
	res, err := s.exec(ctx, s.db, `UPDATE databases SET sandbox_id = ?, updated_at = ? WHERE id = ? AND sandbox_id = ?`,
		now, micros(s.now().UTC()), id, was)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.GetDatabase(ctx, id); err != nil {
			return err
		}
		return ErrConflict
	}
	return nil
}

// SetDatabasePassword replaces teamID's database's sealed password.
func (s *Store) SetDatabasePassword(ctx context.Context, teamID, id, sealed string) error {
	res, err := s.exec(ctx, s.db, `UPDATE databases SET password = ?, updated_at = ? WHERE id = ? AND team_id = ?`,
		sealed, micros(s.now().UTC()), id, teamID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// DeleteDatabase deletes teamID's database (ErrNotFound when it has none such).
func (s *Store) DeleteDatabase(ctx context.Context, teamID, id string) error {
	return s.deleteWithChildren(ctx, "databases", teamID, id, "")
}

// databasesSchema is the databases table's part of each migration.
var databasesSchema = []schemaStep{
	{14, []string{
		// password: the owner's password sealed (internal/sealed), for the query broker.
		`CREATE TABLE databases (
			id                    TEXT PRIMARY KEY,
			team_id               TEXT NOT NULL REFERENCES teams(id),
			name                  TEXT NOT NULL,
			version               TEXT NOT NULL,
			vcpus                 BIGINT NOT NULL,
			memory_mib            BIGINT NOT NULL,
			storage_gib           BIGINT NOT NULL,
			extensions            TEXT NOT NULL,
			suspend_after_seconds BIGINT NOT NULL,
			sandbox_id            TEXT NOT NULL,
			owner                 TEXT NOT NULL,
			db_name               TEXT NOT NULL,
			password              TEXT NOT NULL,
			state                 TEXT NOT NULL,
			parent_id             TEXT NOT NULL DEFAULT '',
			created_at            BIGINT NOT NULL,
			updated_at            BIGINT NOT NULL,
			UNIQUE (team_id, name)
		)`,
	}},
	{27, []string{
		// The killed-sandbox prune keeps a database's sandbox.
		`CREATE INDEX databases_sandbox ON databases (sandbox_id)`,
	}},
}
