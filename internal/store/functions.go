package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"
)

// Function is a team's function: a name whose deploys are immutable versions.
type Function struct {
	ID        string
	TeamID    string
	Name      string
	Version   int64 // the latest version
	CreatedAt time.Time
	UpdatedAt time.Time
}

// FunctionVersion is one deploy: the bundle (kept to bake it again), its settings and the warm
// snapshot invocations start from. Secrets is the sealed form (never shown).
type FunctionVersion struct {
	FunctionID     string
	Version        int64
	TeamID         string
	Runtime        string
	Handler        string
	Env            map[string]string
	SecretNames    []string
	Secrets        string
	TimeoutSeconds int64
	MemoryMiB      int64
	MaxConcurrency int64
	Retries        int64
	Bundle         string // base64 of the normalised tar
	BundleBytes    int64
	BundleSHA256   string
	State          string
	Error          string
	SnapshotID     string
	CreatedAt      time.Time
}

// FunctionRun is one invocation.
type FunctionRun struct {
	ID             string
	FunctionID     string
	TeamID         string
	Version        int64
	Trigger        string
	Status         string
	Attempts       int64
	Payload        string
	Result         string
	Logs           string
	ErrorType      string
	ErrorMessage   string
	ErrorTraceback string
	DurationMS     int64
	SandboxID      string
	CreatedAt      time.Time
	FinishedAt     time.Time
	// LeaseUntil: the replica working on an unfinished run (sync or async) renews it; a run
	// whose lease has passed lost its replica and is taken over (0: finished). Running runs
	// with a live lease are the function's concurrency slots in use.
	LeaseUntil time.Time
}

const functionCols = `id, team_id, name, version, created_at, updated_at`

var scanFunction = scanFields(func(f *Function) []any {
	return []any{&f.ID, &f.TeamID, &f.Name, &f.Version, timeCol(&f.CreatedAt), timeCol(&f.UpdatedAt)}
})

const functionVersionCols = `function_id, version, team_id, runtime, handler, env, secret_names, secrets, timeout_seconds,
	memory_mib, max_concurrency, retries, bundle, bundle_bytes, bundle_sha256, state, error, snapshot_id, created_at`

// functionVersionMeta is functionVersionCols without the bundle (lists).
const functionVersionMeta = `function_id, version, team_id, runtime, handler, env, secret_names, secrets, timeout_seconds,
	memory_mib, max_concurrency, retries, '', bundle_bytes, bundle_sha256, state, error, snapshot_id, created_at`

var scanFunctionVersion = scanFields(func(v *FunctionVersion) []any {
	return []any{&v.FunctionID, &v.Version, &v.TeamID, &v.Runtime, &v.Handler, jsonCol(&v.Env), jsonCol(&v.SecretNames), &v.Secrets,
		&v.TimeoutSeconds, &v.MemoryMiB, &v.MaxConcurrency, &v.Retries, &v.Bundle, &v.BundleBytes, &v.BundleSHA256, &v.State,
		&v.Error, &v.SnapshotID, timeCol(&v.CreatedAt)}
})

const functionRunCols = `id, function_id, team_id, version, trigger_kind, status, attempts, payload, result, logs, error_type,
	error_message, error_traceback, duration_ms, sandbox_id, created_at, finished_at, lease_until`

var scanFunctionRun = scanFields(func(r *FunctionRun) []any {
	return []any{&r.ID, &r.FunctionID, &r.TeamID, &r.Version, &r.Trigger, &r.Status, &r.Attempts, &r.Payload, &r.Result, &r.Logs,
		&r.ErrorType, &r.ErrorMessage, &r.ErrorTraceback, &r.DurationMS, &r.SandboxID, timeCol(&r.CreatedAt), timeCol(&r.FinishedAt),
		timeCol(&r.LeaseUntil)}
})

// jsonCol is a Scan destination that decodes a JSON text column into v.
func jsonCol(v any) sql.Scanner {
	return scanFunc(func(src any) error {
		var s sql.NullString
		if err := s.Scan(src); err != nil {
			return err
		}
		if !s.Valid || s.String == "" {
			return nil
		}
		return json.Unmarshal([]byte(s.String), v)
	})
}

type scanFunc func(any) error

func (f scanFunc) Scan(src any) error { return f(src) }

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// AddFunctionVersion records a deployed version: a new function when the team has none of that
// name, else its next version (v.Version is set). A concurrent deploy of the same name that
// takes the number first makes this one ErrConflict.
func (s *Store) AddFunctionVersion(ctx context.Context, newID, name string, v FunctionVersion) (Function, FunctionVersion, error) {
	now := fromMicros(micros(s.now().UTC()))
	v.CreatedAt = now
	var fn Function
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		f, err := scanFunction(s.queryRow(ctx, tx, `SELECT `+functionCols+` FROM functions WHERE team_id = ? AND name = ?`, v.TeamID, name))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			f = Function{ID: newID, TeamID: v.TeamID, Name: name, Version: 1, CreatedAt: now, UpdatedAt: now}
			if _, err := s.exec(ctx, tx, `INSERT INTO functions (`+functionCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
				f.ID, f.TeamID, f.Name, f.Version, micros(now), micros(now)); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			res, err := s.exec(ctx, tx, `UPDATE functions SET version = ?, updated_at = ? WHERE id = ? AND version = ?`,
				f.Version+1, micros(now), f.ID, f.Version)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return ErrConflict
			}
			f.Version++
			f.UpdatedAt = now
		}
		v.FunctionID, v.Version = f.ID, f.Version
		fn = f
		_, err = s.exec(ctx, tx, `INSERT INTO function_versions (`+functionVersionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			v.FunctionID, v.Version, v.TeamID, v.Runtime, v.Handler, jsonText(v.Env), jsonText(nonNil(v.SecretNames)), v.Secrets,
			v.TimeoutSeconds, v.MemoryMiB, v.MaxConcurrency, v.Retries, v.Bundle, v.BundleBytes, v.BundleSHA256, v.State, v.Error,
			v.SnapshotID, micros(v.CreatedAt))
		return err
	})
	if err != nil {
		return Function{}, FunctionVersion{}, conflictOr(err)
	}
	return fn, v, nil
}

// GetTeamFunction returns teamID's function id; another team's is ErrNotFound like a missing one.
func (s *Store) GetTeamFunction(ctx context.Context, teamID, id string) (Function, error) {
	return queryOne(ctx, s, `SELECT `+functionCols+` FROM functions WHERE id = ? AND team_id = ?`, scanFunction, id, teamID)
}

// GetFunction returns function id of any team (its HTTP trigger).
func (s *Store) GetFunction(ctx context.Context, id string) (Function, error) {
	return queryOne(ctx, s, `SELECT `+functionCols+` FROM functions WHERE id = ?`, scanFunction, id)
}

// GetTeamFunctionByName returns teamID's function called name.
func (s *Store) GetTeamFunctionByName(ctx context.Context, teamID, name string) (Function, error) {
	return queryOne(ctx, s, `SELECT `+functionCols+` FROM functions WHERE team_id = ? AND name = ?`, scanFunction, teamID, name)
}

// ListTeamFunctions returns a team's functions, newest first.
func (s *Store) ListTeamFunctions(ctx context.Context, teamID string) ([]Function, error) {
	return queryAll(ctx, s, s.db, `SELECT `+functionCols+` FROM functions WHERE team_id = ? ORDER BY created_at DESC, id DESC`, scanFunction, teamID)
}

// GetFunctionVersion returns one version, without its bundle (invocations do not need it).
func (s *Store) GetFunctionVersion(ctx context.Context, functionID string, version int64) (FunctionVersion, error) {
	return queryOne(ctx, s, `SELECT `+functionVersionMeta+` FROM function_versions WHERE function_id = ? AND version = ?`,
		scanFunctionVersion, functionID, version)
}

// GetFunctionVersionBundle returns one version with its bundle (to bake it again).
func (s *Store) GetFunctionVersionBundle(ctx context.Context, functionID string, version int64) (FunctionVersion, error) {
	return queryOne(ctx, s, `SELECT `+functionVersionCols+` FROM function_versions WHERE function_id = ? AND version = ?`,
		scanFunctionVersion, functionID, version)
}

// SetFunctionVersionSnapshot records a version's new warm snapshot if its snapshot is still old;
// false when another bake recorded one first.
func (s *Store) SetFunctionVersionSnapshot(ctx context.Context, functionID string, version int64, old, snapshotID string) (bool, error) {
	res, err := s.exec(ctx, s.db, `UPDATE function_versions SET snapshot_id = ? WHERE function_id = ? AND version = ? AND snapshot_id = ?`,
		snapshotID, functionID, version, old)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ListFunctionVersions returns a function's versions, newest first (bundles left out).
func (s *Store) ListFunctionVersions(ctx context.Context, functionID string) ([]FunctionVersion, error) {
	return queryAll(ctx, s, s.db, `SELECT `+functionVersionMeta+` FROM function_versions WHERE function_id = ? ORDER BY version DESC`,
		scanFunctionVersion, functionID)
}

// DeleteFunction deletes teamID's function with its versions and runs.
func (s *Store) DeleteFunction(ctx context.Context, teamID, id string) error {
	return s.deleteWithChildren(ctx, "functions", teamID, id, "function_id", "function_versions", "function_runs")
}

// deleteWithChildren deletes teamID's row id of table and the rows of the child tables whose
// column key is id, in one transaction; ErrNotFound when the team has no such row. Table and
// column names are ours, never input.
func (s *Store) deleteWithChildren(ctx context.Context, table, teamID, id, key string, children ...string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `DELETE FROM `+table+` WHERE id = ? AND team_id = ?`, id, teamID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		for _, t := range children {
			if _, err := s.exec(ctx, tx, `DELETE FROM `+t+` WHERE `+key+` = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// CreateFunctionRun records a new run (created now).
func (s *Store) CreateFunctionRun(ctx context.Context, r FunctionRun) (FunctionRun, error) {
	r, err := s.insertFunctionRun(ctx, s.db, r)
	return r, conflictOr(err)
}

func (s *Store) insertFunctionRun(ctx context.Context, q querier, r FunctionRun) (FunctionRun, error) {
	r.CreatedAt = fromMicros(micros(s.now().UTC()))
	r.LeaseUntil = fromMicros(micros(r.LeaseUntil))
	_, err := s.exec(ctx, q, `INSERT INTO function_runs (`+functionRunCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)`,
		r.ID, r.FunctionID, r.TeamID, r.Version, r.Trigger, r.Status, r.Attempts, r.Payload, r.Result, r.Logs, r.ErrorType,
		r.ErrorMessage, r.ErrorTraceback, r.DurationMS, r.SandboxID, micros(r.CreatedAt), micros(r.LeaseUntil))
	return r, err
}

// StartFunctionRun starts run r if fewer than max runs of its function are running with a live
// lease at now, cluster-wide: the count and the write are one transaction under the team's lock
// (WithTeamLock), so replicas racing for a function's last slot cannot both take it. insert
// records r as a new run; otherwise r (queued, or between two attempts) starts its next attempt
// (its attempts counted up) if its lease is still the caller's (r.LeaseUntil, else
// ErrLeaseLost). Either way it is running with its lease until until; a run whose server dies
// stops holding its slot when the lease lapses. false: every slot is taken.
func (s *Store) StartFunctionRun(ctx context.Context, r FunctionRun, insert bool, max int64, now, until time.Time) (FunctionRun, bool, error) {
	ok, held := false, r.LeaseUntil
	r.Status, r.LeaseUntil = "running", fromMicros(micros(until))
	err := s.WithTeamLock(ctx, r.TeamID, func() error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			var n int64
			if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM function_runs WHERE lease_until > ? AND function_id = ? AND status = ?`,
				micros(now), r.FunctionID, "running").Scan(&n); err != nil {
				return err
			}
			if n >= max {
				return nil
			}
			ok = true
			if insert {
				var err error
				r, err = s.insertFunctionRun(ctx, tx, r)
				return err
			}
			r.Attempts++
			res, err := s.exec(ctx, tx, `UPDATE function_runs SET status = ?, attempts = ?, lease_until = ? WHERE id = ? AND lease_until = ?`,
				r.Status, r.Attempts, micros(r.LeaseUntil), r.ID, micros(held))
			return held1(res, err)
		})
	})
	return r, ok, conflictOr(err)
}

// ErrLeaseLost: a run's lease is no longer the one its caller holds (another replica took the
// run over, or finished it as lost): the caller's write was not made.
var ErrLeaseLost = errors.New("the run's lease passed to another replica")

// held1 is ErrLeaseLost when a write conditional on a run's lease matched no row.
func held1(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// UpdateFunctionRun records a run's progress or end (finished now when final) if its lease is
// still the one the caller holds (r.LeaseUntil), else ErrLeaseLost: a replica cut off from the
// database past its lease must not overwrite what the replica that took the run over recorded
// (its outcome, or that the run's server was lost).
func (s *Store) UpdateFunctionRun(ctx context.Context, r FunctionRun, final bool) error {
	fin := int64(0)
	if final {
		fin = micros(s.now().UTC())
	}
	lease := `lease_until` // kept: the replica working on the run renews it
	if final {
		lease = `0`
	}
	return held1(s.exec(ctx, s.db, `UPDATE function_runs SET status = ?, attempts = ?, result = ?, logs = ?, error_type = ?,
		error_message = ?, error_traceback = ?, duration_ms = ?, sandbox_id = ?, finished_at = ?, lease_until = `+lease+`
		WHERE id = ? AND lease_until = ? AND lease_until > 0`,
		r.Status, r.Attempts, r.Result, r.Logs, r.ErrorType, r.ErrorMessage, r.ErrorTraceback, r.DurationMS, r.SandboxID, fin, r.ID,
		micros(r.LeaseUntil)))
}

// RenewFunctionRun moves the lease of an unfinished run this replica works on from held (the
// end it last wrote) to until; ErrLeaseLost when the run is no longer this replica's.
func (s *Store) RenewFunctionRun(ctx context.Context, id string, held, until time.Time) error {
	return held1(s.exec(ctx, s.db, `UPDATE function_runs SET lease_until = ? WHERE id = ? AND lease_until = ? AND lease_until > 0`,
		micros(until), id, micros(held)))
}

// TakeOverFunctionRuns claims up to limit unfinished runs (queued, running, or an async run
// between attempts) whose lease passed before now (their replica stopped) by moving their lease
// to until; each is claimed by one replica only.
func (s *Store) TakeOverFunctionRuns(ctx context.Context, now, until time.Time, limit int) ([]FunctionRun, error) {
	stale, err := queryAll(ctx, s, s.db, `SELECT `+functionRunCols+` FROM function_runs WHERE lease_until > 0 AND lease_until < ?
		ORDER BY lease_until LIMIT ?`, scanFunctionRun, micros(now), limit)
	if err != nil {
		return nil, err
	}
	return claimEach(ctx, s, stale, func(r *FunctionRun) (string, []any) {
		old := micros(r.LeaseUntil)
		r.LeaseUntil = fromMicros(micros(until))
		return `UPDATE function_runs SET lease_until = ? WHERE id = ? AND lease_until = ?`, []any{micros(until), r.ID, old}
	})
}

// GetFunctionRun returns one run of functionID.
func (s *Store) GetFunctionRun(ctx context.Context, functionID, id string) (FunctionRun, error) {
	return queryOne(ctx, s, `SELECT `+functionRunCols+` FROM function_runs WHERE id = ? AND function_id = ?`, scanFunctionRun, id, functionID)
}

// ListFunctionRuns returns a function's runs, newest first, at most limit (<= 0: 100).
func (s *Store) ListFunctionRuns(ctx context.Context, functionID string, limit int) ([]FunctionRun, error) {
	return queryAll(ctx, s, s.db, `SELECT `+functionRunCols+` FROM function_runs WHERE function_id = ?
		ORDER BY created_at DESC, id DESC LIMIT ?`, scanFunctionRun, functionID, pageLimit(limit))
}

// functionsSchema is the functions tables' part of each migration.
var functionsSchema = []schemaStep{
	{10, []string{
		`CREATE TABLE functions (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			name       TEXT NOT NULL,
			version    BIGINT NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			UNIQUE (team_id, name)
		)`,
		// bundle: base64 of the normalised tar, kept so a version can be baked again.
		`CREATE TABLE function_versions (
			function_id     TEXT NOT NULL,
			version         BIGINT NOT NULL,
			team_id         TEXT NOT NULL,
			runtime         TEXT NOT NULL,
			handler         TEXT NOT NULL,
			env             TEXT NOT NULL,
			secret_names    TEXT NOT NULL,
			secrets         TEXT NOT NULL,
			timeout_seconds BIGINT NOT NULL,
			memory_mib      BIGINT NOT NULL,
			max_concurrency BIGINT NOT NULL,
			retries         BIGINT NOT NULL,
			bundle          TEXT NOT NULL,
			bundle_bytes    BIGINT NOT NULL,
			bundle_sha256   TEXT NOT NULL,
			state           TEXT NOT NULL,
			error           TEXT NOT NULL DEFAULT '',
			snapshot_id     TEXT NOT NULL DEFAULT '',
			created_at      BIGINT NOT NULL,
			PRIMARY KEY (function_id, version)
		)`,
		`CREATE TABLE function_runs (
			id              TEXT PRIMARY KEY,
			function_id     TEXT NOT NULL,
			team_id         TEXT NOT NULL,
			version         BIGINT NOT NULL,
			trigger_kind    TEXT NOT NULL,
			status          TEXT NOT NULL,
			attempts        BIGINT NOT NULL DEFAULT 0,
			payload         TEXT NOT NULL DEFAULT '',
			result          TEXT NOT NULL DEFAULT '',
			logs            TEXT NOT NULL DEFAULT '',
			error_type      TEXT NOT NULL DEFAULT '',
			error_message   TEXT NOT NULL DEFAULT '',
			error_traceback TEXT NOT NULL DEFAULT '',
			duration_ms     BIGINT NOT NULL DEFAULT 0,
			sandbox_id      TEXT NOT NULL DEFAULT '',
			created_at      BIGINT NOT NULL,
			finished_at     BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX function_runs_function ON function_runs (function_id, created_at)`,
	}},
	{11, []string{
		// An async run's lease: the replica working on it renews it; one whose lease passed
		// lost its replica and is taken over (0: none, a finished or a sync run).
		`ALTER TABLE function_runs ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0`,
		`CREATE INDEX function_runs_lease ON function_runs (lease_until) WHERE lease_until > 0`,
	}},
}
