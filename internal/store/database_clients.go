package store

import (
	"context"
	"database/sql"
	"time"
)

// Client connections to managed databases across server replicas (internal/database), so no
// replica suspends a database another one has clients on, or suspends it earlier than its last
// client elsewhere allows: each replica reports the databases it has clients on now (a row per
// database and replica, renewed every pass, gone when its clients are; a replica that stops
// reporting — it died, and its connections with it — stops counting once its rows are stale) and
// bumps a database's last_client_at when a client of it connects or leaves.

var databaseClientsSchema = []schemaStep{
	{22, []string{
		`CREATE TABLE database_clients (
			database_id TEXT NOT NULL,
			replica     TEXT NOT NULL,
			open        BIGINT NOT NULL,
			reported_at BIGINT NOT NULL,
			PRIMARY KEY (database_id, replica)
		)`,
		`ALTER TABLE databases ADD COLUMN last_client_at BIGINT NOT NULL DEFAULT 0`,
		// Cancel keys postgres handed the router's connections, by hash (internal/dbrouter), so a
		// cancel request reaches its database through any replica.
		`CREATE TABLE database_cancel_keys (
			key_hash    TEXT NOT NULL,
			database_id TEXT NOT NULL,
			pooler      INTEGER NOT NULL,
			created_at  BIGINT NOT NULL,
			PRIMARY KEY (key_hash, database_id, pooler)
		)`,
		`CREATE INDEX database_cancel_keys_created ON database_cancel_keys (created_at)`,
	}},
}

// PutCancelKey records that the cancel key hashed as hash leads to database id (or its pooler).
func (s *Store) PutCancelKey(ctx context.Context, hash, id string, pooler bool) error {
	_, err := s.exec(ctx, s.db, `INSERT INTO database_cancel_keys (key_hash, database_id, pooler, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (key_hash, database_id, pooler) DO UPDATE SET created_at = excluded.created_at`, hash, id, boolInt(pooler), micros(s.now()))
	return err
}

// CancelKeyTargets lists where the cancel key hashed as hash leads: database id and pooler.
func (s *Store) CancelKeyTargets(ctx context.Context, hash string) ([]DatabaseTarget, error) {
	return queryAll(ctx, s, s.db, `SELECT database_id, pooler FROM database_cancel_keys WHERE key_hash = ? ORDER BY database_id, pooler`,
		func(sc scanner) (DatabaseTarget, error) {
			var t DatabaseTarget
			var pooler int64
			err := sc.Scan(&t.ID, &pooler)
			t.Pooler = pooler != 0
			return t, err
		}, hash)
}

// DatabaseTarget is a database's postgres, or its pooler.
type DatabaseTarget struct {
	ID     string
	Pooler bool
}

// DeleteCancelKey forgets a cancel key (its connection ended).
func (s *Store) DeleteCancelKey(ctx context.Context, hash, id string, pooler bool) error {
	_, err := s.exec(ctx, s.db, `DELETE FROM database_cancel_keys WHERE key_hash = ? AND database_id = ? AND pooler = ?`, hash, id, boolInt(pooler))
	return err
}

// PruneCancelKeys deletes cancel keys recorded before cutoff (their replica died without deleting
// them; a connection that old cannot be cancelled through another replica) and returns how many.
func (s *Store) PruneCancelKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM database_cancel_keys WHERE created_at < ?`, micros(cutoff))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ReportDatabaseClients records, as of at, that replica has open[id] clients on each database id
// (none: its row goes), raises each database's last_client_at to lastActive[id], and deletes
// every replica's rows reported before stale.
func (s *Store) ReportDatabaseClients(ctx context.Context, replica string, at time.Time, open map[string]int, lastActive map[string]time.Time, stale time.Time) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for id, n := range open {
			var err error
			if n > 0 {
				_, err = s.exec(ctx, tx, `INSERT INTO database_clients (database_id, replica, open, reported_at) VALUES (?, ?, ?, ?)
					ON CONFLICT (database_id, replica) DO UPDATE SET open = excluded.open, reported_at = excluded.reported_at`,
					id, replica, n, micros(at))
			} else {
				_, err = s.exec(ctx, tx, `DELETE FROM database_clients WHERE database_id = ? AND replica = ?`, id, replica)
			}
			if err != nil {
				return err
			}
		}
		for id, t := range lastActive {
			if _, err := s.exec(ctx, tx, `UPDATE databases SET last_client_at = ? WHERE id = ? AND last_client_at < ?`,
				micros(t), id, micros(t)); err != nil {
				return err
			}
		}
		_, err := s.exec(ctx, tx, `DELETE FROM database_clients WHERE reported_at < ?`, micros(stale))
		return err
	})
}

// DatabaseClientsElsewhere counts, per database, the clients every replica but replica reported
// at or after since.
func (s *Store) DatabaseClientsElsewhere(ctx context.Context, replica string, since time.Time) (map[string]int, error) {
	type row struct {
		id   string
		open int
	}
	rows, err := queryAll(ctx, s, s.db, `SELECT database_id, SUM(open) FROM database_clients WHERE replica <> ? AND reported_at >= ?
		GROUP BY database_id`, func(sc scanner) (row, error) {
		var r row
		return r, sc.Scan(&r.id, &r.open)
	}, replica, micros(since))
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.id] = r.open
	}
	return out, err
}

// DatabaseLastClients returns when a client last connected to or left each database that has had
// one (last_client_at).
func (s *Store) DatabaseLastClients(ctx context.Context) (map[string]time.Time, error) {
	type row struct {
		id string
		at int64
	}
	rows, err := queryAll(ctx, s, s.db, `SELECT id, last_client_at FROM databases WHERE last_client_at > 0`, func(sc scanner) (row, error) {
		var r row
		return r, sc.Scan(&r.id, &r.at)
	})
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		out[r.id] = fromMicros(r.at)
	}
	return out, err
}
