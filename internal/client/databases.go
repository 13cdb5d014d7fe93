package client

import (
	"context"
	"io"
	"net/url"
	"strconv"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Managed PostgreSQL (docs/databases.md).

// CreateDatabase creates a database; the answer carries the owner's password, shown once.
func (c *Client) CreateDatabase(ctx context.Context, spec v1.DatabaseSpec) (v1.Database, error) {
	return send[v1.Database](ctx, c, "POST", "/v1/databases", nil, spec)
}

// ListDatabases returns the team's databases, newest first.
func (c *Client) ListDatabases(ctx context.Context) ([]v1.Database, error) {
	out, err := send[v1.Databases](ctx, c, "GET", "/v1/databases", nil, nil)
	return out.Databases, err
}

// GetDatabase returns one database (without its password).
func (c *Client) GetDatabase(ctx context.Context, id string) (v1.Database, error) {
	return send[v1.Database](ctx, c, "GET", objPath("/v1/databases", id), nil, nil)
}

// DeleteDatabase deletes a database and its data.
func (c *Client) DeleteDatabase(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/databases", id), nil, nil, nil)
}

// QueryDatabase runs one statement as the database's owner; params are $1, $2, ….
func (c *Client) QueryDatabase(ctx context.Context, id, query string, params ...any) (v1.QueryResult, error) {
	return send[v1.QueryResult](ctx, c, "POST", objPath("/v1/databases", id)+"/query", nil, v1.QueryRequest{Query: query, Params: params})
}

// BranchDatabase makes a copy-on-write fork of a database (same owner and password).
func (c *Client) BranchDatabase(ctx context.Context, id, name string) (v1.Database, error) {
	return send[v1.Database](ctx, c, "POST", objPath("/v1/databases", id)+"/branches", nil, v1.BranchRequest{Name: name})
}

// RotateDatabasePassword gives the owner a new password; the answer carries it, once.
func (c *Client) RotateDatabasePassword(ctx context.Context, id string) (v1.Database, error) {
	return send[v1.Database](ctx, c, "POST", objPath("/v1/databases", id)+"/password", nil, nil)
}

// DatabaseStats returns a database's size, sessions, transactions and uptime.
func (c *Client) DatabaseStats(ctx context.Context, id string) (v1.DatabaseStats, error) {
	return send[v1.DatabaseStats](ctx, c, "GET", objPath("/v1/databases", id)+"/stats", nil, nil)
}

// DatabaseLogs returns the end of a database's postgres log (bytes 0: the server's default).
func (c *Client) DatabaseLogs(ctx context.Context, id string, bytes int) (string, error) {
	q := url.Values{}
	if bytes > 0 {
		q.Set("bytes", strconv.Itoa(bytes))
	}
	resp, err := c.Do(ctx, "GET", objPath("/v1/databases", id)+"/logs", q, nil, -1, "", "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 2<<20))
	return string(b), err
}

// BackupDatabase backs a database up now (a snapshot of its VM).
func (c *Client) BackupDatabase(ctx context.Context, id string) (v1.DatabaseBackup, error) {
	return send[v1.DatabaseBackup](ctx, c, "POST", objPath("/v1/databases", id)+"/backups", nil, nil)
}

// DatabaseBackups lists a database's backups, newest first.
func (c *Client) DatabaseBackups(ctx context.Context, id string) ([]v1.DatabaseBackup, error) {
	out, err := send[v1.DatabaseBackups](ctx, c, "GET", objPath("/v1/databases", id)+"/backups", nil, nil)
	return out.Backups, err
}

// RestoreDatabase makes a new database from a backup of one.
func (c *Client) RestoreDatabase(ctx context.Context, id string, req v1.RestoreRequest) (v1.Database, error) {
	return send[v1.Database](ctx, c, "POST", objPath("/v1/databases", id)+"/restore", nil, req)
}
