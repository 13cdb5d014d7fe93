package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Apps (docs/apps.md).

// CreateApp creates an app (no deployment yet).
func (c *Client) CreateApp(ctx context.Context, spec v1.AppSpec) (v1.App, error) {
	return send[v1.App](ctx, c, "POST", "/v1/apps", nil, spec)
}

// ListApps returns the team's apps, newest first.
func (c *Client) ListApps(ctx context.Context) ([]v1.App, error) {
	out, err := send[v1.Apps](ctx, c, "GET", "/v1/apps", nil, nil)
	return out.Apps, err
}

// GetApp returns an app by id or name.
func (c *Client) GetApp(ctx context.Context, id string) (v1.App, error) {
	return send[v1.App](ctx, c, "GET", objPath("/v1/apps", id), nil, nil)
}

// UpdateApp changes an app's settings (the spec's set fields); they apply from its next deploy.
func (c *Client) UpdateApp(ctx context.Context, id string, spec v1.AppSpec) (v1.App, error) {
	return send[v1.App](ctx, c, "PATCH", objPath("/v1/apps", id), nil, spec)
}

// DeleteApp deletes an app with its instances, releases and deployments.
func (c *Client) DeleteApp(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/apps", id), nil, nil, nil)
}

// DeployOptions are a deploy's switches.
type DeployOptions struct {
	// Branch, when other than the app's, deploys its preview.
	Branch string
	// Clean skips the build cache: a new build sandbox of base, the install run.
	Clean bool
}

// DeployApp uploads a source archive (.tar.gz or .zip bytes; bundle.Pack makes one of a
// directory) and returns the queued deployment.
func (c *Client) DeployApp(ctx context.Context, id string, archive []byte, o DeployOptions) (v1.Deployment, error) {
	var d v1.Deployment
	q := url.Values{}
	if o.Branch != "" {
		q.Set("branch", o.Branch)
	}
	if o.Clean {
		q.Set("clean", "true")
	}
	resp, err := c.Do(ctx, "POST", objPath("/v1/apps", id)+"/deployments", q, bytes.NewReader(archive), int64(len(archive)), "application/gzip", "")
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

// Deployments returns an app's deployments, newest first (limit 0: the server's default).
func (c *Client) Deployments(ctx context.Context, id string, limit int) ([]v1.Deployment, error) {
	out, err := send[v1.Deployments](ctx, c, "GET", objPath("/v1/apps", id)+"/deployments", limitQuery(limit), nil)
	return out.Deployments, err
}

// Deployment returns one deployment of an app.
func (c *Client) Deployment(ctx context.Context, id, depID string) (v1.Deployment, error) {
	return send[v1.Deployment](ctx, c, "GET", objPath("/v1/apps", id)+"/deployments/"+url.PathEscape(depID), nil, nil)
}

// RollbackApp points an app's route at an earlier deployment's release (no rebuild).
func (c *Client) RollbackApp(ctx context.Context, id, depID string) (v1.Deployment, error) {
	return send[v1.Deployment](ctx, c, "POST", objPath("/v1/apps", id)+"/rollback", nil, v1.RollbackRequest{DeploymentID: depID})
}

// DeploymentLogs copies a deployment's build logs to w; with follow, until the deployment ends.
func (c *Client) DeploymentLogs(ctx context.Context, id, depID string, follow bool, w io.Writer) error {
	return c.copyText(ctx, objPath("/v1/apps", id)+"/deployments/"+url.PathEscape(depID)+"/logs", follow, w)
}

// AppLogs copies the output of an app's live instance to w; with follow, until ctx ends.
func (c *Client) AppLogs(ctx context.Context, id string, follow bool, w io.Writer) error {
	return c.copyText(ctx, objPath("/v1/apps", id)+"/logs", follow, w)
}

func (c *Client) copyText(ctx context.Context, path string, follow bool, w io.Writer) error {
	q := url.Values{}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.Do(ctx, "GET", path, q, nil, 0, "", "text/plain")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ConnectGitHub connects an app to a GitHub repository ("owner/name"; branch "" keeps the app's)
// and returns the webhook to add there, with its secret (shown once).
func (c *Client) ConnectGitHub(ctx context.Context, id, repo, branch, token string) (v1.GitHubHook, error) {
	return send[v1.GitHubHook](ctx, c, "POST", objPath("/v1/apps", id)+"/github", nil, v1.GitHubConnectRequest{Repo: repo, Branch: branch, Token: token})
}

// AppPreviews lists an app's branch previews.
func (c *Client) AppPreviews(ctx context.Context, id string) ([]v1.AppPreview, error) {
	out, err := send[v1.AppPreviews](ctx, c, "GET", objPath("/v1/apps", id)+"/previews", nil, nil)
	return out.Previews, err
}

// DeleteAppPreview deletes the preview of an app's branch (or slug).
func (c *Client) DeleteAppPreview(ctx context.Context, id, branch string) error {
	return c.call(ctx, "DELETE", objPath("/v1/apps", id)+"/previews/"+url.PathEscape(branch), nil, nil, nil)
}
