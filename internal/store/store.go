// Package store owns the control plane's state of record: teams, API keys (hashed), hosts,
// sandboxes, snapshots, volumes, the template catalog and team templates, functions and
// schedules — a file per domain,
// each with its queries and its tables' part of every migration (migrate.go assembles them into
// one set of versioned migrations); this file holds what the domains share (placeholders, row
// scanning and paging, the soft-deleted tables' helpers). One schema serves both backends:
// SQLite (modernc.org/sqlite, pure Go, WAL) for single-machine installs and PostgreSQL (pgx) for
// many server replicas. Queries are written once with `?` placeholders and portable SQL;
// timestamps are stored as BIGINT Unix microseconds so both backends order and compare them the
// same way.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"           // registers the "sqlite" database/sql driver
)

// Errors callers branch on.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("already exists")
	ErrBadCursor = errors.New("malformed cursor")
)

// Dialect names the SQL backend.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Store is the handle the rest of the control plane uses. It is safe for concurrent use.
type Store struct {
	db      *sql.DB
	dialect Dialect
	now     func() time.Time

	teamLocks sync.Map // team id → *sync.Mutex (WithTeamLock, this process's half)
}

// Open opens (creating if needed) and migrates the database named by dsn:
//   - "" or a file path or "sqlite:PATH" / "file:PATH": SQLite;
//   - "postgres://…" or "postgresql://…": PostgreSQL.
func Open(ctx context.Context, dsn string) (*Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return OpenPostgres(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite:"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	case strings.HasPrefix(dsn, "file:"):
		return OpenSQLite(ctx, strings.TrimPrefix(dsn, "file:"))
	case dsn == "":
		return nil, errors.New("store: empty database URL (give a SQLite file path or a postgres:// URL)")
	default:
		return OpenSQLite(ctx, dsn)
	}
}

// OpenSQLite opens the SQLite database file at path.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty SQLite path")
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	}
	// WAL lets readers run beside the writer; busy_timeout makes a second writer wait instead of
	// failing; _txlock=immediate takes the write lock at BEGIN, so a read-then-write transaction
	// never dies with SQLITE_BUSY on upgrade.
	q := url.Values{}
	q.Set("_busy_timeout", "10000")
	q.Set("_journal_mode", "WAL")
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return open(ctx, db, SQLite)
}

// PostgresPoolSize is how many connections one replica keeps to PostgreSQL at most (size the
// server's max_connections for it: replicas × this, plus headroom).
const PostgresPoolSize = 32

// OpenPostgres opens the PostgreSQL database at url.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres: %w", err)
	}
	// No JIT compilation of queries (unless the DSN asks for it: jit=on): this store's statements
	// are short and run often, and PostgreSQL compiles anew on every execution whose estimated
	// cost passes jit_above_cost. The host list (ListHosts, read every second by each replica's
	// placement) passes it at a few hundred hosts: 1.1–1.9 s a read at 5,000 hosts, most of it
	// compiling, and up to 0.3 s of PostgreSQL's CPU a read at 1,000 (BenchmarkPlace in internal/scheduler).
	if _, set := cfg.RuntimeParams["jit"]; !set {
		cfg.RuntimeParams["jit"] = "off"
	}
	db := stdlib.OpenDB(*cfg)
	// Every open connection may stay idle: a pool that keeps fewer than it opens closes the
	// extras after each burst and dials them again on the next (a PostgreSQL backend per dial, its
	// catalog caches and plans cold). A fleet's heartbeats and creates make such bursts all the
	// time; idle connections still go after ConnMaxIdleTime.
	db.SetMaxOpenConns(PostgresPoolSize)
	db.SetMaxIdleConns(PostgresPoolSize)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return open(ctx, db, Postgres)
}

func open(ctx context.Context, db *sql.DB, d Dialect) (*Store, error) {
	s := &Store{db: db, dialect: d, now: time.Now}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: connect %s: %w", d, err)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the database.
func (s *Store) Close() error { return s.db.Close() }

// Dialect reports which backend this store uses.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ping checks the database answers (for /healthz).
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// rebind turns `?` placeholders into PostgreSQL's `$n`. Queries in this package never put a `?`
// inside a string literal.
func (s *Store) rebind(q string) string {
	if s.dialect != Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) exec(ctx context.Context, q querier, query string, args ...any) (sql.Result, error) {
	return q.ExecContext(ctx, s.rebind(query), args...)
}

func (s *Store) query(ctx context.Context, q querier, query string, args ...any) (*sql.Rows, error) {
	return q.QueryContext(ctx, s.rebind(query), args...)
}

func (s *Store) queryRow(ctx context.Context, q querier, query string, args ...any) *sql.Row {
	return q.QueryRowContext(ctx, s.rebind(query), args...)
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// isUnique reports whether err is a unique-constraint violation on either backend.
func isUnique(err error) bool {
	if err == nil {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "23505"
	}
	return strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// micros converts to the stored form; the zero time is stored as 0.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

func nullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// timeCol is a Scan destination that reads a stored time (BIGINT Unix microseconds; 0 or NULL is
// the zero time) into t.
func timeCol(t *time.Time) sql.Scanner { return column(func(n sql.NullInt64) { *t = nullMicros(n) }) }

// boolCol is a Scan destination that reads an INTEGER 0/1 column into b.
func boolCol(b *bool) sql.Scanner { return column(func(n sql.NullInt64) { *b = n.Int64 != 0 }) }

// column scans an integer column (as database/sql converts it into an int64) and hands it to set.
type column func(sql.NullInt64)

func (set column) Scan(src any) error {
	var n sql.NullInt64
	if err := n.Scan(src); err != nil {
		return err
	}
	set(n)
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// countBy runs q, a `SELECT key, COUNT(*) … GROUP BY key`, into a map.
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

// nonNil is s, or an empty list for nil (stored as `[]`, never `null`).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// scanner is what *sql.Row and *sql.Rows share: each table's scanX reads one row through it.
type scanner interface{ Scan(...any) error }

// scanFields makes the scan function of a row type from the Scan destinations of its columns,
// in the order of the query's columns.
func scanFields[T any](fields func(*T) []any) func(scanner) (T, error) {
	return func(sc scanner) (T, error) {
		var v T
		if err := sc.Scan(fields(&v)...); err != nil {
			var zero T
			return zero, err
		}
		return v, nil
	}
}

// scanOne reads a row of one column.
// inList is the placeholders of an IN list of vals, "(?, ?, …)", and vals as arguments (vals
// must not be empty).
func inList[T any](vals []T) (string, []any) {
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	return `(?` + strings.Repeat(`, ?`, len(vals)-1) + `)`, args
}

func scanOne[T any](sc scanner) (T, error) {
	var v T
	err := sc.Scan(&v)
	return v, err
}

// queryAll runs query on q and scans every row with scan (nil when there is none). The rows are
// closed when it returns, so a transaction may run its next statement at once.
func queryAll[T any](ctx context.Context, s *Store, q querier, query string, scan func(scanner) (T, error), args ...any) ([]T, error) {
	rows, err := s.query(ctx, q, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryOne scans the single row query returns; no row is ErrNotFound.
func queryOne[T any](ctx context.Context, s *Store, query string, scan func(scanner) (T, error), args ...any) (T, error) {
	v, err := scan(s.queryRow(ctx, s.db, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		var zero T
		return zero, ErrNotFound
	}
	return v, err
}

// claimEach claims rows one by one with an optimistic update: claim moves a row's lease in the
// value and returns the UPDATE (conditioned on the old lease) that records it; the rows whose
// update changed exactly one row are this caller's (another replica got the others).
func claimEach[T any](ctx context.Context, s *Store, rows []T, claim func(*T) (string, []any)) ([]T, error) {
	var out []T
	for _, r := range rows {
		q, args := claim(&r)
		res, err := s.exec(ctx, s.db, q, args...)
		if err != nil {
			return out, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			out = append(out, r)
		}
	}
	return out, nil
}

// conflictOr maps a unique-constraint violation to ErrConflict and returns any other err as is.
func conflictOr(err error) error {
	if isUnique(err) {
		return ErrConflict
	}
	return err
}

// Snapshots and volumes live on the host that made them and are deleted softly: the row stays,
// marked deleted = 1, so that a host that missed the delete is told again at its next reconcile.
// deletedIn, countLive and ownedRow serve both tables (table is one of ours, never caller input).

// deletedIn returns which of ids are rows of table marked deleted, in batches of 500.
func (s *Store) deletedIn(ctx context.Context, table string, ids []string) (map[string]bool, error) {
	return s.idsWhere(ctx, table, "deleted = 1", ids)
}

// idsWhere returns which of ids name rows of table that match where (with args).
func (s *Store) idsWhere(ctx context.Context, table, where string, ids []string, args ...any) (map[string]bool, error) {
	out := map[string]bool{}
	for len(ids) > 0 {
		n := min(len(ids), 500)
		batch := ids[:n]
		ids = ids[n:]
		in, inArgs := inList(batch)
		match, err := queryAll(ctx, s, s.db, `SELECT id FROM `+table+` WHERE (`+where+`) AND id IN `+in, scanOne[string], append(slices.Clone(args), inArgs...)...)
		if err != nil {
			return nil, err
		}
		for _, id := range match {
			out[id] = true
		}
	}
	return out, nil
}

// countLive counts the rows of table that are not marked deleted.
func (s *Store) countLive(ctx context.Context, table string) (int64, error) {
	var n int64
	err := s.queryRow(ctx, s.db, `SELECT COUNT(*) FROM `+table+` WHERE deleted = 0`).Scan(&n)
	return n, err
}

// ownedRow reports whether table has a row id of teamID, deleted or not: nil, ErrNotFound, or the
// query's error.
func (s *Store) ownedRow(ctx context.Context, table, teamID, id string) error {
	var one int
	err := s.queryRow(ctx, s.db, `SELECT 1 FROM `+table+` WHERE id = ? AND team_id = ?`, id, teamID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// listQuery is a list query before paging: `SELECT … FROM …`, its conditions (ANDed) and their
// arguments. at prefixes the created_at and id columns that order and cut pages ("s." or "").
type listQuery struct {
	sel   string
	at    string
	where []string
	args  []any
}

// pageLimit is a list's row limit: limit, or 100 when limit <= 0.
func pageLimit(limit int) int {
	if limit <= 0 {
		return 100
	}
	return limit
}

// queryPage runs a list query newest first (created_at, then id, descending) from after cursor
// ("" for the first page) and cuts one page: up to limit rows (<= 0 means 100), and the cursor of
// the next page ("" on the last one).
func queryPage[T any](ctx context.Context, s *Store, lq listQuery, limit int, cursor string,
	scan func(scanner) (T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	limit = pageLimit(limit)
	where, args := lq.where, lq.args
	if cursor != "" {
		at, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `(`+lq.at+`created_at < ? OR (`+lq.at+`created_at = ? AND `+lq.at+`id < ?))`)
		args = append(args, at, at, id)
	}
	q := lq.sel
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY ` + lq.at + `created_at DESC, ` + lq.at + `id DESC LIMIT ?`
	out, err := queryAll(ctx, s, s.db, q, scan, append(args, limit+1)...)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		at, id := key(out[len(out)-1])
		next = encodeCursor(micros(at), id)
	}
	return out, next, nil
}
