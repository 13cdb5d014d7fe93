package api

import (
	"bytes"
	"io"
	"net/http"
	"net/http/cgi"
	"strings"

	"github.com/pandastack/pandastack/internal/apps"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// Git remotes of apps: /git/<app>.git served by Debian's git-http-backend through net/http/cgi,
// the API key as the HTTP password (any user name). A push to the app's branch deploys it.

// maxPushBytes bounds one git request body (git-http-backend's CGI needs it whole: Go's CGI
// handler takes no chunked bodies, which git sends past its 1 MiB post buffer).
const maxPushBytes = 256 << 20

func (s *Server) gitRemote(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("repo"), ".git")
	if !ok {
		s.writeError(w, r, notFound("git remotes are /git/<app>.git"))
		return
	}
	_, key, hasAuth := r.BasicAuth()
	if !hasAuth || key == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="PandaStack", charset="UTF-8"`)
		s.writeError(w, r, errdefs.New(errdefs.Unauthorized, "git remotes need an API key as the HTTP password"))
		return
	}
	id, err := s.auth.Authenticate(r.Context(), key)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="PandaStack", charset="UTF-8"`)
		s.writeError(w, r, err)
		return
	}
	push := r.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(r.URL.Path, "/git-receive-pack")
	method, route := "GET", "/v1/apps/{id}"
	if push {
		method, route = "POST", "/v1/apps/{id}/deployments"
	}
	if err := auth.Allow(id.Scopes, method, route); err != nil {
		s.writeError(w, r, err)
		return
	}
	a, repo, err := s.apps.Repo(r.Context(), id.TeamID, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPushBytes))
		if err != nil {
			s.writeError(w, r, tooLargeOr(err, "reading the push: %v", err))
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	}
	before := s.apps.Heads(r.Context(), repo)
	rest := strings.TrimPrefix(r.URL.Path, "/git/"+r.PathValue("repo"))
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/git/" + repo + rest
	h := &cgi.Handler{Path: apps.GitBackend, Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + s.apps.GitRoot(), "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=" + id.KeyID}}
	h.ServeHTTP(w, r2)
	if push && r.Method == http.MethodPost {
		ds, err := s.apps.Pushed(r.Context(), a, repo, before)
		if err != nil {
			s.log.Warn("apps: a push did not deploy", "app", a.ID, "err", err)
		}
		for _, d := range ds {
			s.log.Info("apps: push deploys", "app", a.ID, "deployment", d.ID, "branch", d.Branch)
		}
	}
}

// gitURL is the path of the app's git remote on the server, or "" when the server keeps none.
func (s *Server) gitURL(a store.App) string {
	if !s.apps.GitEnabled() {
		return ""
	}
	return "/git/" + a.Name + ".git"
}
