package store

import (
	"context"
	"time"
)

// Managed databases' background work (internal/database): the WAL drain lease, and the events of
// what no call does (backups, idle suspensions) for the events stream and webhooks.
//
// The WAL drain lease: one server replica at a time moves a database's
// archived WAL from its VM to the blob store. A replica claims a database's lease before a drain
// (compare-and-set: free, lapsed, or already its own), renews it while the drain lasts and lets
// it go after; a replica that dies mid-drain stops holding it when the lease lapses.

var databaseDrainSchema = []schemaStep{
	{26, []string{
		`ALTER TABLE databases ADD COLUMN wal_drain_holder TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE databases ADD COLUMN wal_drain_until BIGINT NOT NULL DEFAULT 0`,
		`CREATE TABLE database_events (
			id          TEXT PRIMARY KEY,
			team_id     TEXT NOT NULL,
			database_id TEXT NOT NULL,
			name        TEXT NOT NULL,
			type        TEXT NOT NULL,
			backup_id   TEXT NOT NULL DEFAULT '',
			cause       TEXT NOT NULL DEFAULT '',
			idle_secs   BIGINT NOT NULL DEFAULT 0,
			at          BIGINT NOT NULL
		)`,
		`CREATE INDEX database_events_team_at ON database_events (team_id, at)`,
	}},
}

// ClaimDatabaseDrain takes database id's WAL drain lease for holder until until if it is free or
// lapsed at now (or holder's already), and reports whether holder holds it.
func (s *Store) ClaimDatabaseDrain(ctx context.Context, id, holder string, now, until time.Time) (bool, error) {
	res, err := s.exec(ctx, s.db, `UPDATE databases SET wal_drain_holder = ?, wal_drain_until = ?
		WHERE id = ? AND (wal_drain_until < ? OR wal_drain_holder = ?)`, holder, micros(until), id, micros(now), holder)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// RenewDatabaseDrain extends holder's lease on database id's drain to until; ErrLeaseLost when
// holder no longer holds it.
func (s *Store) RenewDatabaseDrain(ctx context.Context, id, holder string, until time.Time) error {
	res, err := s.exec(ctx, s.db, `UPDATE databases SET wal_drain_until = ? WHERE id = ? AND wal_drain_holder = ?`, micros(until), id, holder)
	return held1(res, err)
}

// ReleaseDatabaseDrain lets holder's lease on database id's drain go (another replica may claim it).
func (s *Store) ReleaseDatabaseDrain(ctx context.Context, id, holder string) error {
	_, err := s.exec(ctx, s.db, `UPDATE databases SET wal_drain_holder = '', wal_drain_until = 0 WHERE id = ? AND wal_drain_holder = ?`, id, holder)
	return err
}

// DatabaseEvent is something that happened to a database without a call saying so: a backup
// taken (BackupID; Trigger: creation, schedule or request) or an idle suspension (IdleSeconds).
type DatabaseEvent struct {
	ID          string
	TeamID      string
	DatabaseID  string
	Name        string // the database's name
	Type        string
	BackupID    string
	Trigger     string
	IdleSeconds int64
	At          time.Time
}

// RecordDatabaseEvent records e (at now when e.At is zero).
func (s *Store) RecordDatabaseEvent(ctx context.Context, e DatabaseEvent) (DatabaseEvent, error) {
	if e.At.IsZero() {
		e.At = s.now().UTC()
	}
	e.At = fromMicros(micros(e.At))
	_, err := s.exec(ctx, s.db, `INSERT INTO database_events (id, team_id, database_id, name, type, backup_id, cause, idle_secs, at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, e.ID, e.TeamID, e.DatabaseID, e.Name, e.Type, e.BackupID, e.Trigger, e.IdleSeconds, micros(e.At))
	return e, err
}

// DatabaseEventsSince returns teamID's database events after since, oldest first, at most limit.
func (s *Store) DatabaseEventsSince(ctx context.Context, teamID string, since time.Time, limit int) ([]DatabaseEvent, error) {
	return queryAll(ctx, s, s.db, `SELECT id, team_id, database_id, name, type, backup_id, cause, idle_secs, at
		FROM database_events WHERE team_id = ? AND at > ? ORDER BY at, id LIMIT ?`,
		scanFields(func(e *DatabaseEvent) []any {
			return []any{&e.ID, &e.TeamID, &e.DatabaseID, &e.Name, &e.Type, &e.BackupID, &e.Trigger, &e.IdleSeconds, timeCol(&e.At)}
		}), teamID, micros(since), limit)
}

// PruneDatabaseEvents deletes the database events before before.
func (s *Store) PruneDatabaseEvents(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM database_events WHERE at < ?`, micros(before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
