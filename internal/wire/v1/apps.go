package v1

// Git-deployed apps (docs/apps.md).

// AppBuild is how an app is built and started; every field overrides what detection found
// (empty: detected).
type AppBuild struct {
	// Framework is next, vite, cra, node, static or python.
	Framework string `json:"framework,omitempty"`
	Install   string `json:"install,omitempty"`
	Build     string `json:"build,omitempty"`
	Start     string `json:"start,omitempty"`
	Port      int    `json:"port,omitempty"`
}

// AppPlan is what a deploy will run: detected from the source, with the app's overrides applied.
// An unknown source has Framework "" and Problem saying what was found and what to set.
type AppPlan struct {
	Framework      string   `json:"framework"`
	PackageManager string   `json:"package_manager,omitempty"`
	Install        string   `json:"install"`
	Build          string   `json:"build"`
	Start          string   `json:"start"`
	Port           int      `json:"port"`
	Found          []string `json:"found"`
	Problem        string   `json:"problem,omitempty"`
}

// AppSpec is the body of POST /v1/apps and (every field optional) PATCH /v1/apps/{id}. Secrets
// are stored encrypted and never answered: an app lists their names only.
type AppSpec struct {
	Name    string            `json:"name,omitempty"`
	Branch  string            `json:"branch,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// SetEnv and SetSecrets add or change these variables, keeping the others; Unset removes
	// variables (env or secrets) by name. Env and Secrets replace all of theirs.
	SetEnv               map[string]string `json:"set_env,omitempty"`
	SetSecrets           map[string]string `json:"set_secrets,omitempty"`
	Unset                []string          `json:"unset,omitempty"`
	Build                *AppBuild         `json:"build,omitempty"`
	VCPUs                int64             `json:"vcpus,omitempty"`
	MemoryMiB            int64             `json:"memory_mib,omitempty"`
	SuspendAfterSeconds  *int64            `json:"suspend_after_seconds,omitempty"`
	MinInstances         *int64            `json:"min_instances,omitempty"`
	HealthTimeoutSeconds int64             `json:"health_timeout_seconds,omitempty"`
	DrainTimeoutSeconds  int64             `json:"drain_timeout_seconds,omitempty"`
}

// App is the public app object.
type App struct {
	ID                   string            `json:"id"`
	Name                 string            `json:"name"`
	Branch               string            `json:"branch"`
	URL                  string            `json:"url,omitempty"`
	GitURL               string            `json:"git_url,omitempty"`
	GitHubRepo           string            `json:"github_repo,omitempty"`
	LiveDeploymentID     string            `json:"live_deployment_id,omitempty"`
	Env                  map[string]string `json:"env"`
	SecretNames          []string          `json:"secret_names"`
	Build                AppBuild          `json:"build"`
	VCPUs                int64             `json:"vcpus"`
	MemoryMiB            int64             `json:"memory_mib"`
	SuspendAfterSeconds  int64             `json:"suspend_after_seconds"`
	MinInstances         int64             `json:"min_instances"`
	HealthTimeoutSeconds int64             `json:"health_timeout_seconds"`
	DrainTimeoutSeconds  int64             `json:"drain_timeout_seconds"`
	CreatedAt            string            `json:"created_at"`
	UpdatedAt            string            `json:"updated_at"`
}

// Apps is GET /v1/apps: the team's apps, newest first.
type Apps struct {
	Apps []App `json:"apps"`
}

// Deployment is one deploy of an app: queued → building → deploying → live, then superseded
// by a later one; failed (with Error, and the build logs) leaves the live one serving.
type Deployment struct {
	ID         string  `json:"id"`
	AppID      string  `json:"app_id"`
	State      string  `json:"state"`
	Source     string  `json:"source"`
	Commit     string  `json:"commit,omitempty"`
	Branch     string  `json:"branch,omitempty"`
	Plan       AppPlan `json:"plan"`
	Error      string  `json:"error,omitempty"`
	URL        string  `json:"url,omitempty"`
	SnapshotID string  `json:"snapshot_id,omitempty"`
	SandboxID  string  `json:"sandbox_id,omitempty"`
	BuildMS    int64   `json:"build_ms,omitempty"`
	CreatedAt  string  `json:"created_at"`
	FinishedAt string  `json:"finished_at,omitempty"`
}

// Deployments is GET /v1/apps/{id}/deployments, newest first.
type Deployments struct {
	Deployments []Deployment `json:"deployments"`
}

// AppPreview is a branch preview of an app: served at URL by its deployment.
type AppPreview struct {
	Slug         string `json:"slug"`
	Branch       string `json:"branch"`
	DeploymentID string `json:"deployment_id"`
	URL          string `json:"url,omitempty"`
}

// AppPreviews is GET /v1/apps/{id}/previews, by slug.
type AppPreviews struct {
	Previews []AppPreview `json:"previews"`
}

// RollbackRequest is the body of POST /v1/apps/{id}/rollback.
type RollbackRequest struct {
	DeploymentID string `json:"deployment_id"`
}

// GitHubConnectRequest is the body of POST /v1/apps/{id}/github.
type GitHubConnectRequest struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch,omitempty"`
	// Token reads a private repository (a GitHub personal access or installation token with
	// read access to its contents): sealed, never answered, sent only to clone pushed commits.
	Token string `json:"token,omitempty"`
}

// GitHubHook answers POST /v1/apps/{id}/github: the webhook to add to the repository (content
// type application/json, push events) with its secret, shown once.
type GitHubHook struct {
	AppID      string `json:"app_id"`
	Repo       string `json:"repo"`
	Branch     string `json:"branch"`
	WebhookURL string `json:"webhook_url"`
	Secret     string `json:"secret"`
	// Private: a token was given; pushes are cloned with it.
	Private bool `json:"private,omitempty"`
}

// WebhookResult answers a webhook delivery: what was done with it.
type WebhookResult struct {
	Status string `json:"status"`
}
