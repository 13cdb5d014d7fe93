package store

import (
	"context"
	"database/sql"
	"hash/fnv"
	"sync"
)

// Lock is a named lock shared by every server replica on the same database: background work
// that must run on one replica at a time (the TTL reaper) holds it. On PostgreSQL it is a session
// advisory lock held on one pooled connection, so it is let go when the holder's process or
// connection dies; on SQLite (one replica by design) it is always held. Safe for concurrent use.
type Lock struct {
	s   *Store
	key int64

	mu   sync.Mutex
	conn *sql.Conn // PostgreSQL: the session holding the advisory lock; nil when not held
}

// NewLock returns the lock named name (not yet taken).
func (s *Store) NewLock(name string) *Lock {
	return &Lock{s: s, key: lockKey(name)}
}

// lockKey is the PostgreSQL advisory lock key of name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("pandastack lock " + name))
	return int64(h.Sum64())
}

// Hold reports whether this process holds the lock, taking it if it is free. A holder keeps it
// until Release (or until its session breaks: Hold then reports false and tries again).
func (l *Lock) Hold(ctx context.Context) (bool, error) {
	if l.s.dialect != Postgres {
		return true, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		if err := l.conn.PingContext(ctx); err == nil {
			return true, nil
		}
		l.conn.Close() // the session (and the lock with it) is gone
		l.conn = nil
	}
	conn, err := l.s.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	var got bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, l.key).Scan(&got); err != nil || !got {
		conn.Close()
		return false, err
	}
	l.conn = conn
	return true, nil
}

// Release lets the lock go (another replica may take it).
func (l *Lock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, l.key)
		l.conn.Close()
		l.conn = nil
	}
}
