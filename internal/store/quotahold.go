package store

import (
	"context"
	"database/sql"
	"hash/fnv"
	"sync"
	"time"
)

// QuotaAmount is an amount of each thing a team's quota limits: what a call needs, what a
// team holds.
type QuotaAmount struct {
	Sandboxes, VCPUs, MemoryMiB, Volumes, VolumeMiB int64
	Databases, Apps, Functions, SnapshotMiB         int64
}

// Fields are a's amounts in the order of QuotaNames.
func (a *QuotaAmount) Fields() []*int64 {
	return []*int64{&a.Sandboxes, &a.VCPUs, &a.MemoryMiB, &a.Volumes, &a.VolumeMiB, &a.Databases, &a.Apps, &a.Functions, &a.SnapshotMiB}
}

// QuotaNames are the quotas' names on the wire, in the order of the Fields methods.
var QuotaNames = []string{"sandboxes", "vcpus", "memory_mib", "volumes", "volume_mib", "databases", "apps", "functions", "snapshot_mib"}

// A quota hold is use a call has claimed and not yet recorded: a create holds its sandbox's
// size from the quota check until the sandbox is in the store (or the create failed). The check
// counts recorded use and holds together under WithTeamLock, so two calls racing for a team's
// last slot cannot both pass. A hold whose holder died lapses at its expiry.

// WithTeamLock runs fn while holding the team's lock, shared by every replica on this
// database: on PostgreSQL a session advisory lock (let go if the holder's connection dies), on
// SQLite (one replica) this process's mutex. fn should be short: a check and a write.
func (s *Store) WithTeamLock(ctx context.Context, teamID string, fn func() error) error {
	mu, _ := s.teamLocks.LoadOrStore(teamID, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if s.dialect != Postgres {
		return fn()
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	h := fnv.New64a()
	h.Write([]byte("pandastack team quota " + teamID))
	key := int64(h.Sum64())
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key)
	return fn()
}

// HeldQuota is what a team's unexpired holds claim together.
func (s *Store) HeldQuota(ctx context.Context, teamID string) (QuotaAmount, error) {
	var h QuotaAmount
	err := s.queryRow(ctx, s.db, `SELECT COALESCE(SUM(sandboxes), 0), COALESCE(SUM(vcpus), 0), COALESCE(SUM(memory_mib), 0),
		COALESCE(SUM(volumes), 0), COALESCE(SUM(volume_mib), 0), COALESCE(SUM(databases), 0), COALESCE(SUM(apps), 0),
		COALESCE(SUM(functions), 0), COALESCE(SUM(snapshot_mib), 0) FROM quota_holds WHERE team_id = ? AND expires_at > ?`,
		teamID, micros(s.now())).Scan(&h.Sandboxes, &h.VCPUs, &h.MemoryMiB, &h.Volumes, &h.VolumeMiB,
		&h.Databases, &h.Apps, &h.Functions, &h.SnapshotMiB)
	return h, err
}

// AddQuotaHold records the hold id of a for the team until ttl from now, and drops the team's
// lapsed holds.
func (s *Store) AddQuotaHold(ctx context.Context, id, teamID string, a QuotaAmount, ttl time.Duration) error {
	now := s.now()
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `DELETE FROM quota_holds WHERE team_id = ? AND expires_at <= ?`, teamID, micros(now)); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, `INSERT INTO quota_holds (id, team_id, sandboxes, vcpus, memory_mib, volumes, volume_mib,
				databases, apps, functions, snapshot_mib, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, teamID, a.Sandboxes, a.VCPUs, a.MemoryMiB, a.Volumes, a.VolumeMiB,
			a.Databases, a.Apps, a.Functions, a.SnapshotMiB, micros(now.Add(ttl)))
		return err
	})
}

// ReleaseQuotaHold drops a hold (its use is recorded now, or the call failed). Releasing a
// hold that lapsed or was released is not an error.
func (s *Store) ReleaseQuotaHold(ctx context.Context, id string) error {
	_, err := s.exec(ctx, s.db, `DELETE FROM quota_holds WHERE id = ?`, id)
	return err
}

// quotaHoldsSchema is the quota holds' part of each migration.
var quotaHoldsSchema = []schemaStep{
	{9, []string{
		// One row a call in flight: what it holds of each quota, and when the hold lapses.
		`CREATE TABLE quota_holds (
			id TEXT PRIMARY KEY, team_id TEXT NOT NULL, expires_at BIGINT NOT NULL,
			sandboxes BIGINT NOT NULL DEFAULT 0, vcpus BIGINT NOT NULL DEFAULT 0, memory_mib BIGINT NOT NULL DEFAULT 0,
			volumes BIGINT NOT NULL DEFAULT 0, volume_mib BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX quota_holds_team ON quota_holds (team_id, expires_at)`,
	}},
	{19, []string{
		`ALTER TABLE quota_holds ADD COLUMN databases BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE quota_holds ADD COLUMN apps BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE quota_holds ADD COLUMN functions BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE quota_holds ADD COLUMN snapshot_mib BIGINT NOT NULL DEFAULT 0`,
	}},
}
