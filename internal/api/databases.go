package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/database"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Databases (docs/databases.md): thin handlers over internal/database.

func (s *Server) databaseView(d store.Database, password, note string) v1.Database {
	return v1.Database{ID: d.ID, Name: d.Name, State: d.State, Version: d.Version, VCPUs: d.VCPUs, MemoryMiB: d.MemoryMiB,
		StorageGiB: d.StorageGiB, Extensions: orEmpty(d.Extensions), SuspendAfterSeconds: d.SuspendAfterSeconds, SandboxID: d.SandboxID, ParentID: d.ParentID,
		Connection: s.databases.Connection(d, password), Password: password, Note: note, CreatedAt: v1.Timestamp(d.CreatedAt)}
}

// newDatabase answers a request that makes a database (create, branch, restore): it reads the
// body into a T, holds a database and a sandbox of the team's quota (a database is a sandbox of the team's) and
// answers 201 with what build returns (a password and a note only for a create).
func newDatabase[T any](s *Server, w http.ResponseWriter, r *http.Request,
	build func(ctx context.Context, teamID string, req T) (d store.Database, password, note string, err error)) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[T](s, w, r, false)
	if !ok {
		return
	}
	release, err := s.holdSandboxesAnd(r.Context(), id.TeamID, database.Template, 1, Quota{Databases: 1})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	d, password, note, err := build(r.Context(), id.TeamID, req)
	s.reply(w, r, http.StatusCreated, s.databaseView(d, password, note), err)
}

// createDatabase restores a database and answers 201 with it and its password (shown once).
func (s *Server) createDatabase(w http.ResponseWriter, r *http.Request) {
	newDatabase(s, w, r, s.databases.Create)
}

func (s *Server) listDatabases(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.databases.List(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Databases{Databases: viewsOf(list, func(d store.Database) v1.Database {
		return s.databaseView(d, "", "")
	})}, err)
}

func (s *Server) getDatabase(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	d, err := s.databases.Get(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusOK, s.databaseView(d, "", ""), err)
}

// branchDatabase forks a database into a new one (copy-on-write, same credentials).
func (s *Server) branchDatabase(w http.ResponseWriter, r *http.Request) {
	newDatabase(s, w, r, func(ctx context.Context, teamID string, req v1.BranchRequest) (store.Database, string, string, error) {
		d, err := s.databases.Branch(ctx, teamID, r.PathValue("id"), req.Name)
		return d, "", "", err
	})
}

// rotateDatabasePassword gives the owner a new password, answered once.
func (s *Server) rotateDatabasePassword(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	d, password, err := s.databases.RotatePassword(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusOK, s.databaseView(d, password, ""), err)
}

func databaseBackupView(databaseID string) func(store.Snapshot) v1.DatabaseBackup {
	return func(sn store.Snapshot) v1.DatabaseBackup {
		return v1.DatabaseBackup{ID: sn.ID, DatabaseID: databaseID, SizeBytes: sn.SizeBytes, CreatedAt: v1.Timestamp(sn.CreatedAt), Published: sn.Published}
	}
}

// backupDatabase snapshots the database's VM now.
func (s *Server) backupDatabase(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	sn, err := s.databases.Backup(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusCreated, databaseBackupView(r.PathValue("id"))(sn), err)
}

func (s *Server) listDatabaseBackups(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.databases.Backups(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusOK, v1.DatabaseBackups{Backups: viewsOf(list, databaseBackupView(r.PathValue("id")))}, err)
}

// restoreDatabase makes a new database from a backup.
func (s *Server) restoreDatabase(w http.ResponseWriter, r *http.Request) {
	newDatabase(s, w, r, func(ctx context.Context, teamID string, req v1.RestoreRequest) (store.Database, string, string, error) {
		var to time.Time // zero: the newest backup
		if req.ToTime != "" {
			t, err := time.Parse(time.RFC3339Nano, req.ToTime)
			if err != nil {
				return store.Database{}, "", "", invalid("to_time must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
			}
			to = t
		}
		d, err := s.databases.Restore(ctx, teamID, r.PathValue("id"), req.Name, req.BackupID, to)
		return d, "", "", err
	})
}

// databaseLogs answers the end of the postgres log as text (?bytes=, default 64 KiB, at most 1 MiB).
func (s *Server) databaseLogs(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	n := 64 << 10
	if v := r.URL.Query().Get("bytes"); v != "" {
		b, err := strconv.Atoi(v)
		if err != nil || b < 1 || b > database.MaxLogBytes {
			s.writeError(w, r, invalid("bytes must be an integer 1-%d", database.MaxLogBytes))
			return
		}
		n = b
	}
	text, err := s.databases.Logs(r.Context(), id.TeamID, r.PathValue("id"), n)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, text)
}

// queryDatabase runs one statement as the database's owner (the API key is the credential).
func (s *Server) queryDatabase(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	var q v1.QueryRequest
	if err := decodeJSONWithin(w, r, &q, false, database.MaxQueryBytes, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.databases.Query(r.Context(), id.TeamID, r.PathValue("id"), q)
	var pe database.PgError
	if errors.As(err, &pe) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": pe.Wire()})
		return
	}
	s.reply(w, r, http.StatusOK, res, err)
}

// databaseSQL answers Neon's /sql wire format at <id>.db.<domain>/sql: the Neon-Connection-String
// header (the database's own postgres:// URL) is the credential, postgres checks it.
func (s *Server) databaseSQL(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodOptions {
		sqlCORS(w)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	sqlCORS(w)
	if r.Method != http.MethodPost || r.URL.Path != "/sql" {
		s.sqlError(w, r, notFound("a database host answers POST /sql only (Neon's HTTP query format)"))
		return
	}
	var req database.SQLRequest
	if err := decodeJSONWithin(w, r, &req, false, database.MaxQueryBytes, true); err != nil {
		s.sqlError(w, r, err)
		return
	}
	o := database.SQLOptions{ArrayMode: strings.EqualFold(r.Header.Get("Neon-Array-Mode"), "true"),
		Isolation: r.Header.Get("Neon-Batch-Isolation-Level"), ReadOnly: strings.EqualFold(r.Header.Get("Neon-Batch-Read-Only"), "true")}
	res, err := s.databases.SQL(r.Context(), r.Host, r.Header.Get("Neon-Connection-String"), req, o)
	if err != nil {
		s.sqlError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// sqlError answers /sql's errors in Neon's shape: {message, code} with the SQLSTATE as code when
// the database refused the statement.
func (s *Server) sqlError(w http.ResponseWriter, r *http.Request, err error) {
	var pe database.PgError
	if errors.As(err, &pe) {
		q := pe.Wire()
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": q.Message, "code": q.SQLState, "detail": q.Detail,
			"hint": q.Hint, "position": q.Position, "severity": pe.Severity})
		return
	}
	e, ok := toAPIError(err)
	if !ok {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, e.status, map[string]any{"message": e.message, "code": e.code})
}

func sqlCORS(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Neon-Connection-String, Neon-Raw-Text-Output, Neon-Array-Mode, Neon-Batch-Isolation-Level, Neon-Batch-Read-Only, Neon-Batch-Deferrable, Authorization")
}

// Databases is the server's database service (the SNI router dials through it).
func (s *Server) Databases() *database.Service { return s.databases }
