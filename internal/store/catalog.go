package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// catalogSchema is the template catalog's part of each migration.
var catalogSchema = []schemaStep{
	{1, []string{
		`CREATE TABLE templates (
			name        TEXT PRIMARY KEY,
			description TEXT NOT NULL DEFAULT '',
			vcpus       INTEGER NOT NULL DEFAULT 0,
			memory_mib  INTEGER NOT NULL DEFAULT 0,
			disk_mib    INTEGER NOT NULL DEFAULT 0,
			created_at  BIGINT NOT NULL,
			updated_at  BIGINT NOT NULL
		)`,
	}},
	{4, []string{
		// What hosts report about catalog templates beyond their sizes (JSON).
		`ALTER TABLE templates ADD COLUMN aliases TEXT NOT NULL DEFAULT '[]'`,
		`ALTER TABLE templates ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'`,
	}},
	{5, []string{
		// A host's last report of its bake: what `template list` shows for catalog templates.
		`ALTER TABLE templates ADD COLUMN size_bytes BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE templates ADD COLUMN bake_ms BIGINT NOT NULL DEFAULT 0`,
	}},
}

// Template is a catalog entry: a template some host can build. The catalog is filled from what
// host agents report at registration (templates teams built are in team_templates instead).
type Template struct {
	Name        string
	Description string
	VCPUs       int
	MemoryMiB   int
	DiskMiB     int
	Aliases     []string
	Metadata    map[string]string
	// SizeBytes and BakeMS are the last bake a host reported (0: none baked it yet).
	SizeBytes int64
	BakeMS    int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

const templateCols = `name, description, vcpus, memory_mib, disk_mib, aliases, metadata, size_bytes, bake_ms, created_at, updated_at`

func scanTemplate(sc scanner) (Template, error) {
	var t Template
	var al, md string
	if err := sc.Scan(&t.Name, &t.Description, &t.VCPUs, &t.MemoryMiB, &t.DiskMiB, &al, &md, &t.SizeBytes, &t.BakeMS,
		timeCol(&t.CreatedAt), timeCol(&t.UpdatedAt)); err != nil {
		return Template{}, err
	}
	if err := json.Unmarshal([]byte(al), &t.Aliases); err != nil {
		return Template{}, fmt.Errorf("template %s: aliases: %w", t.Name, err)
	}
	if err := json.Unmarshal([]byte(md), &t.Metadata); err != nil {
		return Template{}, fmt.Errorf("template %s: metadata: %w", t.Name, err)
	}
	return t, nil
}

// UpsertTemplate adds a catalog entry or refreshes it. An empty description, a zero size (or
// bake time) or no aliases/metadata does not overwrite a known one.
func (s *Store) UpsertTemplate(ctx context.Context, t Template) error {
	now := micros(s.now())
	al, _ := json.Marshal(nonNil(t.Aliases))
	md := []byte("{}")
	if len(t.Metadata) > 0 {
		md, _ = json.Marshal(t.Metadata)
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO templates (`+templateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET
			description = CASE WHEN excluded.description <> '' THEN excluded.description ELSE templates.description END,
			vcpus = CASE WHEN excluded.vcpus > 0 THEN excluded.vcpus ELSE templates.vcpus END,
			memory_mib = CASE WHEN excluded.memory_mib > 0 THEN excluded.memory_mib ELSE templates.memory_mib END,
			disk_mib = CASE WHEN excluded.disk_mib > 0 THEN excluded.disk_mib ELSE templates.disk_mib END,
			aliases = CASE WHEN excluded.aliases <> '[]' THEN excluded.aliases ELSE templates.aliases END,
			metadata = CASE WHEN excluded.metadata <> '{}' THEN excluded.metadata ELSE templates.metadata END,
			size_bytes = CASE WHEN excluded.size_bytes > 0 THEN excluded.size_bytes ELSE templates.size_bytes END,
			bake_ms = CASE WHEN excluded.bake_ms > 0 THEN excluded.bake_ms ELSE templates.bake_ms END,
			updated_at = excluded.updated_at`,
		t.Name, t.Description, t.VCPUs, t.MemoryMiB, t.DiskMiB, string(al), string(md), t.SizeBytes, t.BakeMS, now, now)
	return err
}

// GetTemplate returns a catalog entry.
func (s *Store) GetTemplate(ctx context.Context, name string) (Template, error) {
	return queryOne(ctx, s, `SELECT `+templateCols+` FROM templates WHERE name = ?`, scanTemplate, name)
}

// ListTemplates returns the catalog by name.
func (s *Store) ListTemplates(ctx context.Context) ([]Template, error) {
	return queryAll(ctx, s, s.db, `SELECT `+templateCols+` FROM templates ORDER BY name`, scanTemplate)
}
