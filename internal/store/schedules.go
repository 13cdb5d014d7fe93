package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// Schedule is a cron schedule of a team: what it runs (a function, or a command in a fresh
// sandbox of a template), when (Cron in Timezone), and its policies. CheckedUntil is how far the
// engine has looked for due instants; every replica moves it forward only.
type Schedule struct {
	ID             string
	TeamID         string
	Name           string
	Cron           string
	Timezone       string
	FunctionID     string // a function target; else Template and Cmd
	Template       string
	Cmd            string
	Payload        string // JSON
	Overlap        string // skip | queue | allow
	Missed         string // skip | run_once
	Enabled        bool
	TimeoutSeconds int64
	CheckedUntil   time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// ScheduleRun is one run of a schedule: a cron instant (Trigger "cron", unique per schedule and
// instant: the claim that makes a fire happen once with any number of replicas) or a manual
// trigger. Status: queued, running, succeeded, failed, skipped.
type ScheduleRun struct {
	ID            string
	ScheduleID    string
	TeamID        string
	Trigger       string
	ScheduledFor  time.Time
	Status        string
	CreatedAt     time.Time
	StartedAt     time.Time
	FinishedAt    time.Time
	SandboxID     string
	FunctionRunID string
	ExitCode      int64
	Output        string
	Error         string
}

// Schedule run states.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunSkipped   = "skipped"
	RunTimedOut  = "timed_out"
)

const scheduleCols = `id, team_id, name, cron, timezone, function_id, template, cmd, payload, overlap, missed, enabled,
	timeout_seconds, checked_until, created_at, updated_at`

var scanSchedule = scanFields(func(s *Schedule) []any {
	return []any{&s.ID, &s.TeamID, &s.Name, &s.Cron, &s.Timezone, &s.FunctionID, &s.Template, &s.Cmd, &s.Payload,
		&s.Overlap, &s.Missed, boolCol(&s.Enabled), &s.TimeoutSeconds, timeCol(&s.CheckedUntil), timeCol(&s.CreatedAt), timeCol(&s.UpdatedAt)}
})

const scheduleRunCols = `id, schedule_id, team_id, trigger_kind, scheduled_for, status, created_at, started_at, finished_at,
	sandbox_id, function_run_id, exit_code, output, error`

var scanScheduleRun = scanFields(func(r *ScheduleRun) []any {
	return []any{&r.ID, &r.ScheduleID, &r.TeamID, &r.Trigger, timeCol(&r.ScheduledFor), &r.Status, timeCol(&r.CreatedAt),
		timeCol(&r.StartedAt), timeCol(&r.FinishedAt), &r.SandboxID, &r.FunctionRunID, &r.ExitCode, &r.Output, &r.Error}
})

// CreateSchedule records a new schedule (its times default to now).
func (s *Store) CreateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	now := fromMicros(micros(s.now().UTC()))
	if sc.CreatedAt.IsZero() {
		sc.CreatedAt = now
	}
	sc.CreatedAt = fromMicros(micros(sc.CreatedAt))
	sc.UpdatedAt = sc.CreatedAt
	if sc.CheckedUntil.IsZero() {
		sc.CheckedUntil = sc.CreatedAt
	}
	sc.CheckedUntil = fromMicros(micros(sc.CheckedUntil))
	_, err := s.exec(ctx, s.db, `INSERT INTO schedules (`+scheduleCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sc.ID, sc.TeamID, sc.Name, sc.Cron, sc.Timezone, sc.FunctionID, sc.Template, sc.Cmd, sc.Payload, sc.Overlap, sc.Missed,
		boolInt(sc.Enabled), sc.TimeoutSeconds, micros(sc.CheckedUntil), micros(sc.CreatedAt), micros(sc.UpdatedAt))
	if err != nil {
		return Schedule{}, conflictOr(err)
	}
	return sc, nil
}

// GetSchedule returns a schedule of any team.
func (s *Store) GetSchedule(ctx context.Context, id string) (Schedule, error) {
	return queryOne(ctx, s, `SELECT `+scheduleCols+` FROM schedules WHERE id = ?`, scanSchedule, id)
}

// GetTeamSchedule returns teamID's schedule id; another team's is ErrNotFound like a missing one.
func (s *Store) GetTeamSchedule(ctx context.Context, teamID, id string) (Schedule, error) {
	return queryOne(ctx, s, `SELECT `+scheduleCols+` FROM schedules WHERE id = ? AND team_id = ?`, scanSchedule, id, teamID)
}

// ListTeamSchedules returns a team's schedules, newest first.
func (s *Store) ListTeamSchedules(ctx context.Context, teamID string) ([]Schedule, error) {
	return queryAll(ctx, s, s.db, `SELECT `+scheduleCols+` FROM schedules WHERE team_id = ? ORDER BY created_at DESC, id DESC`,
		scanSchedule, teamID)
}

// ListEnabledSchedules returns every enabled schedule (the engine's work list).
func (s *Store) ListEnabledSchedules(ctx context.Context) ([]Schedule, error) {
	return queryAll(ctx, s, s.db, `SELECT `+scheduleCols+` FROM schedules WHERE enabled = 1 ORDER BY id`, scanSchedule)
}

// DeleteSchedule deletes teamID's schedule and its runs (ErrNotFound when it has none such).
func (s *Store) DeleteSchedule(ctx context.Context, teamID, id string) error {
	return s.deleteWithChildren(ctx, "schedules", teamID, id, "schedule_id", "schedule_runs")
}

// SetScheduleEnabled pauses or resumes teamID's schedule. A resume looks for due instants only
// from checkedUntil on (instants while it was paused are not run).
func (s *Store) SetScheduleEnabled(ctx context.Context, teamID, id string, enabled bool, checkedUntil time.Time) (Schedule, error) {
	now := s.now().UTC()
	q := `UPDATE schedules SET enabled = ?, updated_at = ? WHERE id = ? AND team_id = ?`
	args := []any{boolInt(enabled), micros(now), id, teamID}
	if enabled {
		q = `UPDATE schedules SET enabled = ?, updated_at = ?, checked_until = ? WHERE id = ? AND team_id = ? AND enabled = 0`
		args = []any{1, micros(now), micros(checkedUntil), id, teamID}
	}
	if _, err := s.exec(ctx, s.db, q, args...); err != nil {
		return Schedule{}, err
	}
	return s.GetTeamSchedule(ctx, teamID, id)
}

// AdvanceSchedule moves a schedule's CheckedUntil forward to t (never back).
func (s *Store) AdvanceSchedule(ctx context.Context, id string, t time.Time) error {
	_, err := s.exec(ctx, s.db, `UPDATE schedules SET checked_until = ? WHERE id = ? AND checked_until < ?`, micros(t), id, micros(t))
	return err
}

// ClaimScheduleRun records run, unless a run of its schedule with the same trigger and instant
// exists (then claimed is false: another replica, or an earlier pass, has it). Its status is
// decided in the same transaction from overlap and whether a run of the schedule is running:
// none running, or overlap "allow": running; "queue": queued; "skip": skipped.
func (s *Store) ClaimScheduleRun(ctx context.Context, run ScheduleRun, overlap string) (out ScheduleRun, claimed bool, err error) {
	run.CreatedAt = fromMicros(micros(s.now().UTC()))
	run.ScheduledFor = fromMicros(micros(run.ScheduledFor))
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var busy int
		if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = ? AND status IN (?, ?)`,
			run.ScheduleID, RunRunning, RunQueued).Scan(&busy); err != nil {
			return err
		}
		run.Status = RunRunning
		if busy > 0 {
			switch overlap {
			case "skip":
				run.Status, run.Error = RunSkipped, "the previous run was still running (overlap: skip)"
			case "queue":
				run.Status = RunQueued
			}
		}
		if run.Status == RunRunning {
			run.StartedAt = run.CreatedAt
		}
		_, err := s.exec(ctx, tx, `INSERT INTO schedule_runs (`+scheduleRunCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, '', '', -1, '', ?)`,
			run.ID, run.ScheduleID, run.TeamID, run.Trigger, micros(run.ScheduledFor), run.Status, micros(run.CreatedAt),
			micros(run.StartedAt), run.Error)
		return err
	})
	if isUnique(err) {
		return ScheduleRun{}, false, nil
	}
	if err != nil {
		return ScheduleRun{}, false, err
	}
	run.ExitCode = -1
	return run, true, nil
}

// StartQueuedRun moves the oldest queued run of a schedule to running, if none of its runs is
// running; ok is false when there was nothing to start (or another replica started it).
func (s *Store) StartQueuedRun(ctx context.Context, scheduleID string) (ScheduleRun, bool, error) {
	now := micros(s.now().UTC())
	var id string
	err := s.queryRow(ctx, s.db, `SELECT id FROM schedule_runs WHERE schedule_id = ? AND status = ?
		AND NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.schedule_id = ? AND r.status = ?)
		ORDER BY scheduled_for, created_at LIMIT 1`, scheduleID, RunQueued, scheduleID, RunRunning).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return ScheduleRun{}, false, nil
	}
	if err != nil {
		return ScheduleRun{}, false, err
	}
	res, err := s.exec(ctx, s.db, `UPDATE schedule_runs SET status = ?, started_at = ? WHERE id = ? AND status = ?
		AND NOT EXISTS (SELECT 1 FROM schedule_runs r WHERE r.schedule_id = ? AND r.status = ?)`,
		RunRunning, now, id, RunQueued, scheduleID, RunRunning)
	if err != nil {
		return ScheduleRun{}, false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ScheduleRun{}, false, nil
	}
	r, err := s.GetScheduleRun(ctx, id)
	return r, err == nil, err
}

// ExpireScheduleRuns records the runs of a schedule still running since before t as failed
// with reason: the replica running them stopped without recording their end. It returns how
// many it changed.
func (s *Store) ExpireScheduleRuns(ctx context.Context, scheduleID string, t time.Time, reason string) (int64, error) {
	res, err := s.exec(ctx, s.db, `UPDATE schedule_runs SET status = ?, error = ?, finished_at = ?
		WHERE schedule_id = ? AND status = ? AND started_at < ?`, RunFailed, reason, micros(s.now().UTC()), scheduleID, RunRunning, micros(t))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SetScheduleRunSandbox records the sandbox (or function run) a running run uses.
func (s *Store) SetScheduleRunSandbox(ctx context.Context, id, sandboxID, functionRunID string) error {
	_, err := s.exec(ctx, s.db, `UPDATE schedule_runs SET sandbox_id = ?, function_run_id = ? WHERE id = ?`, sandboxID, functionRunID, id)
	return err
}

// FinishScheduleRun records a running run's end.
func (s *Store) FinishScheduleRun(ctx context.Context, r ScheduleRun) error {
	_, err := s.exec(ctx, s.db, `UPDATE schedule_runs SET status = ?, finished_at = ?, exit_code = ?, output = ?, error = ?,
		sandbox_id = ?, function_run_id = ? WHERE id = ?`,
		r.Status, micros(s.now().UTC()), r.ExitCode, r.Output, r.Error, r.SandboxID, r.FunctionRunID, r.ID)
	return err
}

// GetScheduleRun returns one run.
func (s *Store) GetScheduleRun(ctx context.Context, id string) (ScheduleRun, error) {
	return queryOne(ctx, s, `SELECT `+scheduleRunCols+` FROM schedule_runs WHERE id = ?`, scanScheduleRun, id)
}

// ListScheduleRuns returns a schedule's runs, newest instant first, at most limit (<= 0: 100).
func (s *Store) ListScheduleRuns(ctx context.Context, scheduleID string, limit int) ([]ScheduleRun, error) {
	return queryAll(ctx, s, s.db, `SELECT `+scheduleRunCols+` FROM schedule_runs WHERE schedule_id = ?
		ORDER BY scheduled_for DESC, created_at DESC, id DESC LIMIT ?`, scanScheduleRun, scheduleID, pageLimit(limit))
}

// schedulesSchema is the schedules tables' part of each migration.
var schedulesSchema = []schemaStep{
	{10, []string{
		`CREATE TABLE schedules (
			id              TEXT PRIMARY KEY,
			team_id         TEXT NOT NULL REFERENCES teams(id),
			name            TEXT NOT NULL DEFAULT '',
			cron            TEXT NOT NULL,
			timezone        TEXT NOT NULL,
			function_id     TEXT NOT NULL DEFAULT '',
			template        TEXT NOT NULL DEFAULT '',
			cmd             TEXT NOT NULL DEFAULT '',
			payload         TEXT NOT NULL DEFAULT 'null',
			overlap         TEXT NOT NULL,
			missed          TEXT NOT NULL,
			enabled         INTEGER NOT NULL,
			timeout_seconds BIGINT NOT NULL DEFAULT 0,
			checked_until   BIGINT NOT NULL,
			created_at      BIGINT NOT NULL,
			updated_at      BIGINT NOT NULL
		)`,
		`CREATE INDEX schedules_team ON schedules (team_id, created_at)`,
		// A cron instant is claimed by inserting its row: the unique key makes it happen once,
		// whatever the number of server replicas.
		`CREATE TABLE schedule_runs (
			id              TEXT PRIMARY KEY,
			schedule_id     TEXT NOT NULL,
			team_id         TEXT NOT NULL,
			trigger_kind    TEXT NOT NULL,
			scheduled_for   BIGINT NOT NULL,
			status          TEXT NOT NULL,
			created_at      BIGINT NOT NULL,
			started_at      BIGINT NOT NULL DEFAULT 0,
			finished_at     BIGINT NOT NULL DEFAULT 0,
			sandbox_id      TEXT NOT NULL DEFAULT '',
			function_run_id TEXT NOT NULL DEFAULT '',
			exit_code       BIGINT NOT NULL DEFAULT -1,
			output          TEXT NOT NULL DEFAULT '',
			error           TEXT NOT NULL DEFAULT '',
			UNIQUE (schedule_id, trigger_kind, scheduled_for)
		)`,
		`CREATE INDEX schedule_runs_status ON schedule_runs (schedule_id, status)`,
	}},
}

// DBNow is the database's clock (PostgreSQL's clock_timestamp(), so every replica on one
// database agrees on what time it is); SQLite, one machine by design, answers the local clock.
func (s *Store) DBNow(ctx context.Context) (time.Time, error) {
	if s.dialect != Postgres {
		return s.now().UTC(), nil
	}
	var us int64
	if err := s.db.QueryRowContext(ctx, `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT`).Scan(&us); err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(us).UTC(), nil
}
