package v1

import "encoding/json"

// Functions and schedules (docs/functions.md).

// Function is the public function object: its name and its latest version.
type Function struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Version   int64  `json:"version"`
	State     string `json:"state"`
	Runtime   string `json:"runtime"`
	Handler   string `json:"handler"`
	URL       string `json:"url,omitempty"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

// Functions is GET /v1/functions: the team's functions, newest first.
type Functions struct {
	Functions []Function `json:"functions"`
}

// FunctionSpec is the `spec` part of a deploy (POST /v1/functions, multipart). Secrets are
// stored encrypted and never answered: a version lists their names only.
type FunctionSpec struct {
	Name           string            `json:"name"`
	Runtime        string            `json:"runtime"`
	Handler        string            `json:"handler"`
	Env            map[string]string `json:"env,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty"`
	MemoryMiB      int64             `json:"memory_mib,omitempty"`
	MaxConcurrency int64             `json:"max_concurrency,omitempty"`
	Retries        int64             `json:"retries,omitempty"`
}

// FunctionVersion is one immutable deploy of a function.
type FunctionVersion struct {
	FunctionID     string            `json:"function_id"`
	Version        int64             `json:"version"`
	State          string            `json:"state"`
	Error          string            `json:"error,omitempty"`
	Runtime        string            `json:"runtime"`
	Handler        string            `json:"handler"`
	Env            map[string]string `json:"env"`
	SecretNames    []string          `json:"secret_names"`
	TimeoutSeconds int64             `json:"timeout_seconds"`
	MemoryMiB      int64             `json:"memory_mib"`
	MaxConcurrency int64             `json:"max_concurrency"`
	Retries        int64             `json:"retries"`
	BundleBytes    int64             `json:"bundle_bytes"`
	BundleSHA256   string            `json:"bundle_sha256"`
	SnapshotID     string            `json:"snapshot_id,omitempty"`
	CreatedAt      string            `json:"created_at"`
}

// FunctionVersions is GET /v1/functions/{id}/versions, newest first.
type FunctionVersions struct {
	Versions []FunctionVersion `json:"versions"`
}

// InvokeRequest is the body of POST /v1/functions/{id}/invoke.
type InvokeRequest struct {
	Payload json.RawMessage `json:"payload,omitempty"`
}

// FunctionError is a failed invocation's error: the exception's type, message and traceback
// (or the platform's: timeout, runtime).
type FunctionError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// FunctionRun is one invocation (sync, async or by a schedule) and its outcome. Status:
// queued, running, succeeded, failed, timed_out.
type FunctionRun struct {
	ID         string          `json:"id"`
	FunctionID string          `json:"function_id"`
	Version    int64           `json:"version"`
	Trigger    string          `json:"trigger"`
	Status     string          `json:"status"`
	Attempts   int64           `json:"attempts"`
	Result     json.RawMessage `json:"result,omitempty"`
	Logs       string          `json:"logs"`
	Error      *FunctionError  `json:"error,omitempty"`
	DurationMS int64           `json:"duration_ms"`
	CreatedAt  string          `json:"created_at"`
	FinishedAt string          `json:"finished_at,omitempty"`
}

// FunctionRuns is GET /v1/functions/{id}/runs, newest first.
type FunctionRuns struct {
	Runs []FunctionRun `json:"runs"`
}

// Schedule is the public schedule object: a function, or a command in a fresh sandbox of a
// template, run at every instant Cron names in Timezone.
type Schedule struct {
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Cron           string          `json:"cron"`
	Timezone       string          `json:"timezone"`
	FunctionID     string          `json:"function_id,omitempty"`
	Template       string          `json:"template,omitempty"`
	Cmd            string          `json:"cmd,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Overlap        string          `json:"overlap"`
	Missed         string          `json:"missed"`
	Enabled        bool            `json:"enabled"`
	TimeoutSeconds int64           `json:"timeout_seconds"`
	NextRunAt      string          `json:"next_run_at,omitempty"`
	CreatedAt      string          `json:"created_at"`
}

// Schedules is GET /v1/schedules: the team's schedules, newest first.
type Schedules struct {
	Schedules []Schedule `json:"schedules"`
}

// CreateScheduleRequest is the body of POST /v1/schedules.
type CreateScheduleRequest struct {
	Name           string          `json:"name,omitempty"`
	Cron           string          `json:"cron"`
	Timezone       string          `json:"timezone,omitempty"`
	FunctionID     string          `json:"function_id,omitempty"`
	Template       string          `json:"template,omitempty"`
	Cmd            string          `json:"cmd,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Overlap        string          `json:"overlap,omitempty"`
	Missed         string          `json:"missed,omitempty"`
	Enabled        *bool           `json:"enabled,omitempty"`
	TimeoutSeconds int64           `json:"timeout_seconds,omitempty"`
}

// ScheduleRun is one run of a schedule. Trigger: cron or manual. Status: queued, running,
// succeeded, failed, timed_out, skipped (overlap: skip).
type ScheduleRun struct {
	ID            string `json:"id"`
	ScheduleID    string `json:"schedule_id"`
	Trigger       string `json:"trigger"`
	ScheduledFor  string `json:"scheduled_for"`
	Status        string `json:"status"`
	StartedAt     string `json:"started_at,omitempty"`
	FinishedAt    string `json:"finished_at,omitempty"`
	SandboxID     string `json:"sandbox_id,omitempty"`
	FunctionRunID string `json:"function_run_id,omitempty"`
	ExitCode      *int64 `json:"exit_code,omitempty"`
	Output        string `json:"output,omitempty"`
	Error         string `json:"error,omitempty"`
}

// ScheduleRuns is GET /v1/schedules/{id}/runs, newest instant first.
type ScheduleRuns struct {
	Runs []ScheduleRun `json:"runs"`
}
