package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/store/pgtest"
)

// database is the bench's PostgreSQL: pgtest's throwaway server, one database, and a connection
// the bench reads the state of record through (counts, the final audit).
type database struct {
	pg  *pgtest.Server
	url string
	db  *sql.DB
}

func startDatabase(ctx context.Context) (*database, error) {
	pg, err := pgtest.Start()
	if err != nil {
		return nil, err
	}
	url, err := pg.NewDatabase(ctx, "scale")
	if err != nil {
		pg.Stop()
		return nil, err
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		pg.Stop()
		return nil, err
	}
	db.SetMaxOpenConns(2)
	return &database{pg: pg, url: url, db: db}, nil
}

func (d *database) stop() { d.db.Close(); d.pg.Stop() }

// postmaster is the pid of the PostgreSQL server (its data dir's postmaster.pid, first line).
func (d *database) postmaster() int {
	data, _ := os.ReadFile(filepath.Join(d.pg.Dir, "data", "postmaster.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	return pid
}

// cpuMs is PostgreSQL's CPU: the postmaster and all its backends.
func (d *database) cpuMs() float64 { return treeCPUMs(d.postmaster()) }

// xacts is how many transactions the bench database has committed or rolled back: with
// autocommit, one per statement outside an explicit transaction.
func (d *database) xacts(ctx context.Context) float64 {
	var n float64
	d.db.QueryRowContext(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n
}
