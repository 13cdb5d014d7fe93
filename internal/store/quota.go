package store

import (
	"context"
	"database/sql"
	"errors"
)

// QuotaOverride is a team's own limits, set by an operator over the server's defaults. A nil
// field keeps the default; 0 means no limit.
type QuotaOverride struct {
	Sandboxes *int64
	VCPUs     *int64
	MemoryMiB *int64
	Volumes   *int64
	VolumeMiB *int64
	Databases *int64
	Apps      *int64
	Functions *int64
	// SnapshotMiB limits the team's snapshots' sizes together.
	SnapshotMiB *int64
}

// Fields are o's limits in the order of QuotaNames.
func (o *QuotaOverride) Fields() []**int64 {
	return []**int64{&o.Sandboxes, &o.VCPUs, &o.MemoryMiB, &o.Volumes, &o.VolumeMiB, &o.Databases, &o.Apps, &o.Functions, &o.SnapshotMiB}
}

// GetQuotaOverride returns a team's override (every field nil when it has none).
func (s *Store) GetQuotaOverride(ctx context.Context, teamID string) (QuotaOverride, error) {
	var a, b, c, d, e, f, g, h, i sql.NullInt64
	err := s.queryRow(ctx, s.db, `SELECT sandboxes, vcpus, memory_mib, volumes, volume_mib, databases, apps, functions, snapshot_mib
		FROM team_quotas WHERE team_id = ?`, teamID).Scan(&a, &b, &c, &d, &e, &f, &g, &h, &i)
	if errors.Is(err, sql.ErrNoRows) {
		return QuotaOverride{}, nil
	}
	if err != nil {
		return QuotaOverride{}, err
	}
	return QuotaOverride{Sandboxes: nullPtr(a), VCPUs: nullPtr(b), MemoryMiB: nullPtr(c), Volumes: nullPtr(d), VolumeMiB: nullPtr(e),
		Databases: nullPtr(f), Apps: nullPtr(g), Functions: nullPtr(h), SnapshotMiB: nullPtr(i)}, nil
}

// SetQuotaOverride replaces a team's override; a missing team is ErrNotFound.
func (s *Store) SetQuotaOverride(ctx context.Context, teamID string, o QuotaOverride) error {
	if _, err := s.GetTeam(ctx, teamID); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO team_quotas (team_id, sandboxes, vcpus, memory_mib, volumes, volume_mib,
			databases, apps, functions, snapshot_mib, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (team_id) DO UPDATE SET sandboxes = excluded.sandboxes, vcpus = excluded.vcpus,
			memory_mib = excluded.memory_mib, volumes = excluded.volumes, volume_mib = excluded.volume_mib,
			databases = excluded.databases, apps = excluded.apps, functions = excluded.functions,
			snapshot_mib = excluded.snapshot_mib, updated_at = excluded.updated_at`,
		teamID, ptrArg(o.Sandboxes), ptrArg(o.VCPUs), ptrArg(o.MemoryMiB), ptrArg(o.Volumes), ptrArg(o.VolumeMiB),
		ptrArg(o.Databases), ptrArg(o.Apps), ptrArg(o.Functions), ptrArg(o.SnapshotMiB), micros(s.now()))
	return err
}

// LiveSandboxTemplates counts a team's running and hibernated sandboxes by recorded template
// name: what its quota use is computed from (a sandbox's size is its template's).
func (s *Store) LiveSandboxTemplates(ctx context.Context, teamID string) (map[string]int64, error) {
	type row struct {
		name string
		n    int64
	}
	rows, err := queryAll(ctx, s, s.db, `SELECT template, COUNT(*) FROM sandboxes WHERE team_id = ? AND state IN (?, ?) GROUP BY template`,
		scanFields(func(r *row) []any { return []any{&r.name, &r.n} }), teamID, StateRunning, StateHibernated)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.name] = r.n
	}
	return out, nil
}

// VolumeUse is how many live volumes of its own a team has and their sizes together (a service's
// volumes, a database's, are not counted: that service's quota covers them).
func (s *Store) VolumeUse(ctx context.Context, teamID string) (count, sizeMiB int64, err error) {
	err = s.queryRow(ctx, s.db, `SELECT COUNT(*), COALESCE(SUM(size_mib), 0) FROM volumes WHERE team_id = ? AND deleted = 0 AND owner = ''`,
		teamID).Scan(&count, &sizeMiB)
	return count, sizeMiB, err
}

// ServiceUse is how many databases, apps and functions a team has, and its live snapshots'
// sizes together (MiB, rounded up).
func (s *Store) ServiceUse(ctx context.Context, teamID string) (databases, apps, functions, snapshotMiB int64, err error) {
	err = s.queryRow(ctx, s.db, `SELECT
		(SELECT COUNT(*) FROM databases WHERE team_id = ?),
		(SELECT COUNT(*) FROM apps WHERE team_id = ?),
		(SELECT COUNT(*) FROM functions WHERE team_id = ?),
		(SELECT COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE team_id = ? AND deleted = 0)`,
		teamID, teamID, teamID, teamID).Scan(&databases, &apps, &functions, &snapshotMiB)
	return databases, apps, functions, (snapshotMiB + 1<<20 - 1) >> 20, err
}

func nullPtr(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

func ptrArg(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// quotaSchema is the team quota overrides' part of each migration.
var quotaSchema = []schemaStep{
	{6, []string{
		`CREATE TABLE team_quotas (
			team_id    TEXT PRIMARY KEY REFERENCES teams(id),
			sandboxes  BIGINT,
			vcpus      BIGINT,
			memory_mib BIGINT,
			volumes    BIGINT,
			volume_mib BIGINT,
			updated_at BIGINT NOT NULL
		)`,
	}},
	// 17 is another branch's (the lead merges it in): a no-op here so the versions stay contiguous.
	{19, []string{
		`ALTER TABLE team_quotas ADD COLUMN databases BIGINT`,
		`ALTER TABLE team_quotas ADD COLUMN apps BIGINT`,
		`ALTER TABLE team_quotas ADD COLUMN functions BIGINT`,
		`ALTER TABLE team_quotas ADD COLUMN snapshot_mib BIGINT`,
	}},
}
