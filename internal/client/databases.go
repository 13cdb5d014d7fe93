package client

import (
	"context"

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
