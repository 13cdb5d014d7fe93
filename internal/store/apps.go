package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// App is a team's git-deployed app. Its name is its host name (<name>.apps.<domain>): unique
// across teams. Build is the JSON of the user's build overrides; Secrets the sealed form (never
// shown).
type App struct {
	ID                   string
	TeamID               string
	Name                 string
	Branch               string
	Env                  map[string]string
	SecretNames          []string
	Secrets              string
	Build                string
	VCPUs                int64
	MemoryMiB            int64
	SuspendAfterSeconds  int64
	MinInstances         int64
	HealthTimeoutSeconds int64
	DrainTimeoutSeconds  int64
	LiveDeploymentID     string
	// GitHubRepo ("owner/name") and GitHubSecret (sealed) connect GitHub push webhooks.
	GitHubRepo   string
	GitHubSecret string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Deployment is one deploy of an app; a live or superseded one has its release (SnapshotID: the
// built app started and healthy) and, while it serves, its instance (SandboxID, Pid of the app's
// process in it).
type Deployment struct {
	ID         string
	AppID      string
	TeamID     string
	State      string
	Source     string
	Commit     string
	Branch     string
	Plan       string // JSON of the plan
	Error      string
	Logs       string
	SnapshotID string
	SandboxID  string
	Pid        int64
	BuildMS    int64
	CreatedAt  time.Time
	FinishedAt time.Time
	// LeaseUntil: the replica building an unfinished (queued, building, deploying) deployment
	// renews it; one whose lease passed lost its server (RecoverDeployments). 0 once finished.
	LeaseUntil time.Time
	// UpdatedAt is its last change of state, error or release (the events stream's cursor).
	UpdatedAt time.Time
}

const appCols = `id, team_id, name, branch, env, secret_names, secrets, build, vcpus, memory_mib, suspend_after_seconds,
	min_instances, health_timeout_seconds, drain_timeout_seconds, live_deployment_id, github_repo, github_secret, created_at, updated_at`

var scanApp = scanFields(func(a *App) []any {
	return []any{&a.ID, &a.TeamID, &a.Name, &a.Branch, jsonCol(&a.Env), jsonCol(&a.SecretNames), &a.Secrets, &a.Build, &a.VCPUs,
		&a.MemoryMiB, &a.SuspendAfterSeconds, &a.MinInstances, &a.HealthTimeoutSeconds, &a.DrainTimeoutSeconds,
		&a.LiveDeploymentID, &a.GitHubRepo, &a.GitHubSecret, timeCol(&a.CreatedAt), timeCol(&a.UpdatedAt)}
})

const deploymentCols = `id, app_id, team_id, state, source, commit_sha, branch, plan, error, logs, snapshot_id, sandbox_id, pid,
	build_ms, created_at, finished_at, lease_until, updated_at`

var scanDeployment = scanFields(func(d *Deployment) []any {
	return []any{&d.ID, &d.AppID, &d.TeamID, &d.State, &d.Source, &d.Commit, &d.Branch, &d.Plan, &d.Error, &d.Logs, &d.SnapshotID,
		&d.SandboxID, &d.Pid, &d.BuildMS, timeCol(&d.CreatedAt), timeCol(&d.FinishedAt), timeCol(&d.LeaseUntil), timeCol(&d.UpdatedAt)}
})

func appArgs(a App) []any {
	return []any{a.ID, a.TeamID, a.Name, a.Branch, jsonText(a.Env), jsonText(nonNil(a.SecretNames)), a.Secrets, a.Build, a.VCPUs,
		a.MemoryMiB, a.SuspendAfterSeconds, a.MinInstances, a.HealthTimeoutSeconds, a.DrainTimeoutSeconds, a.LiveDeploymentID,
		a.GitHubRepo, a.GitHubSecret, micros(a.CreatedAt), micros(a.UpdatedAt)}
}

// CreateApp records a new app (created now); a name another app has is ErrConflict.
func (s *Store) CreateApp(ctx context.Context, a App) (App, error) {
	a.CreatedAt = fromMicros(micros(s.now().UTC()))
	a.UpdatedAt = a.CreatedAt
	_, err := s.exec(ctx, s.db, `INSERT INTO apps (`+appCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, appArgs(a)...)
	return a, conflictOr(err)
}

// UpdateApp writes an app's settings (not its live deployment: SetLiveDeployment), updated now.
func (s *Store) UpdateApp(ctx context.Context, a App) (App, error) {
	a.UpdatedAt = fromMicros(micros(s.now().UTC()))
	res, err := s.exec(ctx, s.db, `UPDATE apps SET branch = ?, env = ?, secret_names = ?, secrets = ?, build = ?, vcpus = ?,
		memory_mib = ?, suspend_after_seconds = ?, min_instances = ?, health_timeout_seconds = ?, drain_timeout_seconds = ?,
		github_repo = ?, github_secret = ?, updated_at = ? WHERE id = ? AND team_id = ?`,
		a.Branch, jsonText(a.Env), jsonText(nonNil(a.SecretNames)), a.Secrets, a.Build, a.VCPUs, a.MemoryMiB, a.SuspendAfterSeconds,
		a.MinInstances, a.HealthTimeoutSeconds, a.DrainTimeoutSeconds, a.GitHubRepo, a.GitHubSecret, micros(a.UpdatedAt), a.ID, a.TeamID)
	if err != nil {
		return a, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return a, ErrNotFound
	}
	return a, nil
}

// GetTeamApp returns teamID's app id (or name); another team's is ErrNotFound like a missing one.
func (s *Store) GetTeamApp(ctx context.Context, teamID, idOrName string) (App, error) {
	return queryOne(ctx, s, `SELECT `+appCols+` FROM apps WHERE (id = ? OR name = ?) AND team_id = ?`, scanApp, idOrName, idOrName, teamID)
}

// GetApp returns app id of any team (a webhook: its signature is the credential).
func (s *Store) GetApp(ctx context.Context, id string) (App, error) {
	return queryOne(ctx, s, `SELECT `+appCols+` FROM apps WHERE id = ?`, scanApp, id)
}

// ClaimDelivery records webhook delivery id for app appID; false when it was recorded before
// (a repeat: ignore it).
func (s *Store) ClaimDelivery(ctx context.Context, appID, id string) (bool, error) {
	_, err := s.exec(ctx, s.db, `INSERT INTO app_deliveries (app_id, delivery_id, created_at) VALUES (?, ?, ?)`, appID, id, micros(s.now()))
	if isUnique(err) {
		return false, nil
	}
	return err == nil, err
}

// GetAppByName returns the app called name, of any team (the router).
func (s *Store) GetAppByName(ctx context.Context, name string) (App, error) {
	return queryOne(ctx, s, `SELECT `+appCols+` FROM apps WHERE name = ?`, scanApp, name)
}

// ListTeamApps returns a team's apps, newest first.
func (s *Store) ListTeamApps(ctx context.Context, teamID string) ([]App, error) {
	return queryAll(ctx, s, s.db, `SELECT `+appCols+` FROM apps WHERE team_id = ? ORDER BY created_at DESC, id DESC`, scanApp, teamID)
}

// DeleteApp deletes teamID's app with its deployments.
func (s *Store) DeleteApp(ctx context.Context, teamID, id string) error {
	return s.deleteWithChildren(ctx, "apps", teamID, id, "app_id", "app_deployments", "app_deliveries", "app_previews")
}

// CreateDeployment records a new deployment (created now).
func (s *Store) CreateDeployment(ctx context.Context, d Deployment) (Deployment, error) {
	d.CreatedAt = fromMicros(micros(s.now().UTC()))
	d.UpdatedAt = d.CreatedAt
	_, err := s.exec(ctx, s.db, `INSERT INTO app_deployments (`+deploymentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`,
		d.ID, d.AppID, d.TeamID, d.State, d.Source, d.Commit, d.Branch, d.Plan, d.Error, d.Logs, d.SnapshotID, d.SandboxID, d.Pid,
		d.BuildMS, micros(d.CreatedAt), micros(d.LeaseUntil), micros(d.UpdatedAt))
	return d, conflictOr(err)
}

// UpdateDeployment records a deployment's progress (finished now when final: its lease ends).
func (s *Store) UpdateDeployment(ctx context.Context, d Deployment, final bool) (Deployment, error) {
	fin := `finished_at`
	d.UpdatedAt = fromMicros(micros(s.now().UTC()))
	if final {
		d.FinishedAt = d.UpdatedAt
		d.LeaseUntil = time.Time{}
		fin = `?, lease_until = 0`
	}
	args := []any{d.State, d.Plan, d.Error, d.Logs, d.SnapshotID, d.SandboxID, d.Pid, d.BuildMS, micros(d.UpdatedAt)}
	if final {
		args = append(args, micros(d.FinishedAt))
	}
	_, err := s.exec(ctx, s.db, `UPDATE app_deployments SET state = ?, plan = ?, error = ?, logs = ?, snapshot_id = ?, sandbox_id = ?,
		pid = ?, build_ms = ?, updated_at = ?, finished_at = `+fin+` WHERE id = ?`, append(args, d.ID)...)
	return d, err
}

// RenewDeployment extends the lease of an unfinished deployment this replica works on.
func (s *Store) RenewDeployment(ctx context.Context, id string, until time.Time) error {
	_, err := s.exec(ctx, s.db, `UPDATE app_deployments SET lease_until = ? WHERE id = ? AND lease_until > 0`, micros(until), id)
	return err
}

// unfinishedDeployment is a deployment no route serves whose state is not final.
const unfinishedDeployment = `state IN ('queued', 'building', 'deploying')
	AND id NOT IN (SELECT live_deployment_id FROM apps) AND id NOT IN (SELECT deployment_id FROM app_previews)`

// FailOrphanedDeployments records failed with msg the unfinished deployments (queued, building,
// deploying; never one a route serves) whose lease ends before before: their server stopped.
// Each is claimed by one replica (compare-and-set on its lease); it returns those this call
// failed.
func (s *Store) FailOrphanedDeployments(ctx context.Context, before time.Time, msg string) ([]Deployment, error) {
	stale, err := queryAll(ctx, s, s.db, `SELECT `+deploymentCols+` FROM app_deployments WHERE lease_until < ? AND `+
		unfinishedDeployment+` ORDER BY created_at LIMIT 100`, scanDeployment, micros(before))
	if err != nil {
		return nil, err
	}
	var out []Deployment
	for _, d := range stale {
		d.FinishedAt = fromMicros(micros(s.now().UTC()))
		d.UpdatedAt = d.FinishedAt
		d.Logs += "\n==> deploy failed: " + msg + "\n"
		res, err := s.exec(ctx, s.db, `UPDATE app_deployments SET state = 'failed', error = ?, logs = ?, finished_at = ?, updated_at = ?, lease_until = 0
			WHERE id = ? AND lease_until = ? AND `+unfinishedDeployment, msg, d.Logs, micros(d.FinishedAt), micros(d.UpdatedAt), d.ID, micros(d.LeaseUntil))
		if err != nil {
			return out, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			d.State, d.Error, d.LeaseUntil = "failed", msg, time.Time{}
			out = append(out, d)
		}
	}
	return out, nil
}

// GetDeployment returns deployment id of appID.
func (s *Store) GetDeployment(ctx context.Context, appID, id string) (Deployment, error) {
	return queryOne(ctx, s, `SELECT `+deploymentCols+` FROM app_deployments WHERE id = ? AND app_id = ?`, scanDeployment, id, appID)
}

// ListDeployments returns an app's deployments, newest first, at most limit (<= 0: 100).
func (s *Store) ListDeployments(ctx context.Context, appID string, limit int) ([]Deployment, error) {
	return queryAll(ctx, s, s.db, `SELECT `+deploymentCols+` FROM app_deployments WHERE app_id = ?
		ORDER BY created_at DESC, id DESC LIMIT ?`, scanDeployment, appID, pageLimit(limit))
}

// DeploymentsChangedSince returns team teamID's deployments changed (made, or their state,
// error or release) after since, oldest change first, at most limit: the events stream's feed.
func (s *Store) DeploymentsChangedSince(ctx context.Context, teamID string, since time.Time, limit int) ([]Deployment, error) {
	return queryAll(ctx, s, s.db, `SELECT `+deploymentCols+` FROM app_deployments WHERE team_id = ? AND updated_at > ?
		ORDER BY updated_at, id LIMIT ?`, scanDeployment, teamID, micros(since), limit)
}

// ListInstanceDeployments returns the live and superseded deployments with an instance (a
// route's, or a superseded release's own URL's), every team's.
func (s *Store) ListInstanceDeployments(ctx context.Context) ([]Deployment, error) {
	return queryAll(ctx, s, s.db, `SELECT `+deploymentCols+` FROM app_deployments WHERE sandbox_id != ''
		AND state IN ('live', 'superseded')`, scanDeployment)
}

// SetDeploymentInstance records sandbox to as the instance of superseded deployment id (its own
// URL's) if its instance is still from (compare-and-set). False when it changed meanwhile or the
// deployment is no longer superseded.
func (s *Store) SetDeploymentInstance(ctx context.Context, id, from, to string) (bool, error) {
	res, err := s.exec(ctx, s.db, `UPDATE app_deployments SET sandbox_id = ? WHERE id = ? AND sandbox_id = ? AND state = 'superseded'`,
		to, id, from)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// GetPreview returns the deployment serving app appID's preview slug ("" for none).
func (s *Store) GetPreview(ctx context.Context, appID, slug string) (string, error) {
	id, err := scanOne[string](s.queryRow(ctx, s.db, `SELECT deployment_id FROM app_previews WHERE app_id = ? AND slug = ?`, appID, slug))
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// Preview is the route of an app's branch preview: its slug and the deployment serving it.
type Preview struct {
	Slug         string
	DeploymentID string
}

// ListPreviews returns app appID's previews by slug.
func (s *Store) ListPreviews(ctx context.Context, appID string) ([]Preview, error) {
	return queryAll(ctx, s, s.db, `SELECT slug, deployment_id FROM app_previews WHERE app_id = ? ORDER BY slug`,
		scanFields(func(p *Preview) []any { return []any{&p.Slug, &p.DeploymentID} }), appID)
}

// DeletePreview removes app appID's preview slug if it still points at deployment from, which
// becomes superseded, in one transaction. False when another switch came first.
func (s *Store) DeletePreview(ctx context.Context, appID, slug, from string) (bool, error) {
	ok := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `DELETE FROM app_previews WHERE app_id = ? AND slug = ? AND deployment_id = ?`, appID, slug, from)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		ok = true
		_, err = s.exec(ctx, tx, `UPDATE app_deployments SET state = 'superseded', sandbox_id = '', updated_at = ? WHERE id = ?`, micros(s.now().UTC()), from)
		return err
	})
	return ok, err
}

// SetPreview points app appID's preview slug at deployment to if it still points at from (""
// for none): to becomes live, from superseded, in one transaction. False when another switch
// came first.
func (s *Store) SetPreview(ctx context.Context, appID, slug, from, to string) (bool, error) {
	return s.switchRoute(ctx, from, to, func(tx *sql.Tx) (sql.Result, error) {
		if from == "" { // no row changed when one is there: the insert does not abort the transaction
			return s.exec(ctx, tx, `INSERT INTO app_previews (app_id, slug, deployment_id) VALUES (?, ?, ?)
				ON CONFLICT (app_id, slug) DO NOTHING`, appID, slug, to)
		}
		return s.exec(ctx, tx, `UPDATE app_previews SET deployment_id = ? WHERE app_id = ? AND slug = ? AND deployment_id = ?`,
			to, appID, slug, from)
	})
}

// SetLiveDeployment points app appID's route at deployment to if it still points at from (""
// for none): to becomes live, from superseded, in one transaction. False when another switch
// came first.
func (s *Store) SetLiveDeployment(ctx context.Context, appID, from, to string) (bool, error) {
	return s.switchRoute(ctx, from, to, func(tx *sql.Tx) (sql.Result, error) {
		return s.exec(ctx, tx, `UPDATE apps SET live_deployment_id = ? WHERE id = ? AND live_deployment_id = ?`, to, appID, from)
	})
}

// switchRoute runs move (a route's compare-and-set; no row changed: another switch came first) and, if it moved, marks deployment to live and from (if any) superseded,
// all in one transaction.
func (s *Store) switchRoute(ctx context.Context, from, to string, move func(*sql.Tx) (sql.Result, error)) (bool, error) {
	ok := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := move(tx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		ok = true
		now := micros(s.now().UTC())
		if _, err := s.exec(ctx, tx, `UPDATE app_deployments SET state = 'live', updated_at = ? WHERE id = ?`, now, to); err != nil {
			return err
		}
		if from != "" {
			_, err = s.exec(ctx, tx, `UPDATE app_deployments SET state = 'superseded', updated_at = ? WHERE id = ?`, now, from)
		}
		return err
	})
	return ok, err
}

// appsSchema is the apps tables' part of each migration.
var appsSchema = []schemaStep{
	{16, []string{
		`CREATE TABLE apps (
			id                     TEXT PRIMARY KEY,
			team_id                TEXT NOT NULL REFERENCES teams(id),
			name                   TEXT NOT NULL UNIQUE,
			branch                 TEXT NOT NULL,
			env                    TEXT NOT NULL,
			secret_names           TEXT NOT NULL,
			secrets                TEXT NOT NULL,
			build                  TEXT NOT NULL,
			vcpus                  BIGINT NOT NULL,
			memory_mib             BIGINT NOT NULL,
			suspend_after_seconds  BIGINT NOT NULL,
			min_instances          BIGINT NOT NULL,
			health_timeout_seconds BIGINT NOT NULL,
			drain_timeout_seconds  BIGINT NOT NULL,
			live_deployment_id     TEXT NOT NULL DEFAULT '',
			github_repo            TEXT NOT NULL DEFAULT '',
			github_secret          TEXT NOT NULL DEFAULT '',
			created_at             BIGINT NOT NULL,
			updated_at             BIGINT NOT NULL
		)`,
		`CREATE INDEX apps_team ON apps (team_id, created_at)`,
		`CREATE TABLE app_deployments (
			id          TEXT PRIMARY KEY,
			app_id      TEXT NOT NULL,
			team_id     TEXT NOT NULL,
			state       TEXT NOT NULL,
			source      TEXT NOT NULL,
			commit_sha  TEXT NOT NULL DEFAULT '',
			branch      TEXT NOT NULL DEFAULT '',
			plan        TEXT NOT NULL DEFAULT '',
			error       TEXT NOT NULL DEFAULT '',
			logs        TEXT NOT NULL DEFAULT '',
			snapshot_id TEXT NOT NULL DEFAULT '',
			sandbox_id  TEXT NOT NULL DEFAULT '',
			pid         BIGINT NOT NULL DEFAULT 0,
			build_ms    BIGINT NOT NULL DEFAULT 0,
			created_at  BIGINT NOT NULL,
			finished_at BIGINT NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX app_deployments_app ON app_deployments (app_id, created_at)`,
		// A preview per branch: its slug (in <app>--<slug>.apps.<domain>) and the deployment serving it.
		`CREATE TABLE app_previews (
			app_id        TEXT NOT NULL,
			slug          TEXT NOT NULL,
			deployment_id TEXT NOT NULL,
			PRIMARY KEY (app_id, slug)
		)`,
		// Webhook deliveries seen (X-GitHub-Delivery): a repeat is ignored.
		`CREATE TABLE app_deliveries (
			app_id      TEXT NOT NULL,
			delivery_id TEXT NOT NULL,
			created_at  BIGINT NOT NULL,
			PRIMARY KEY (app_id, delivery_id)
		)`,
	}},
	{20, []string{
		// An unfinished deployment's lease: its replica renews it while it builds; one whose lease
		// passed lost its server and is recorded failed (0: finished, or from before this column).
		`ALTER TABLE app_deployments ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0`,
	}},
	{23, []string{
		// A deployment's last change (the events stream reads the team's changes since its cursor);
		// 0 for deployments from before this column.
		`ALTER TABLE app_deployments ADD COLUMN updated_at BIGINT NOT NULL DEFAULT 0`,
		`CREATE INDEX app_deployments_changes ON app_deployments (team_id, updated_at)`,
	}},
	{27, []string{
		// The killed-sandbox prune keeps a deployment's sandbox.
		`CREATE INDEX app_deployments_sandbox ON app_deployments (sandbox_id)`,
	}},
}
