package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/pandastack/pandastack/internal/apps"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Apps (docs/apps.md): thin handlers over internal/apps, and the router of <app>.apps.<domain>.

func (s *Server) appView(a store.App) v1.App {
	return v1.App{ID: a.ID, Name: a.Name, Branch: a.Branch, GitHubRepo: a.GitHubRepo, URL: s.apps.URL(a), GitURL: s.gitURL(a), LiveDeploymentID: a.LiveDeploymentID,
		Env: orEmptyMap(a.Env), SecretNames: orEmpty(a.SecretNames), Build: apps.Build(a), VCPUs: a.VCPUs, MemoryMiB: a.MemoryMiB,
		SuspendAfterSeconds: a.SuspendAfterSeconds, MinInstances: a.MinInstances, HealthTimeoutSeconds: a.HealthTimeoutSeconds,
		DrainTimeoutSeconds: a.DrainTimeoutSeconds, CreatedAt: v1.Timestamp(a.CreatedAt), UpdatedAt: v1.Timestamp(a.UpdatedAt)}
}

// deploymentView is d of app a, with its own URL while it has a release.
// webhookDeploymentView is d as a deployment event's body shows it.
func (s *Server) webhookDeploymentView(ctx context.Context, d store.Deployment) (v1.Deployment, error) {
	a, err := s.store.GetApp(ctx, d.AppID)
	if err != nil {
		return v1.Deployment{}, err
	}
	return s.deploymentView(a, d), nil
}

func (s *Server) deploymentView(a store.App, d store.Deployment) v1.Deployment {
	return v1.Deployment{ID: d.ID, AppID: d.AppID, State: d.State, Source: d.Source, Commit: d.Commit, Branch: d.Branch,
		Plan: apps.PlanOf(d), Error: d.Error, URL: s.apps.DeploymentURL(a, d), SnapshotID: d.SnapshotID, SandboxID: d.SandboxID,
		BuildMS: d.BuildMS, CreatedAt: v1.Timestamp(d.CreatedAt), FinishedAt: v1.Timestamp(d.FinishedAt)}
}

func (s *Server) createApp(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	sp, ok := decoded[v1.AppSpec](s, w, r, false)
	if !ok {
		return
	}
	release, err := s.holdQuota(r.Context(), id.TeamID, Quota{Apps: 1})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	a, err := s.apps.Create(r.Context(), id.TeamID, sp)
	s.reply(w, r, http.StatusCreated, s.appView(a), err)
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	list, err := s.apps.List(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Apps{Apps: viewsOf(list, s.appView)}, err)
}

func (s *Server) updateApp(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	sp, ok := decoded[v1.AppSpec](s, w, r, false)
	if !ok {
		return
	}
	a, err := s.apps.Update(r.Context(), id.TeamID, r.PathValue("id"), sp)
	s.reply(w, r, http.StatusOK, s.appView(a), err)
}

// deployApp takes the source as the body (a .tar.gz or .zip, at most 32 MiB) and answers 202
// with the queued deployment; the build goes on in the background.
func (s *Server) deployApp(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	clean, err := boolQuery(r.URL.Query(), "clean")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	b, err := readArchive(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A deploy runs sandboxes beside the live instances (the build, then the new instances until
	// the switch): the team's quota must have room for them now.
	a, err := s.apps.Get(r.Context(), id.TeamID, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, err := s.holdSandboxQuota(r.Context(), id.TeamID, apps.BaseTemplate, int64(apps.InstanceCount(a)))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release()
	d, err := s.apps.Deploy(r.Context(), id.TeamID, r.PathValue("id"), b, apps.Source{Kind: "upload", Branch: r.URL.Query().Get("branch"),
		Clean: clean})
	s.reply(w, r, http.StatusAccepted, s.deploymentView(store.App{}, d), err)
}

// readArchive reads a request body of at most bundle.MaxBytes.
func readArchive(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bundle.MaxBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, errdefs.New(errdefs.TooLarge, "the source archive is larger than %d bytes (32 MiB): leave build outputs and dependencies out (.gitignore)", bundle.MaxBytes)
	case err != nil:
		return nil, invalid("reading the source archive: %v", err)
	case len(b) == 0:
		return nil, invalid("send the source as the body: a .tar.gz or .zip archive")
	}
	return b, nil
}

func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	limit, err := limitParam(r)
	var a store.App
	var ds []store.Deployment
	if err == nil {
		a, ds, err = s.apps.Deployments(r.Context(), id.TeamID, r.PathValue("id"), limit)
	}
	s.reply(w, r, http.StatusOK, v1.Deployments{Deployments: viewsOf(ds, func(d store.Deployment) v1.Deployment { return s.deploymentView(a, d) })}, err)
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	a, d, err := s.apps.Deployment(r.Context(), id.TeamID, r.PathValue("id"), r.PathValue("dep"))
	s.reply(w, r, http.StatusOK, s.deploymentView(a, d), err)
}

func (s *Server) listPreviews(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	ps, err := s.apps.Previews(r.Context(), id.TeamID, r.PathValue("id"))
	s.reply(w, r, http.StatusOK, v1.AppPreviews{Previews: viewsOf(ps, func(p apps.Preview) v1.AppPreview {
		return v1.AppPreview{Slug: p.Slug, Branch: p.Deployment.Branch, DeploymentID: p.Deployment.ID, URL: p.URL}
	})}, err)
}

// deletePreview removes the preview of {branch} (a branch name or its slug; path-escaped).
func (s *Server) deletePreview(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.reply(w, r, http.StatusNoContent, nil, s.apps.DeletePreview(r.Context(), id.TeamID, r.PathValue("id"), r.PathValue("branch")))
}

func (s *Server) rollbackApp(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[v1.RollbackRequest](s, w, r, false)
	if !ok {
		return
	}
	if req.DeploymentID == "" {
		s.writeError(w, r, invalid("deployment_id is required"))
		return
	}
	a, d, err := s.apps.Rollback(r.Context(), id.TeamID, r.PathValue("id"), req.DeploymentID)
	s.reply(w, r, http.StatusOK, s.deploymentView(a, d), err)
}

// followParam reads ?follow= (1/true or 0/false).
func followParam(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("follow") {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, invalid("follow must be 1 or 0")
}

// textStream answers logs as text/plain, flushed as they come; errors before the first byte are
// the JSON error shape.
func (s *Server) textStream(w http.ResponseWriter, r *http.Request, write func(follow bool, w io.Writer, flush func()) error) {
	follow, err := followParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sw := &lazyText{w: w}
	rc := http.NewResponseController(w)
	if err := write(follow, sw, func() { rc.Flush() }); err != nil && !sw.started {
		s.writeError(w, r, err)
		return
	}
	sw.start()
}

// lazyText sends the text/plain header with the first byte.
type lazyText struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyText) start() {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		l.w.Header().Set("Cache-Control", "no-store")
		l.w.WriteHeader(http.StatusOK)
	}
}

func (l *lazyText) Write(p []byte) (int, error) {
	l.start()
	return l.w.Write(p)
}

func (s *Server) deploymentLogs(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.textStream(w, r, func(follow bool, out io.Writer, flush func()) error {
		return s.apps.BuildLogs(r.Context(), id.TeamID, r.PathValue("id"), r.PathValue("dep"), follow, out, flush)
	})
}

func (s *Server) appLogs(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.textStream(w, r, func(follow bool, out io.Writer, flush func()) error {
		return s.apps.Logs(r.Context(), id.TeamID, r.PathValue("id"), follow, out, flush)
	})
}

// appHostLabel is an app's name, or <app>--<preview slug>.
var appHostLabel = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?(--[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?)?$`)

// appHost reads "<app>.apps.<domain>[:port]" from a Host header.
func (s *Server) appHost(host string) (string, bool) {
	return s.serviceHost(host, "apps", appHostLabel)
}

// serveApp sends a request for <app>.apps.<domain> to the app's live instance (HTTP and
// WebSocket; a hibernated instance is woken by its host, the request held meanwhile). Like a
// sandbox port, it carries no API key: the app is public.
func (s *Server) serveApp(w http.ResponseWriter, r *http.Request, name string) {
	sb, port, done, err := s.apps.Target(r.Context(), name)
	if err != nil {
		status, title := http.StatusBadGateway, "App unavailable"
		if errdefs.Is(err, errdefs.NotFound) {
			status, title = http.StatusNotFound, "No such app"
		}
		proxyPage(w, status, title, err.Error()+".")
		return
	}
	defer done()
	s.forward(w, r, sb, port)
}

// connectGitHub connects the app to a GitHub repository and answers the webhook to add there.
func (s *Server) connectGitHub(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	req, ok := decoded[v1.GitHubConnectRequest](s, w, r, false)
	if !ok {
		return
	}
	a, secret, err := s.apps.ConnectGitHub(r.Context(), id.TeamID, r.PathValue("id"), req.Repo, req.Branch, req.Token)
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	s.reply(w, r, http.StatusOK, v1.GitHubHook{AppID: a.ID, Repo: a.GitHubRepo, Branch: a.Branch, Secret: secret, Private: req.Token != "",
		WebhookURL: scheme + "://" + r.Host + "/v1/apps/" + a.ID + "/github/webhook"}, err)
}

// githubWebhook takes a GitHub delivery (no API key: its signature is checked against the
// app's webhook secret) and answers within the request: 202 when a deploy starts, 200 for a
// ping, a repeat or another branch.
func (s *Server) githubWebhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, apps.MaxWebhookBytes))
	if err != nil {
		s.writeError(w, r, tooLargeOr(err, "reading the delivery: %v", err))
		return
	}
	status, err := s.apps.Webhook(r.Context(), r.PathValue("id"), r.Header.Get("X-GitHub-Event"), r.Header.Get("X-GitHub-Delivery"),
		r.Header.Get("X-Hub-Signature-256"), body)
	code := http.StatusOK
	if strings.HasPrefix(status, "deploying") {
		code = http.StatusAccepted
	}
	s.reply(w, r, code, v1.WebhookResult{Status: status}, err)
}
