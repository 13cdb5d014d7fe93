package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"
)

// Snapshot is the record of a snapshot object: a sandbox's memory and disk at one instant, kept
// on the host that took it (a sandbox created from it is placed there).
type Snapshot struct {
	ID        string
	TeamID    string
	SandboxID string
	HostID    string
	Template  string
	SizeBytes int64
	CreatedAt time.Time
	Deleted   bool
	DeletedAt time.Time
}

const snapshotCols = `id, team_id, sandbox_id, host_id, template, size_bytes, created_at, deleted, deleted_at`

func scanSnapshot(sc interface{ Scan(...any) error }) (Snapshot, error) {
	var sn Snapshot
	var c int64
	var del int
	var delAt sql.NullInt64
	if err := sc.Scan(&sn.ID, &sn.TeamID, &sn.SandboxID, &sn.HostID, &sn.Template, &sn.SizeBytes, &c, &del, &delAt); err != nil {
		return Snapshot{}, err
	}
	sn.CreatedAt = fromMicros(c)
	sn.Deleted = del != 0
	sn.DeletedAt = nullMicros(delAt)
	return sn, nil
}

// CreateSnapshot records a snapshot a host has taken. A duplicate id is ErrConflict.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot) (Snapshot, error) {
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = s.now().UTC()
	}
	sn.CreatedAt = fromMicros(micros(sn.CreatedAt))
	sn.Deleted, sn.DeletedAt = false, time.Time{}
	_, err := s.exec(ctx, s.db, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL)`,
		sn.ID, sn.TeamID, sn.SandboxID, sn.HostID, sn.Template, sn.SizeBytes, micros(sn.CreatedAt))
	if isUnique(err) {
		return Snapshot{}, ErrConflict
	}
	if err != nil {
		return Snapshot{}, err
	}
	return sn, nil
}

// GetSnapshot returns a snapshot of any team, deleted or not (internal callers).
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.queryRow(ctx, s.db, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, ErrNotFound
	}
	return sn, err
}

// GetTeamSnapshot returns a snapshot only if it belongs to teamID and is not deleted: another
// team's snapshot, or a deleted one, is ErrNotFound exactly like a missing one.
func (s *Store) GetTeamSnapshot(ctx context.Context, teamID, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.queryRow(ctx, s.db, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ? AND team_id = ? AND deleted = 0`, id, teamID))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, ErrNotFound
	}
	return sn, err
}

// SnapshotFilter selects snapshots for ListSnapshots.
type SnapshotFilter struct {
	TeamID    string // required
	SandboxID string // "" = snapshots of every sandbox
	Limit     int    // <= 0 means 100
	Cursor    string // from a previous page's next cursor
}

// ListSnapshots returns one page of a team's snapshots that are not deleted, newest first, and
// the cursor of the next page ("" at the end).
func (s *Store) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT ` + snapshotCols + ` FROM snapshots WHERE team_id = ? AND deleted = 0`
	args := []any{f.TeamID}
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
	}
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, at, at, id)
	}
	q += ` ORDER BY created_at DESC, id DESC`
	return queryPage(ctx, s, q, args, limit, scanSnapshot, func(sn Snapshot) (time.Time, string) { return sn.CreatedAt, sn.ID })
}

// DeleteSnapshot marks a team's snapshot deleted. Deleting a deleted one again is fine; another
// team's (or a missing) one is ErrNotFound.
func (s *Store) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	res, err := s.exec(ctx, s.db, `UPDATE snapshots SET deleted = 1, deleted_at = ? WHERE id = ? AND team_id = ? AND deleted = 0`,
		micros(s.now()), id, teamID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	err = s.queryRow(ctx, s.db, `SELECT 1 FROM snapshots WHERE id = ? AND team_id = ?`, id, teamID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// DeletedSnapshots returns which of ids are recorded deleted (a host's reconcile deletes those it
// still holds).
func (s *Store) DeletedSnapshots(ctx context.Context, ids []string) (map[string]bool, error) {
	return s.deletedIn(ctx, "snapshots", ids)
}

// deletedIn returns which of ids are rows of table marked deleted, in batches of 500 (table is
// one of ours, never caller input).
func (s *Store) deletedIn(ctx context.Context, table string, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		batch := ids[:n]
		ids = ids[n:]
		args := make([]any, len(batch))
		for i, id := range batch {
			args[i] = id
		}
		rows, err := s.query(ctx, s.db, `SELECT id FROM `+table+` WHERE deleted = 1 AND id IN (?`+strings.Repeat(`, ?`, n-1)+`)`, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CountSnapshots returns how many snapshots are not deleted (for /metrics).
func (s *Store) CountSnapshots(ctx context.Context) (int64, error) {
	var n int64
	err := s.queryRow(ctx, s.db, `SELECT COUNT(*) FROM snapshots WHERE deleted = 0`).Scan(&n)
	return n, err
}

// snapshotsSchema is the snapshots table's part of each migration.
var snapshotsSchema = []schemaStep{
	{2, []string{
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
}
