package store

import (
	"context"
	"time"
)

// Process exits (docs/events.md, "process.exited"): the exits of background processes that the
// hosts report (their agents look at the guests' process tables; the control plane never follows
// a process). A host reports an exit again until the report is acknowledged, and a woken or
// re-adopted sandbox may report one twice: the key (sandbox, pid, start) records each once. A
// host reports only for the sandboxes the store places on it; exits of a service's sandboxes
// (owner <> '') are not a team's events and are not recorded.

// ProcessExit is a background process that ended.
type ProcessExit struct {
	TeamID, SandboxID string
	Pid               int
	Tag               string
	ExitCode          int
	Signal            string
	StartedAt         time.Time
	ExitedAt          time.Time
	// RecordedAt is when the control plane learnt of it (the events' cursor).
	RecordedAt time.Time
}

var processExitsSchema = []schemaStep{
	{24, []string{
		`CREATE TABLE process_exits (
			sandbox_id TEXT NOT NULL, pid INTEGER NOT NULL, started_at BIGINT NOT NULL, team_id TEXT NOT NULL,
			tag TEXT NOT NULL DEFAULT '', exit_code INTEGER NOT NULL, signal TEXT NOT NULL DEFAULT '',
			exited_at BIGINT NOT NULL, recorded_at BIGINT NOT NULL,
			PRIMARY KEY (sandbox_id, pid, started_at)
		)`,
		`CREATE INDEX process_exits_team ON process_exits (team_id, recorded_at)`,
	}},
}

// RecordProcessExits records the exits hostID reports (those of sandboxes placed on it; others
// are ignored, as is an exit recorded before) and returns how many were new.
func (s *Store) RecordProcessExits(ctx context.Context, hostID string, exits []ProcessExit) (int, error) {
	n := 0
	now := micros(s.now())
	for _, e := range exits {
		res, err := s.exec(ctx, s.db, `INSERT INTO process_exits
			(sandbox_id, pid, started_at, team_id, tag, exit_code, signal, exited_at, recorded_at)
			SELECT id, ?, ?, team_id, ?, ?, ?, ?, ? FROM sandboxes WHERE id = ? AND host_id = ? AND owner = ''
			ON CONFLICT (sandbox_id, pid, started_at) DO NOTHING`,
			e.Pid, micros(e.StartedAt), e.Tag, e.ExitCode, e.Signal, micros(e.ExitedAt), now, e.SandboxID, hostID)
		if err != nil {
			return n, err
		}
		if k, _ := res.RowsAffected(); k > 0 {
			n++
		}
	}
	return n, nil
}

// ProcessExitsSince returns teamID's exits recorded after since, oldest first, at most limit.
func (s *Store) ProcessExitsSince(ctx context.Context, teamID string, since time.Time, limit int) ([]ProcessExit, error) {
	return queryAll(ctx, s, s.db, `SELECT team_id, sandbox_id, pid, tag, exit_code, signal, started_at, exited_at, recorded_at
		FROM process_exits WHERE team_id = ? AND recorded_at > ? ORDER BY recorded_at, sandbox_id, pid LIMIT ?`,
		func(sc scanner) (ProcessExit, error) {
			var e ProcessExit
			var started, exited, recorded int64
			err := sc.Scan(&e.TeamID, &e.SandboxID, &e.Pid, &e.Tag, &e.ExitCode, &e.Signal, &started, &exited, &recorded)
			e.StartedAt, e.ExitedAt, e.RecordedAt = fromMicros(started), fromMicros(exited), fromMicros(recorded)
			return e, err
		}, teamID, micros(since), limit)
}

// PruneProcessExits deletes the exits recorded before before.
func (s *Store) PruneProcessExits(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.exec(ctx, s.db, `DELETE FROM process_exits WHERE recorded_at < ?`, micros(before))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
