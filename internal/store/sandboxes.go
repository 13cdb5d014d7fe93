package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/sandboxstate"
)

// Sandbox states. `lost` means its host stopped heartbeating; the sandbox is reported, never
// silently forgotten.
// They are internal/sandboxstate's, spelled as strings.
const (
	StateRunning    = string(sandboxstate.Running)
	StateHibernated = string(sandboxstate.Hibernated)
	StateKilled     = string(sandboxstate.Killed)
	StateError      = string(sandboxstate.Error)
	StateLost       = string(sandboxstate.Lost)
)

// States lists every sandbox state the control plane records.
var States = []string{StateRunning, StateHibernated, StateKilled, StateError, StateLost}

// ValidState reports whether s is a sandbox state the control plane records.
func ValidState(s string) bool {
	for _, v := range States {
		if v == s {
			return true
		}
	}
	return false
}

// Sandbox is the record of one sandbox.
type Sandbox struct {
	ID        string
	TeamID    string
	Template  string
	State     string
	HostID    string
	Metadata  map[string]string
	Error     string
	CreatedAt time.Time
	ExpiresAt time.Time
	UpdatedAt time.Time
	// TTLSeconds is the ttl_seconds the sandbox was last given (create or refresh); 0 means the
	// server's default. Children of a fork get their parent's.
	TTLSeconds int64
	// ForkOf is the parent of a fork child; SnapshotID the snapshot a sandbox was created from.
	ForkOf     string
	SnapshotID string
	// TrafficTokenHash is auth.Hash of the token its port proxy requires; "" when its ports are
	// public. A fork's children keep their parent's.
	TrafficTokenHash string
	// HibernatedImage names the blob-store publication of a hibernated sandbox's memory and disk
	// (its host's answer to the hibernate): a sandbox with one outlives its host, and wakes on
	// another. Any state change clears it; only a hibernated sandbox has one.
	HibernatedImage string
	// Owner is the control-plane service that made the sandbox for its own use (OwnerFunction),
	// "" for the team's own: owned sandboxes stay out of the team's plain lists and feed (the
	// service shows them itself). Hosts never see it.
	Owner string
}

// OwnerFunction owns the sandboxes and snapshots of functions (bakes, warm snapshots,
// invocations): internal/functions.
const OwnerFunction = "function"

const sandboxCols = `id, team_id, template, state, host_id, metadata, error, created_at, expires_at, updated_at, ttl_seconds, fork_of, snapshot_id, traffic_token_hash, hibernated_image, owner`

func scanSandbox(sc scanner) (Sandbox, error) {
	var sb Sandbox
	var md string
	if err := sc.Scan(&sb.ID, &sb.TeamID, &sb.Template, &sb.State, &sb.HostID, &md, &sb.Error,
		timeCol(&sb.CreatedAt), timeCol(&sb.ExpiresAt), timeCol(&sb.UpdatedAt), &sb.TTLSeconds, &sb.ForkOf, &sb.SnapshotID, &sb.TrafficTokenHash, &sb.HibernatedImage, &sb.Owner); err != nil {
		return Sandbox{}, err
	}
	sb.Metadata = map[string]string{}
	if err := json.Unmarshal([]byte(md), &sb.Metadata); err != nil {
		return Sandbox{}, err
	}
	return sb, nil
}

// CreateSandbox records a new sandbox (and its metadata rows) atomically.
func (s *Store) CreateSandbox(ctx context.Context, sb Sandbox) (Sandbox, error) {
	out, err := s.CreateSandboxes(ctx, []Sandbox{sb})
	if err != nil {
		return Sandbox{}, err
	}
	return out[0], nil
}

// CreateSandboxes records several sandboxes in one transaction: all of them or none (the
// children of a fork). A duplicate id is ErrConflict and records nothing.
func (s *Store) CreateSandboxes(ctx context.Context, sbs []Sandbox) ([]Sandbox, error) {
	var out []Sandbox
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.insertSandboxes(ctx, tx, sbs)
		return err
	})
	if err != nil {
		return nil, conflictOr(err)
	}
	return out, nil
}

// insertSandboxes inserts sandboxes and their metadata rows in tx and returns them as stored.
func (s *Store) insertSandboxes(ctx context.Context, tx *sql.Tx, sbs []Sandbox) ([]Sandbox, error) {
	now := s.now().UTC()
	out := make([]Sandbox, len(sbs))
	for i, sb := range sbs {
		if sb.Metadata == nil {
			sb.Metadata = map[string]string{}
		}
		md, err := json.Marshal(sb.Metadata)
		if err != nil {
			return nil, err
		}
		if sb.CreatedAt.IsZero() {
			sb.CreatedAt = now
		}
		sb.UpdatedAt = now
		if _, err := s.exec(ctx, tx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?)`,
			sb.ID, sb.TeamID, sb.Template, sb.State, sb.HostID, string(md), sb.Error,
			micros(sb.CreatedAt), micros(sb.ExpiresAt), micros(sb.UpdatedAt), sb.TTLSeconds, sb.ForkOf, sb.SnapshotID, sb.TrafficTokenHash, sb.Owner); err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(sb.Metadata))
		for k := range sb.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := s.exec(ctx, tx, `INSERT INTO sandbox_metadata (sandbox_id, mkey, mvalue) VALUES (?, ?, ?)`, sb.ID, k, sb.Metadata[k]); err != nil {
				return nil, err
			}
		}
		sb.CreatedAt, sb.ExpiresAt, sb.UpdatedAt = fromMicros(micros(sb.CreatedAt)), fromMicros(micros(sb.ExpiresAt)), fromMicros(micros(sb.UpdatedAt))
		out[i] = sb
	}
	return out, nil
}

// GetSandbox returns a sandbox of any team (internal callers: reaper, scheduler).
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	return queryOne(ctx, s, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, scanSandbox, id)
}

// GetTeamSandbox returns a sandbox only if it belongs to teamID: another team's sandbox is
// ErrNotFound, exactly like a missing one.
func (s *Store) GetTeamSandbox(ctx context.Context, teamID, id string) (Sandbox, error) {
	return queryOne(ctx, s, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ? AND team_id = ?`, scanSandbox, id, teamID)
}

// SandboxFilter selects sandboxes for ListSandboxes.
type SandboxFilter struct {
	TeamID   string            // "" = every team (internal use only)
	States   []string          // empty = every state
	HostID   string            // "" = every host
	Metadata map[string]string // every pair must match
	Limit    int               // <= 0 means 100
	Cursor   string            // from a previous page's next cursor
	Unowned  bool              // only the team's own (Owner ""): the plain lists
}

// ListSandboxes returns one page, newest first, and the cursor of the next page ("" at the end).
func (s *Store) ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, string, error) {
	var where []string
	var args []any
	if f.TeamID != "" {
		where = append(where, `s.team_id = ?`)
		args = append(args, f.TeamID)
	}
	if f.Unowned {
		where = append(where, `s.owner = ''`)
	}
	if f.HostID != "" {
		where = append(where, `s.host_id = ?`)
		args = append(args, f.HostID)
	}
	if len(f.States) > 0 {
		in, states := inList(f.States)
		where = append(where, `s.state IN `+in)
		args = append(args, states...)
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = s.id AND m.mkey = ? AND m.mvalue = ?)`)
		args = append(args, k, f.Metadata[k])
	}
	lq := listQuery{sel: `SELECT ` + prefixCols("s.", sandboxCols) + ` FROM sandboxes s`, at: "s.", where: where, args: args}
	return queryPage(ctx, s, lq, f.Limit, f.Cursor, scanSandbox, func(sb Sandbox) (time.Time, string) { return sb.CreatedAt, sb.ID })
}

func prefixCols(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Cursors are opaque to clients: base64url("v1:<created micros>:<id>").
func encodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + strconv.FormatInt(at, 10) + ":" + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	parts := strings.SplitN(string(b), ":", 3)
	if len(parts) != 3 || parts[0] != "v1" || parts[2] == "" {
		return 0, "", ErrBadCursor
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	return at, parts[2], nil
}

// SetSandboxState moves a sandbox to state (with reason, "" to clear it). The change happens only
// if the current state may move there (sandboxstate.CanMove: nothing leaves killed) and, when
// from is given, is one of them; it reports whether a row changed.
func (s *Store) SetSandboxState(ctx context.Context, id, state, reason string, from ...string) (bool, error) {
	n, err := s.setSandboxesState(ctx, []string{id}, state, reason, from)
	return n > 0, err
}

// SetSandboxesState is SetSandboxState for several sandboxes in one statement (the reaper records
// a batch of kills at once), except that a row in state already keeps its reason and time (a
// sandbox killed by a call meanwhile stays killed for that call's reason); it returns how many
// rows changed.
func (s *Store) SetSandboxesState(ctx context.Context, ids []string, state, reason string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var from []string
	for _, st := range sandboxstate.All {
		if string(st) != state {
			from = append(from, string(st))
		}
	}
	return s.setSandboxesState(ctx, ids, state, reason, from)
}

func (s *Store) setSandboxesState(ctx context.Context, ids []string, state, reason string, from []string) (int64, error) {
	if !sandboxstate.Valid(state) {
		return 0, fmt.Errorf("store: %q is not a sandbox state", state)
	}
	if len(from) == 0 {
		for _, st := range sandboxstate.All {
			from = append(from, string(st))
		}
	}
	var sources []string
	for _, f := range from {
		if sandboxstate.CanMove(sandboxstate.State(f), sandboxstate.State(state)) {
			sources = append(sources, f)
		}
	}
	if len(sources) == 0 {
		return 0, nil
	}
	// A hibernation's publication is stale once the sandbox is anything else (running again, say).
	image := `, hibernated_image = ''`
	if state == StateHibernated {
		image = ""
	}
	idList, idArgs := inList(ids)
	stateList, stateArgs := inList(sources)
	q := `UPDATE sandboxes SET state = ?, error = ?, updated_at = ?` + image + ` WHERE id IN ` + idList + ` AND state IN ` + stateList
	args := append(append([]any{state, reason, micros(s.now())}, idArgs...), stateArgs...)
	res, err := s.exec(ctx, s.db, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SetHibernatedImage records the publication of a hibernated sandbox's memory and disk; false if
// the sandbox is not hibernated (any more).
func (s *Store) SetHibernatedImage(ctx context.Context, id, image string) (bool, error) {
	res, err := s.exec(ctx, s.db, `UPDATE sandboxes SET hibernated_image = ? WHERE id = ? AND state = ?`, image, id, StateHibernated)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// MoveHibernated records that a hibernated sandbox with a publication, last on host from, now
// runs on host to (which woke it from the publication, and made its volumes there from the copies
// it carried): the sandbox and the volumes it mounts are on host to, in one transaction; false if
// it changed meanwhile (another mover won, or it was killed).
func (s *Store) MoveHibernated(ctx context.Context, id, from, to string) (moved bool, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `UPDATE sandboxes SET host_id = ?, state = ?, error = '', hibernated_image = '', updated_at = ?
		WHERE id = ? AND host_id = ? AND state = ? AND hibernated_image <> ''`, to, StateRunning, micros(s.now()), id, from, StateHibernated)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		moved = true
		_, err = s.exec(ctx, tx, `UPDATE volumes SET host_id = ?, updated_at = ? WHERE host_id = ? AND id IN (SELECT volume_id FROM sandbox_volumes WHERE sandbox_id = ?)`,
			to, micros(s.now()), from, id)
		return err
	})
	return moved && err == nil, err
}

// SetSandboxExpiry sets expires_at (and the ttl_seconds policy it came from, when > 0) of a
// sandbox that is not killed; false if none was changed.
func (s *Store) SetSandboxExpiry(ctx context.Context, id string, at time.Time, ttlSeconds int64) (bool, error) {
	res, err := s.exec(ctx, s.db, `UPDATE sandboxes SET expires_at = ?, ttl_seconds = CASE WHEN ? > 0 THEN ? ELSE ttl_seconds END, updated_at = ?
		WHERE id = ? AND state <> ?`,
		micros(at), ttlSeconds, ttlSeconds, micros(s.now()), id, StateKilled)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// ExpiredSandboxes returns up to limit sandboxes that are not killed and whose expiry is at or
// before now, oldest expiry first.
func (s *Store) ExpiredSandboxes(ctx context.Context, now time.Time, limit int) ([]Sandbox, error) {
	// 'killed' is spelled out (not a parameter) so both planners match the partial index
	// sandboxes_live_expires: the query reads only the expired live rows, however many are killed.
	return queryAll(ctx, s, s.db, `SELECT `+sandboxCols+` FROM sandboxes WHERE state <> '`+StateKilled+`' AND expires_at <= ? ORDER BY expires_at LIMIT ?`,
		scanSandbox, micros(now), limit)
}

// HostSandboxes returns every sandbox on hostID in one of states (all states if none given).
func (s *Store) HostSandboxes(ctx context.Context, hostID string, states ...string) ([]Sandbox, error) {
	var all []Sandbox
	cursor := ""
	for {
		page, next, err := s.ListSandboxes(ctx, SandboxFilter{HostID: hostID, States: states, Limit: 1000, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// SandboxesChangedSince returns up to limit of the team's own sandboxes (not a service's) whose
// record changed (created, moved state, given a new expiry) after since, oldest change first:
// GET /v1/events' feed.
func (s *Store) SandboxesChangedSince(ctx context.Context, teamID string, since time.Time, limit int) ([]Sandbox, error) {
	return queryAll(ctx, s, s.db, `SELECT `+sandboxCols+` FROM sandboxes WHERE team_id = ? AND updated_at > ? AND owner = '' ORDER BY updated_at, id LIMIT ?`,
		scanSandbox, teamID, micros(since), limit)
}

// CountSandboxesByState returns how many sandboxes are in each state (for /metrics).
func (s *Store) CountSandboxesByState(ctx context.Context) (map[string]int64, error) {
	return s.countBy(ctx, `SELECT state, COUNT(*) FROM sandboxes GROUP BY state`)
}

// CountUnkilledSandboxesByState returns how many sandboxes are in each state but killed (for
// /metrics): the killed rows kept for --killed-retention are most of the table and are not read.
// The states are spelled in the statement, so the (state, expires_at) index serves it alone (an
// index-only read of the rows it counts).
func (s *Store) CountUnkilledSandboxesByState(ctx context.Context) (map[string]int64, error) {
	in := "'" + strings.Join(unkilledStates(), "', '") + "'"
	return s.countBy(ctx, `SELECT state, COUNT(*) FROM sandboxes WHERE state IN (`+in+`) GROUP BY state`)
}

// unkilledStates are the sandbox states but killed.
func unkilledStates() []string {
	return slices.DeleteFunc(slices.Clone(States), func(st string) bool { return st == StateKilled })
}

// LiveSandboxesByHost returns how many running and hibernated sandboxes each host has.
func (s *Store) LiveSandboxesByHost(ctx context.Context) (map[string]int64, error) {
	return s.countBy(ctx, `SELECT host_id, COUNT(*) FROM sandboxes WHERE state IN ('`+StateRunning+`', '`+StateHibernated+`') GROUP BY host_id`)
}

// PruneKilledBatch is how many rows one statement of PruneKilledSandboxes deletes at most.
const PruneKilledBatch = 1000

// PruneKilledSandboxes deletes the killed sandboxes whose record last changed before before, with
// their metadata and volume attachments (ON DELETE CASCADE), batch rows a statement (each its own
// transaction: a first prune of a million rows holds no long one) until none is left; it returns
// how many went. A killed row something still points at stays: the source of a snapshot that is
// not deleted (restoring it reads the source's volume attachments), the sandbox of a database or
// of an app deployment (their services read it to decide to replace it).
func (s *Store) PruneKilledSandboxes(ctx context.Context, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("store: prune batch %d: must be positive", batch)
	}
	// The state is spelled in the statement: a parameter would keep the partial index out of the plan.
	q := `DELETE FROM sandboxes WHERE id IN (SELECT s.id FROM sandboxes s WHERE s.state = '` + StateKilled + `' AND s.updated_at < ?
		AND NOT EXISTS (SELECT 1 FROM snapshots sn WHERE sn.sandbox_id = s.id AND sn.deleted = 0)
		AND NOT EXISTS (SELECT 1 FROM databases d WHERE d.sandbox_id = s.id)
		AND NOT EXISTS (SELECT 1 FROM app_deployments a WHERE a.sandbox_id = s.id)
		ORDER BY s.updated_at LIMIT ?)`
	var total int64
	for {
		res, err := s.exec(ctx, s.db, q, micros(before), batch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
}

// sandboxesSchema is the sandboxes tables' part of each migration.
var sandboxesSchema = []schemaStep{
	{1, []string{
		`CREATE TABLE sandboxes (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			template   TEXT NOT NULL,
			state      TEXT NOT NULL,
			host_id    TEXT NOT NULL DEFAULT '',
			metadata   TEXT NOT NULL DEFAULT '{}',
			error      TEXT NOT NULL DEFAULT '',
			created_at BIGINT NOT NULL,
			expires_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL
		)`,
		`CREATE INDEX sandboxes_team_created ON sandboxes (team_id, created_at, id)`,
		`CREATE INDEX sandboxes_state_expires ON sandboxes (state, expires_at)`,
		`CREATE INDEX sandboxes_host_state ON sandboxes (host_id, state)`,
		// Metadata is also kept as rows so `metadata.k=v` filters are one portable, indexed
		// query on both backends (the JSON column is what reads return).
		`CREATE TABLE sandbox_metadata (
			sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
			mkey       TEXT NOT NULL,
			mvalue     TEXT NOT NULL,
			PRIMARY KEY (sandbox_id, mkey)
		)`,
		`CREATE INDEX sandbox_metadata_kv ON sandbox_metadata (mkey, mvalue)`,
	}},
	{2, []string{
		// Where a sandbox's memory came from (a fork's parent, a snapshot), and the ttl_seconds
		// it was last given (children of a fork get the parent's; 0 means the server default).
		`ALTER TABLE sandboxes ADD COLUMN fork_of TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE sandboxes ADD COLUMN ttl_seconds BIGINT NOT NULL DEFAULT 0`,
	}},
	{7, []string{
		// The reaper's query: live rows by expiry. (state, expires_at) cannot serve
		// `state <> 'killed'`, and killed rows pile up; this index holds only the live ones.
		`CREATE INDEX sandboxes_live_expires ON sandboxes (expires_at) WHERE state <> 'killed'`,
	}},
	{8, []string{
		// Private ports: the hash of the token the port proxy asks for; '' means public.
		`ALTER TABLE sandboxes ADD COLUMN traffic_token_hash TEXT NOT NULL DEFAULT ''`,
	}},
	{12, []string{
		// GET /v1/events reads a team's sandboxes changed since its last look.
		`CREATE INDEX sandboxes_team_updated ON sandboxes (team_id, updated_at)`,
	}},
	{15, []string{
		// A hibernated sandbox's published memory and disk: it wakes on another host if its own is lost.
		`ALTER TABLE sandboxes ADD COLUMN hibernated_image TEXT NOT NULL DEFAULT ''`,
	}},
	{17, []string{
		// The control-plane service that made the sandbox for itself ('' : the team's own).
		`ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
	}},
	{27, []string{
		// The killed-row prune's query: killed rows by their last change, the oldest first.
		`CREATE INDEX sandboxes_killed_updated ON sandboxes (updated_at) WHERE state = 'killed'`,
	}},
}
