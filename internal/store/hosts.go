package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Host states.
const (
	HostUp   = "up"
	HostDown = "down"
)

// Host is a machine running `pandastack agent`, as last reported.
type Host struct {
	ID            string
	URL           string
	Token         string
	State         string
	Accel         string
	MemMiBTotal   int64
	MemMiBFree    int64
	SlotsTotal    int64
	SlotsUsed     int64
	Templates     []string // templates this host can run
	Baked         []string // the subset already baked (creates restore at once)
	RegisteredAt  time.Time
	LastHeartbeat time.Time
}

const hostCols = `id, url, token, state, accel, mem_mib_total, mem_mib_free, slots_total, slots_used, templates, baked, registered_at, last_heartbeat`

func scanHost(sc interface{ Scan(...any) error }) (Host, error) {
	var h Host
	var tmpl, baked string
	var reg, hb int64
	if err := sc.Scan(&h.ID, &h.URL, &h.Token, &h.State, &h.Accel, &h.MemMiBTotal, &h.MemMiBFree,
		&h.SlotsTotal, &h.SlotsUsed, &tmpl, &baked, &reg, &hb); err != nil {
		return Host{}, err
	}
	if err := json.Unmarshal([]byte(tmpl), &h.Templates); err != nil {
		return Host{}, err
	}
	if err := json.Unmarshal([]byte(baked), &h.Baked); err != nil {
		return Host{}, err
	}
	h.RegisteredAt = fromMicros(reg)
	h.LastHeartbeat = fromMicros(hb)
	return h, nil
}

// UpsertHost records a registration or heartbeat: the host is up and its capacity is as given,
// LastHeartbeat is now. It returns the host's previous state ("" for a new host) so the caller can
// reconcile a host that comes back.
func (s *Store) UpsertHost(ctx context.Context, h Host) (prev string, err error) {
	now := micros(s.now())
	tmpl, err := json.Marshal(nonNil(h.Templates))
	if err != nil {
		return "", err
	}
	baked, err := json.Marshal(nonNil(h.Baked))
	if err != nil {
		return "", err
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		err := s.queryRow(ctx, tx, `SELECT state FROM hosts WHERE id = ?`, h.ID).Scan(&prev)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			prev = ""
			_, err = s.exec(ctx, tx, `INSERT INTO hosts (`+hostCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				h.ID, h.URL, h.Token, HostUp, h.Accel, h.MemMiBTotal, h.MemMiBFree, h.SlotsTotal, h.SlotsUsed, string(tmpl), string(baked), now, now)
			return err
		case err != nil:
			return err
		}
		_, err = s.exec(ctx, tx, `UPDATE hosts SET url = ?, token = ?, state = ?, accel = ?, mem_mib_total = ?, mem_mib_free = ?,
			slots_total = ?, slots_used = ?, templates = ?, baked = ?, last_heartbeat = ? WHERE id = ?`,
			h.URL, h.Token, HostUp, h.Accel, h.MemMiBTotal, h.MemMiBFree, h.SlotsTotal, h.SlotsUsed, string(tmpl), string(baked), now, h.ID)
		return err
	})
	return prev, err
}

// GetHost returns one host.
func (s *Store) GetHost(ctx context.Context, id string) (Host, error) {
	h, err := scanHost(s.queryRow(ctx, s.db, `SELECT `+hostCols+` FROM hosts WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Host{}, ErrNotFound
	}
	return h, err
}

// ListHosts returns every host, by id.
func (s *Store) ListHosts(ctx context.Context) ([]Host, error) {
	rows, err := s.query(ctx, s.db, `SELECT `+hostCols+` FROM hosts ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Host
	for rows.Next() {
		h, err := scanHost(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// MarkStaleHostsDown marks down every up host whose last heartbeat is before staleBefore, and
// turns its running and hibernated sandboxes into `lost` (with a reason), in one transaction. It
// returns the hosts it marked.
func (s *Store) MarkStaleHostsDown(ctx context.Context, staleBefore time.Time) ([]Host, error) {
	var marked []Host
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		marked = nil
		rows, err := s.query(ctx, tx, `SELECT `+hostCols+` FROM hosts WHERE state = ? AND last_heartbeat < ?`, HostUp, micros(staleBefore))
		if err != nil {
			return err
		}
		for rows.Next() {
			h, err := scanHost(rows)
			if err != nil {
				rows.Close()
				return err
			}
			marked = append(marked, h)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		now := micros(s.now())
		for i := range marked {
			if _, err := s.exec(ctx, tx, `UPDATE hosts SET state = ? WHERE id = ? AND state = ?`, HostDown, marked[i].ID, HostUp); err != nil {
				return err
			}
			marked[i].State = HostDown
			if _, err := s.exec(ctx, tx, `UPDATE sandboxes SET state = ?, error = ?, updated_at = ?
				WHERE host_id = ? AND state IN (?, ?)`,
				StateLost, "host "+marked[i].ID+" stopped sending heartbeats", now,
				marked[i].ID, StateRunning, StateHibernated); err != nil {
				return err
			}
		}
		return nil
	})
	return marked, err
}

// MarkHostDown marks one host down and its live sandboxes lost (an operator's or a test's hand).
func (s *Store) MarkHostDown(ctx context.Context, id, reason string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `UPDATE hosts SET state = ? WHERE id = ?`, HostDown, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		_, err = s.exec(ctx, tx, `UPDATE sandboxes SET state = ?, error = ?, updated_at = ? WHERE host_id = ? AND state IN (?, ?)`,
			StateLost, reason, micros(s.now()), id, StateRunning, StateHibernated)
		return err
	})
}

// CountHostsByState returns how many hosts are in each state.
func (s *Store) CountHostsByState(ctx context.Context) (map[string]int64, error) {
	return s.countBy(ctx, `SELECT state, COUNT(*) FROM hosts GROUP BY state`)
}

func (s *Store) countBy(ctx context.Context, q string) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
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
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

const templateCols = `name, description, vcpus, memory_mib, disk_mib, aliases, metadata, created_at, updated_at`

func scanTemplate(sc interface{ Scan(...any) error }) (Template, error) {
	var t Template
	var c, u int64
	var al, md string
	if err := sc.Scan(&t.Name, &t.Description, &t.VCPUs, &t.MemoryMiB, &t.DiskMiB, &al, &md, &c, &u); err != nil {
		return Template{}, err
	}
	if err := json.Unmarshal([]byte(al), &t.Aliases); err != nil {
		return Template{}, fmt.Errorf("template %s: aliases: %w", t.Name, err)
	}
	if err := json.Unmarshal([]byte(md), &t.Metadata); err != nil {
		return Template{}, fmt.Errorf("template %s: metadata: %w", t.Name, err)
	}
	t.CreatedAt, t.UpdatedAt = fromMicros(c), fromMicros(u)
	return t, nil
}

// UpsertTemplate adds a catalog entry or refreshes it. An empty description, a zero size or no
// aliases/metadata does not overwrite a known one.
func (s *Store) UpsertTemplate(ctx context.Context, t Template) error {
	now := micros(s.now())
	al, _ := json.Marshal(nonNil(t.Aliases))
	md := []byte("{}")
	if len(t.Metadata) > 0 {
		md, _ = json.Marshal(t.Metadata)
	}
	_, err := s.exec(ctx, s.db, `INSERT INTO templates (`+templateCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET
			description = CASE WHEN excluded.description <> '' THEN excluded.description ELSE templates.description END,
			vcpus = CASE WHEN excluded.vcpus > 0 THEN excluded.vcpus ELSE templates.vcpus END,
			memory_mib = CASE WHEN excluded.memory_mib > 0 THEN excluded.memory_mib ELSE templates.memory_mib END,
			disk_mib = CASE WHEN excluded.disk_mib > 0 THEN excluded.disk_mib ELSE templates.disk_mib END,
			aliases = CASE WHEN excluded.aliases <> '[]' THEN excluded.aliases ELSE templates.aliases END,
			metadata = CASE WHEN excluded.metadata <> '{}' THEN excluded.metadata ELSE templates.metadata END,
			updated_at = excluded.updated_at`,
		t.Name, t.Description, t.VCPUs, t.MemoryMiB, t.DiskMiB, string(al), string(md), now, now)
	return err
}

// GetTemplate returns a catalog entry.
func (s *Store) GetTemplate(ctx context.Context, name string) (Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, s.db, `SELECT `+templateCols+` FROM templates WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, ErrNotFound
	}
	return t, err
}

// ListTemplates returns the catalog by name.
func (s *Store) ListTemplates(ctx context.Context) ([]Template, error) {
	rows, err := s.query(ctx, s.db, `SELECT `+templateCols+` FROM templates ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}
