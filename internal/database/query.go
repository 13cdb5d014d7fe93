package database

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Limits of the HTTP query broker.
const (
	// MaxQueryBytes bounds a request body; MaxResultBytes the values of one answer.
	MaxQueryBytes  = 10 << 20
	MaxResultBytes = 10 << 20
	// StatementTimeout is each statement's statement_timeout.
	StatementTimeout = 30 * time.Second
	// MaxParams and MaxBatch bound one request's parameters and statements.
	MaxParams = 65535
	MaxBatch  = 1000
)

// PgError is a statement's failure in the database: its SQLSTATE and words, for the caller.
type PgError struct{ *pgconn.PgError }

// Wire is e as the broker answers it.
func (e PgError) Wire() v1.QueryError {
	return v1.QueryError{Code: "query_failed", Message: e.Message, SQLState: e.Code, Detail: e.Detail, Hint: e.Hint, Position: e.Position}
}

// Credentials are who a broker connection logs in as.
type Credentials struct{ User, Password, Database string }

// connect opens a connection to d's postgres as creds through its tunnel; postgres checks the
// password. A failed login is errdefs.Unauthorized.
func (s *Service) connect(ctx context.Context, d store.Database, creds Credentials) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig("sslmode=disable connect_timeout=120")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = s.Host(d), Port, creds.User, creds.Password, creds.Database
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) { return s.Dial(ctx, d, Port) }
	cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"tunnel"}, nil }
	cfg.RuntimeParams = map[string]string{"statement_timeout": strconv.Itoa(int(StatementTimeout.Milliseconds())),
		"application_name": "pandastack-broker"}
	s.Active(d.ID, 1)
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		s.Active(d.ID, -1)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000" || pe.Code == "3D000") {
			return nil, errdefs.New(errdefs.Unauthorized, "the database refused the login: %s (SQLSTATE %s)", pe.Message, pe.Code)
		}
		if e, ok := errdefs.As(err); ok {
			return nil, e
		}
		return nil, errdefs.New(errdefs.Unavailable, "database %s cannot be reached: %v", d.ID, err)
	}
	return c, nil
}

// release closes a broker connection of d.
func (s *Service) release(ctx context.Context, d store.Database, c *pgconn.PgConn) {
	c.Close(context.WithoutCancel(ctx))
	s.Active(d.ID, -1)
}

// ownerConn connects to the team's database as its owner (the API key is the credential); the
// caller releases the connection.
func (s *Service) ownerConn(ctx context.Context, teamID, id string) (store.Database, *pgconn.PgConn, error) {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return d, nil, err
	}
	pw, err := s.Password(d)
	if err != nil {
		return d, nil, fmt.Errorf("database %s: its password: %w", d.ID, err)
	}
	c, err := s.connect(ctx, d, Credentials{User: d.Owner, Password: pw, Database: d.DBName})
	return d, c, err
}

// Query runs one statement on the team's database as its owner (the API-key path).
func (s *Service) Query(ctx context.Context, teamID, id string, q v1.QueryRequest) (v1.QueryResult, error) {
	d, c, err := s.ownerConn(ctx, teamID, id)
	if err != nil {
		return v1.QueryResult{}, err
	}
	defer s.release(ctx, d, c)
	budget := MaxResultBytes
	return run(ctx, c, q, true, &budget)
}

// SQLRequest is a Neon /sql request: one statement, or a batch run in one transaction.
type SQLRequest struct {
	Query   string            `json:"query"`
	Params  []any             `json:"params"`
	Queries []v1.QueryRequest `json:"queries"`
}

// SQLOptions are a /sql request's Neon-* headers.
type SQLOptions struct {
	ArrayMode bool
	Isolation string // Neon-Batch-Isolation-Level: ReadUncommitted, ReadCommitted, RepeatableRead, Serializable
	ReadOnly  bool
}

// SQL answers a Neon /sql request for the database named by host (<id>.db.<domain>), or, at the
// API's own host, by the Neon-Connection-String connStr's host; connStr's user and password are
// the credential, checked by postgres.
// The answer is a v1.QueryResult, or a v1.QueryBatch for a batch.
func (s *Service) SQL(ctx context.Context, host, connStr string, req SQLRequest, o SQLOptions) (any, error) {
	u, err := url.Parse(connStr)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.User == nil {
		return nil, errdefs.Invalidf("Neon-Connection-String must be the database's postgres:// URL with its user and password")
	}
	id, ok := s.idOfHost(host)
	connID, connOK := s.idOfHost(u.Host)
	switch {
	case !ok && !connOK:
		return nil, errdefs.NotFoundf("the connection string's host %q is not a database host name (<id>.%s)", trunc(u.Hostname()), s.Domain())
	case !ok: // the API's own host: the connection string names the database
		id = connID
	case connID != id:
		return nil, errdefs.Invalidf("the connection string names host %q, not this database (%s)", trunc(u.Hostname()), id)
	}
	pw, _ := u.User.Password()
	creds := Credentials{User: u.User.Username(), Password: pw, Database: strings.TrimPrefix(u.Path, "/")}
	if creds.Database == "" {
		creds.Database = creds.User
	}
	d, err := s.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := s.connect(ctx, d, creds)
	if err != nil {
		return nil, err
	}
	defer s.release(ctx, d, c)
	budget := MaxResultBytes
	if req.Queries == nil {
		return run(ctx, c, v1.QueryRequest{Query: req.Query, Params: req.Params}, o.ArrayMode, &budget)
	}
	if len(req.Queries) > MaxBatch {
		return nil, errdefs.Invalidf("at most %d queries in one batch", MaxBatch)
	}
	begin := "BEGIN"
	switch o.Isolation {
	case "":
	case "ReadUncommitted", "ReadCommitted", "RepeatableRead", "Serializable":
		begin += " ISOLATION LEVEL " + map[string]string{"ReadUncommitted": "READ UNCOMMITTED", "ReadCommitted": "READ COMMITTED",
			"RepeatableRead": "REPEATABLE READ", "Serializable": "SERIALIZABLE"}[o.Isolation]
	default:
		return nil, errdefs.Invalidf("Neon-Batch-Isolation-Level must be ReadUncommitted, ReadCommitted, RepeatableRead or Serializable")
	}
	if o.ReadOnly {
		begin += " READ ONLY"
	}
	if err := c.Exec(ctx, begin).Close(); err != nil {
		return nil, queryErr(err)
	}
	out := v1.QueryBatch{Results: []v1.QueryResult{}}
	for _, q := range req.Queries {
		res, err := run(ctx, c, q, o.ArrayMode, &budget)
		if err != nil {
			c.Exec(ctx, "ROLLBACK").Close()
			return nil, err
		}
		out.Results = append(out.Results, res)
	}
	if err := c.Exec(ctx, "COMMIT").Close(); err != nil {
		return nil, queryErr(err)
	}
	return out, nil
}

// idOfHost is the database id of a host name <id>.db.<domain>[:port].
func (s *Service) idOfHost(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+s.Domain())
	return label, ok && IDPattern.MatchString(label)
}

// IsHost says whether host names a database (the server routes its /sql requests here).
func (s *Service) IsHost(host string) bool {
	_, ok := s.idOfHost(host)
	return ok
}

// run executes one statement with text parameters and text results, within *budget bytes.
func run(ctx context.Context, c *pgconn.PgConn, q v1.QueryRequest, arrays bool, budget *int) (v1.QueryResult, error) {
	if strings.TrimSpace(q.Query) == "" {
		return v1.QueryResult{}, errdefs.Invalidf("query is empty")
	}
	if len(q.Params) > MaxParams {
		return v1.QueryResult{}, errdefs.Invalidf("at most %d params", MaxParams)
	}
	params := make([][]byte, len(q.Params))
	for i, p := range q.Params {
		v, err := textParam(p)
		if err != nil {
			return v1.QueryResult{}, errdefs.Invalidf("params[%d]: %v", i, err)
		}
		params[i] = v
	}
	rr := c.ExecParams(ctx, q.Query, params, nil, nil, nil)
	out := v1.QueryResult{Rows: []any{}, RowAsArray: arrays, Fields: []v1.QueryField{}}
	fds := rr.FieldDescriptions()
	for _, f := range fds {
		out.Fields = append(out.Fields, v1.QueryField{Name: f.Name, DataTypeID: f.DataTypeOID, TableID: f.TableOID,
			ColumnID: f.TableAttributeNumber, DataTypeSize: f.DataTypeSize, DataTypeModifier: f.TypeModifier, Format: "text"})
	}
	for rr.NextRow() {
		vals := rr.Values()
		row := make([]any, len(vals))
		for i, v := range vals {
			*budget -= len(v) + 8
			if v != nil {
				row[i] = string(v)
			}
		}
		if *budget < 0 {
			rr.Close()
			return v1.QueryResult{}, errdefs.New(errdefs.TooLarge, "the result is larger than %d bytes: select fewer rows or columns (LIMIT)", MaxResultBytes)
		}
		if arrays {
			out.Rows = append(out.Rows, row)
			continue
		}
		obj := make(map[string]any, len(row))
		for i, f := range fds {
			obj[f.Name] = row[i]
		}
		out.Rows = append(out.Rows, obj)
	}
	tag, err := rr.Close()
	if err != nil {
		return v1.QueryResult{}, queryErr(err)
	}
	out.Command, _, _ = strings.Cut(tag.String(), " ")
	out.RowCount = tag.RowsAffected()
	return out, nil
}

// textParam is a JSON parameter in PostgreSQL's text form: strings as they are, numbers and
// booleans as JSON writes them, objects and arrays as JSON text (for json/jsonb), null as NULL.
func textParam(p any) ([]byte, error) {
	switch v := p.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(v), nil
	case bool:
		return []byte(strconv.FormatBool(v)), nil
	case json.Number:
		return []byte(v.String()), nil
	case float64:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64)), nil
	default:
		return json.Marshal(v)
	}
}

// queryErr turns a statement's failure into PgError (SQLSTATE for the caller), else passes it on.
func queryErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return PgError{pe}
	}
	return errdefs.New(errdefs.Unavailable, "the database connection failed: %v", err)
}

// Stats are a database's figures, read from postgres as its owner (a suspended database is
// woken for them).
func (s *Service) Stats(ctx context.Context, teamID, id string) (v1.DatabaseStats, error) {
	d, c, err := s.ownerConn(ctx, teamID, id)
	if err != nil {
		return v1.DatabaseStats{}, err
	}
	defer s.release(ctx, d, c)
	budget := MaxResultBytes
	res, err := run(ctx, c, v1.QueryRequest{Query: `SELECT pg_database_size(current_database()),
		(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()),
		xact_commit, xact_rollback, extract(epoch FROM now() - pg_postmaster_start_time())::bigint
		FROM pg_stat_database WHERE datname = current_database()`}, true, &budget)
	if err != nil {
		return v1.DatabaseStats{}, err
	}
	if len(res.Rows) != 1 {
		return v1.DatabaseStats{}, fmt.Errorf("database %s: no statistics", d.ID)
	}
	var n [5]int64
	for i, v := range res.Rows[0].([]any) {
		if str, ok := v.(string); ok {
			n[i], _ = strconv.ParseInt(str, 10, 64)
		}
	}
	return v1.DatabaseStats{SizeBytes: n[0], Connections: n[1], TransactionsCommitted: n[2], TransactionsRolledBack: n[3],
		UptimeSeconds: n[4]}, nil
}
