package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// TeamTemplate is a template a team built through the API. Name is the team's name for it;
// AgentName the name its host (HostID) knows it by, unique across teams. Spec is the spec as the
// team sent it (JSON, with its "from" as the team wrote it).
type TeamTemplate struct {
	TeamID      string
	Name        string
	AgentName   string
	HostID      string
	Spec        string
	Description string
	VCPUs       int
	MemoryMiB   int
	DiskMiB     int
	SizeBytes   int64
	BakeMS      int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

const teamTemplateCols = `team_id, name, agent_name, host_id, spec, description, vcpus, memory_mib, disk_mib, size_bytes, bake_ms, created_at, updated_at`

var scanTeamTemplate = scanFields(func(t *TeamTemplate) []any {
	return []any{&t.TeamID, &t.Name, &t.AgentName, &t.HostID, &t.Spec, &t.Description, &t.VCPUs, &t.MemoryMiB, &t.DiskMiB,
		&t.SizeBytes, &t.BakeMS, timeCol(&t.CreatedAt), timeCol(&t.UpdatedAt)}
})

// UpsertTeamTemplate records a team template, or replaces it after a rebuild (keeping its
// created_at). It returns the record as stored.
func (s *Store) UpsertTeamTemplate(ctx context.Context, t TeamTemplate) (TeamTemplate, error) {
	now := micros(s.now())
	_, err := s.exec(ctx, s.db, `INSERT INTO team_templates (`+teamTemplateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (team_id, name) DO UPDATE SET
			agent_name = excluded.agent_name, host_id = excluded.host_id, spec = excluded.spec,
			description = excluded.description, vcpus = excluded.vcpus, memory_mib = excluded.memory_mib,
			disk_mib = excluded.disk_mib, size_bytes = excluded.size_bytes, bake_ms = excluded.bake_ms,
			updated_at = excluded.updated_at`,
		t.TeamID, t.Name, t.AgentName, t.HostID, t.Spec, t.Description, t.VCPUs, t.MemoryMiB, t.DiskMiB,
		t.SizeBytes, t.BakeMS, now, now)
	if err != nil {
		return TeamTemplate{}, err
	}
	return s.GetTeamTemplate(ctx, t.TeamID, t.Name)
}

// GetTeamTemplate returns a team's template; another team's is ErrNotFound like a missing one.
func (s *Store) GetTeamTemplate(ctx context.Context, teamID, name string) (TeamTemplate, error) {
	return queryOne(ctx, s, `SELECT `+teamTemplateCols+` FROM team_templates WHERE team_id = ? AND name = ?`, scanTeamTemplate, teamID, name)
}

// ListTeamTemplates returns a team's templates by name.
func (s *Store) ListTeamTemplates(ctx context.Context, teamID string) ([]TeamTemplate, error) {
	return queryAll(ctx, s, s.db, `SELECT `+teamTemplateCols+` FROM team_templates WHERE team_id = ? ORDER BY name`, scanTeamTemplate, teamID)
}

// DeleteTeamTemplate forgets a team's template (ErrNotFound when the team has none by that name).
func (s *Store) DeleteTeamTemplate(ctx context.Context, teamID, name string) error {
	res, err := s.exec(ctx, s.db, `DELETE FROM team_templates WHERE team_id = ? AND name = ?`, teamID, name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return ErrNotFound
	}
	return nil
}

// TemplateUse says what of a team still uses one of its templates: a sandbox that is not killed
// (its host may still restore it from the template) or a snapshot that is not deleted. Empty
// strings: nothing does.
func (s *Store) TemplateUse(ctx context.Context, teamID, name string) (sandboxID, snapshotID string, err error) {
	err = s.queryRow(ctx, s.db, `SELECT id FROM sandboxes WHERE team_id = ? AND template = ? AND state <> ? ORDER BY created_at, id LIMIT 1`,
		teamID, name, StateKilled).Scan(&sandboxID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", "", err
	}
	err = s.queryRow(ctx, s.db, `SELECT id FROM snapshots WHERE team_id = ? AND template = ? AND deleted = 0 ORDER BY created_at, id LIMIT 1`,
		teamID, name).Scan(&snapshotID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", "", err
	}
	return sandboxID, snapshotID, nil
}

// teamTemplatesSchema is the team templates table's part of each migration.
var teamTemplatesSchema = []schemaStep{
	{4, []string{
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
