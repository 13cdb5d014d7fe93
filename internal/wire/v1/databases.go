package v1

// Managed PostgreSQL (docs/databases.md).

// DatabaseSpec is POST /v1/databases. Zero sizes take the postgres template's.
type DatabaseSpec struct {
	Name                string   `json:"name"`
	Version             string   `json:"version,omitempty"`
	VCPUs               int64    `json:"vcpus,omitempty"`
	MemoryMiB           int64    `json:"memory_mib,omitempty"`
	StorageGiB          int64    `json:"storage_gib,omitempty"`
	Extensions          []string `json:"extensions,omitempty"`
	SuspendAfterSeconds *int64   `json:"suspend_after_seconds,omitempty"`
}

// DatabaseConnection is how to reach a database: uri (postgres:// through the server's SNI
// router, TLS), pooler_uri (PgBouncer, when the pooler is on) and http_url (Neon's /sql wire
// format; the connection string is the credential).
type DatabaseConnection struct {
	URI       string `json:"uri"`
	PoolerURI string `json:"pooler_uri,omitempty"`
	HTTPURL   string `json:"http_url,omitempty"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	User      string `json:"user"`
	Database  string `json:"database"`
}

// Database is the public database object. Password is set only in the answer to its create
// (shown once); Connection.URI then carries it too, otherwise a placeholder.
type Database struct {
	ID                  string             `json:"id"`
	Name                string             `json:"name"`
	State               string             `json:"state"`
	Version             string             `json:"version"`
	VCPUs               int64              `json:"vcpus"`
	MemoryMiB           int64              `json:"memory_mib"`
	StorageGiB          int64              `json:"storage_gib"`
	Extensions          []string           `json:"extensions"`
	SuspendAfterSeconds int64              `json:"suspend_after_seconds"`
	SandboxID           string             `json:"sandbox_id"`
	ParentID            string             `json:"parent_id,omitempty"`
	Connection          DatabaseConnection `json:"connection"`
	Password            string             `json:"password,omitempty"`
	Note                string             `json:"note,omitempty"`
	CreatedAt           string             `json:"created_at"`
}

// Databases is GET /v1/databases: the team's databases, newest first.
type Databases struct {
	Databases []Database `json:"databases"`
}

// BranchRequest is POST /v1/databases/{id}/branches.
type BranchRequest struct {
	Name string `json:"name"`
}

// DatabaseStats is GET /v1/databases/{id}/stats.
type DatabaseStats struct {
	SizeBytes              int64 `json:"size_bytes"`
	Connections            int64 `json:"connections"`
	TransactionsCommitted  int64 `json:"transactions_committed"`
	TransactionsRolledBack int64 `json:"transactions_rolled_back"`
	UptimeSeconds          int64 `json:"uptime_seconds"`
}

// DatabaseBackup is one backup of a database: a snapshot of its VM (memory and disk).
type DatabaseBackup struct {
	ID         string `json:"id"`
	DatabaseID string `json:"database_id"`
	SizeBytes  int64  `json:"size_bytes"`
	CreatedAt  string `json:"created_at"`
	// Published: the backup is in the blob store too, so it outlives its host (a restore pulls it).
	Published bool `json:"published"`
}

// DatabaseBackups is GET /v1/databases/{id}/backups, newest first.
type DatabaseBackups struct {
	Backups []DatabaseBackup `json:"backups"`
}

// RestoreRequest is POST /v1/databases/{id}/restore: a new database called name from the backup
// backup_id, or else from the newest backup taken at or before to_time (default: now).
type RestoreRequest struct {
	Name     string `json:"name"`
	ToTime   string `json:"to_time,omitempty"`
	BackupID string `json:"backup_id,omitempty"`
}

// QueryRequest is POST /v1/databases/{id}/query: one statement and its parameters ($1, $2, …).
type QueryRequest struct {
	Query  string `json:"query"`
	Params []any  `json:"params,omitempty"`
}

// QueryField is one column of a result.
type QueryField struct {
	Name             string `json:"name"`
	DataTypeID       uint32 `json:"dataTypeID"`
	TableID          uint32 `json:"tableID"`
	ColumnID         uint16 `json:"columnID"`
	DataTypeSize     int16  `json:"dataTypeSize"`
	DataTypeModifier int32  `json:"dataTypeModifier"`
	Format           string `json:"format"`
}

// QueryError is a failed statement's error answer: the error envelope's code is
// "query_failed", SQLState the PostgreSQL error code (e.g. 42P01).
type QueryError struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	SQLState string `json:"sqlstate,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Hint     string `json:"hint,omitempty"`
	Position int32  `json:"position,omitempty"`
}

// QueryResult is a statement's result, in Neon's /sql shape: each row an array of values in
// PostgreSQL's text form (null for NULL) when RowAsArray, else an object by column name; the
// command tag's verb and the rows it affected or returned.
type QueryResult struct {
	Fields     []QueryField `json:"fields"`
	Rows       []any        `json:"rows"`
	Command    string       `json:"command"`
	RowCount   int64        `json:"rowCount"`
	RowAsArray bool         `json:"rowAsArray"`
}

// QueryBatch is a Neon /sql transaction: its statements' results in order.
type QueryBatch struct {
	Results []QueryResult `json:"results"`
}
