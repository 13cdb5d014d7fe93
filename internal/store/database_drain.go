package store

import (
	"context"
	"time"
)

// The WAL drain lease (internal/database): one server replica at a time moves a database's
// archived WAL from its VM to the blob store. A replica claims a database's lease before a drain
// (compare-and-set: free, lapsed, or already its own), renews it while the drain lasts and lets
// it go after; a replica that dies mid-drain stops holding it when the lease lapses.

var databaseDrainSchema = []schemaStep{
	// 25 is a number reserved by work landing beside this one (a placeholder, so that versions
	// have no gap; the lead renumbers on merge).
	{25, []string{`SELECT 1`}},
	{26, []string{
		`ALTER TABLE databases ADD COLUMN wal_drain_holder TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE databases ADD COLUMN wal_drain_until BIGINT NOT NULL DEFAULT 0`,
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
