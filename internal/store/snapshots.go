package store

import (
	"context"
	"time"
)

// Snapshot is the record of a snapshot object: a sandbox's memory and disk at one instant, kept
// on the host that took it and, when Published, in the blob store too (a sandbox created from it
// is placed on its host if it can be, else, when published, on any host: that host pulls it).
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
	Published bool
	// Owner is the service whose snapshot it is (its sandbox's Owner), "" for the team's own:
	// owned ones stay out of the team's plain list.
	Owner string
}

const snapshotCols = `id, team_id, sandbox_id, host_id, template, size_bytes, created_at, deleted, deleted_at, published, owner`

var scanSnapshot = scanFields(func(sn *Snapshot) []any {
	return []any{&sn.ID, &sn.TeamID, &sn.SandboxID, &sn.HostID, &sn.Template, &sn.SizeBytes,
		timeCol(&sn.CreatedAt), boolCol(&sn.Deleted), timeCol(&sn.DeletedAt), boolCol(&sn.Published), &sn.Owner}
})

// CreateSnapshot records a snapshot a host has taken. A duplicate id is ErrConflict.
func (s *Store) CreateSnapshot(ctx context.Context, sn Snapshot) (Snapshot, error) {
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = s.now().UTC()
	}
	sn.CreatedAt = fromMicros(micros(sn.CreatedAt))
	sn.Deleted, sn.DeletedAt = false, time.Time{}
	_, err := s.exec(ctx, s.db, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)`,
		sn.ID, sn.TeamID, sn.SandboxID, sn.HostID, sn.Template, sn.SizeBytes, micros(sn.CreatedAt), boolInt(sn.Published), sn.Owner)
	if err != nil {
		return Snapshot{}, conflictOr(err)
	}
	return sn, nil
}

// GetSnapshot returns a snapshot of any team, deleted or not (internal callers).
func (s *Store) GetSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return queryOne(ctx, s, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`, scanSnapshot, id)
}

// GetTeamSnapshot returns a snapshot only if it belongs to teamID and is not deleted: another
// team's snapshot, or a deleted one, is ErrNotFound exactly like a missing one.
func (s *Store) GetTeamSnapshot(ctx context.Context, teamID, id string) (Snapshot, error) {
	return queryOne(ctx, s, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ? AND team_id = ? AND deleted = 0`, scanSnapshot, id, teamID)
}

// DeletedSnapshots returns which of ids are recorded deleted (a host's reconcile deletes those it
// still holds).
func (s *Store) DeletedSnapshots(ctx context.Context, ids []string) (map[string]bool, error) {
	return s.deletedIn(ctx, "snapshots", ids)
}

// CountSnapshots returns how many snapshots are not deleted (for /metrics).
func (s *Store) CountSnapshots(ctx context.Context) (int64, error) {
	return s.countLive(ctx, "snapshots")
}

// SnapshotFilter selects snapshots for ListSnapshots.
type SnapshotFilter struct {
	TeamID    string // required
	SandboxID string // "" = snapshots of every sandbox
	Limit     int    // <= 0 means 100
	Cursor    string // from a previous page's next cursor
	Unowned   bool   // only the team's own (Owner ""): the plain list
}

// ListSnapshots returns one page of a team's snapshots that are not deleted, newest first, and
// the cursor of the next page ("" at the end).
func (s *Store) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, string, error) {
	lq := listQuery{sel: `SELECT ` + snapshotCols + ` FROM snapshots`, where: []string{`team_id = ?`, `deleted = 0`}, args: []any{f.TeamID}}
	if f.SandboxID != "" {
		lq.where = append(lq.where, `sandbox_id = ?`)
		lq.args = append(lq.args, f.SandboxID)
	}
	if f.Unowned {
		lq.where = append(lq.where, `owner = ''`)
	}
	return queryPage(ctx, s, lq, f.Limit, f.Cursor, scanSnapshot, func(sn Snapshot) (time.Time, string) { return sn.CreatedAt, sn.ID })
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
	return s.ownedRow(ctx, "snapshots", teamID, id)
}

// snapshotsSchema is the snapshots table's part of each migration.
var snapshotsSchema = []schemaStep{
	{2, []string{
		// On the host that took it (host_id); deleted softly (see deletedIn).
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
	{15, []string{
		// In the blob store as well as on its host: any host can restore it.
		`ALTER TABLE snapshots ADD COLUMN published INTEGER NOT NULL DEFAULT 0`,
	}},
	{17, []string{
		// The control-plane service whose snapshot it is ('' : the team's own).
		`ALTER TABLE snapshots ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
	}},
	{27, []string{
		// The killed-sandbox prune keeps a sandbox whose snapshot is not deleted.
		`CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id) WHERE deleted = 0`,
	}},
}
