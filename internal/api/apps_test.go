package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/apps"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
)

// TestAppsAPI: the apps routes' validation, team isolation and plans, without VMs.
func TestAppsAPI(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	for _, c := range []struct {
		body any
		want int
		msg  string
	}{
		{map[string]any{"name": "Bad_Name"}, 400, "host name"},
		{map[string]any{"name": "ends-"}, 400, "host name"},
		{map[string]any{"name": strings.Repeat("a", 41)}, 400, "host name"},
		{map[string]any{"name": "ok", "env": map[string]string{"PORT": "1"}}, 400, "not PORT"},
		{map[string]any{"name": "ok", "build": map[string]any{"framework": "rails"}}, 400, "build.framework"},
		{map[string]any{"name": "ok", "health_timeout_seconds": 9999}, 400, "health_timeout_seconds"},
		{map[string]any{"name": "ok", "env": map[string]string{"A": "1"}, "secrets": map[string]string{"A": "2"}}, 400, "both in env and in secrets"},
		{map[string]any{"name": "ok", "nope": 1}, 400, "nope"},
	} {
		r := e.do("POST", "/v1/apps", e.admin, c.body)
		if r.status != c.want || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("create %v: %d %s", c.body, r.status, r.body)
		}
	}
	a := e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "web", "secrets": map[string]string{"TOKEN": "s3cr3t"}}), 201).json(t)
	if a["url"] != "http://web.apps.localhost" || strings.Contains(string(mustJSON(a)), "s3cr3t") || a["branch"] != "main" {
		t.Fatalf("app: %v", a)
	}
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "web"}), 409)
	e.mustStatus(e.do("PATCH", "/v1/apps/web", e.admin, map[string]any{"build": map[string]any{"port": 3000}}), 200)
	if got := e.mustStatus(e.do("GET", "/v1/apps/"+a["id"].(string), e.admin, nil), 200).json(t); got["build"].(map[string]any)["port"] != 3000.0 {
		t.Fatalf("patched: %v", got)
	}
	// set_env / set_secrets keep the other variables; unset removes names of either.
	e.mustStatus(e.do("PATCH", "/v1/apps/web", e.admin, map[string]any{"env": map[string]string{"A": "1", "B": "2"}}), 200)
	got := e.mustStatus(e.do("PATCH", "/v1/apps/web", e.admin, map[string]any{"set_env": map[string]string{"B": "3", "C": "4"},
		"set_secrets": map[string]string{"KEY": "k3y"}, "unset": []string{"A"}}), 200).json(t)
	if fmt.Sprint(got["env"]) != "map[B:3 C:4]" || fmt.Sprint(got["secret_names"]) != "[KEY TOKEN]" || strings.Contains(string(mustJSON(got)), "k3y") {
		t.Fatalf("after set/unset: %v", got)
	}
	stored, _ := e.st.GetAppByName(context.Background(), "web")
	if secrets, err := sealed.Open(nil, stored.Secrets); err != nil || fmt.Sprint(secrets) != "map[KEY:k3y TOKEN:s3cr3t]" {
		t.Fatalf("secrets after set: %v %v", secrets, err)
	}
	got = e.mustStatus(e.do("PATCH", "/v1/apps/web", e.admin, map[string]any{"unset": []string{"TOKEN", "C"}}), 200).json(t)
	if fmt.Sprint(got["env"]) != "map[B:3]" || fmt.Sprint(got["secret_names"]) != "[KEY]" {
		t.Fatalf("after unset: %v", got)
	}
	for _, c := range []struct {
		body map[string]any
		msg  string
	}{
		{map[string]any{"unset": []string{"NOPE"}}, "neither in the app's env nor in its secrets"},
		{map[string]any{"set_env": map[string]string{"KEY": "x"}}, "both in env and in secrets"},
		{map[string]any{"set_secrets": map[string]string{"B": "x"}}, "both in env and in secrets"},
		{map[string]any{"set_env": map[string]string{"B": "x"}, "unset": []string{"B"}}, "both set and unset"},
		{map[string]any{"set_env": map[string]string{"PORT": "1"}}, "not PORT"},
		{map[string]any{"set_secrets": map[string]string{"1X": "1"}}, "shell variable name"},
	} {
		if r := e.do("PATCH", "/v1/apps/web", e.admin, c.body); r.status != 400 || !strings.Contains(r.errMessage(), c.msg) {
			t.Errorf("patch %v: %d %s", c.body, r.status, r.body)
		}
	}
	other := e.mustStatus(e.do("POST", "/v1/teams", e.admin, map[string]string{"name": "other"}), 201).json(t)["key"].(map[string]any)["key"].(string)
	e.mustStatus(e.do("GET", "/v1/apps/web", other, nil), 404)
	e.mustStatus(e.do("POST", "/v1/apps/web/deployments", other, tarGzBundle(t, map[string]string{"index.html": "x"})), 404)
	if l := e.mustStatus(e.do("GET", "/v1/apps", other, nil), 200).json(t); len(l["apps"].([]any)) != 0 {
		t.Fatalf("another team sees %v", l)
	}

	// Bad sources are refused before anything is recorded.
	r := e.do("POST", "/v1/apps/web/deployments", e.admin, tarGzBundle(t, map[string]string{"Cargo.toml": "", "README": ""}))
	if r.status != 400 || !strings.Contains(r.errMessage(), "no framework detected") || !strings.Contains(r.errMessage(), "set build.start") {
		t.Fatalf("unknown source: %d %s", r.status, r.body)
	}
	e.mustStatus(e.do("POST", "/v1/apps/web/deployments", e.admin, bytes.Repeat([]byte("x"), 33<<20)), 413)
	e.mustStatus(e.do("POST", "/v1/apps/web/deployments", e.admin, "not an archive"), 400)
	if r := e.do("POST", "/v1/apps/web/deployments?clean=maybe", e.admin, tarGzBundle(t, map[string]string{"index.html": "x"})); r.status != 400 ||
		!strings.Contains(r.errMessage(), "clean must be 1, 0, true or false") {
		t.Fatalf("clean=maybe: %d %s", r.status, r.body)
	}
	if l := e.mustStatus(e.do("GET", "/v1/apps/web/deployments", e.admin, nil), 200).json(t); len(l["deployments"].([]any)) != 0 {
		t.Fatalf("refused deploys were recorded: %v", l)
	}

	// The router: an unknown app and an app without a live deployment are 404 pages.
	for _, host := range []string{"nope.apps.localhost", "web.apps.localhost"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		w := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(w, req)
		if w.Code != 404 {
			t.Fatalf("%s: %d %s", host, w.Code, w.Body)
		}
	}
	// Previews: listed with their URL; deleting one (by branch, path-escaped, or slug) removes its
	// route, kills its instance and supersedes its deployment; the app's branch is not a preview.
	ctx := context.Background()
	sb := newBaseSandbox(t, e)
	if _, err := e.st.CreateDeployment(ctx, store.Deployment{ID: "dep_prev", AppID: stored.ID, TeamID: stored.TeamID, State: apps.Deploying,
		Source: "upload", Branch: "feature/x", SandboxID: sb}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.st.SetPreview(ctx, stored.ID, "feature-x", "", "dep_prev"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ps := e.mustStatus(e.do("GET", "/v1/apps/web/previews", e.admin, nil), 200).json(t)["previews"].([]any)
	if want := "[map[branch:feature/x deployment_id:dep_prev slug:feature-x url:http://web--feature-x.apps.localhost]]"; fmt.Sprint(ps) != want {
		t.Fatalf("previews: %v", ps)
	}
	e.mustStatus(e.do("GET", "/v1/apps/web/previews", other, nil), 404)
	e.mustStatus(e.do("DELETE", "/v1/apps/web/previews/feature%2Fx", other, nil), 404)
	e.mustStatus(e.do("DELETE", "/v1/apps/web/previews/main", e.admin, nil), 400)
	e.mustStatus(e.do("DELETE", "/v1/apps/web/previews/nope", e.admin, nil), 404)
	e.mustStatus(e.do("DELETE", "/v1/apps/web/previews/feature%2Fx", e.admin, nil), 204)
	e.srv.apps.Wait()
	if ps := e.mustStatus(e.do("GET", "/v1/apps/web/previews", e.admin, nil), 200).json(t)["previews"].([]any); len(ps) != 0 {
		t.Fatalf("after delete: %v", ps)
	}
	if d, _ := e.st.GetDeployment(ctx, stored.ID, "dep_prev"); d.State != apps.Superseded || d.SandboxID != "" {
		t.Fatalf("deployment after its preview's delete: %s %q", d.State, d.SandboxID)
	}
	if got, _ := e.st.GetSandbox(ctx, sb); got.State != store.StateKilled {
		t.Fatalf("instance after its preview's delete: %s", got.State)
	}
	e.mustStatus(e.do("DELETE", "/v1/apps/web/previews/feature-x", e.admin, nil), 404)

	// A deployment's own URL: a superseded release is restored on the first request (once),
	// again after its instance was stopped; a failed deployment has none.
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+newBaseSandbox(t, e)+"/snapshots", e.admin, `{}`), 201).json(t)["id"].(string)
	for _, d := range []store.Deployment{{ID: "dep_old", State: apps.Superseded, SnapshotID: snap}, {ID: "dep_bad", State: apps.Failed}} {
		d.AppID, d.TeamID, d.Source, d.Plan = stored.ID, stored.TeamID, "upload", `{"port": 3000}`
		if _, err := e.st.CreateDeployment(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	viaRouter := func(host string) (int, string) {
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Host = host
		w := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	ds := e.mustStatus(e.do("GET", "/v1/apps/web/deployments", e.admin, nil), 200).json(t)["deployments"].([]any)
	urls := map[string]any{}
	for _, d := range ds {
		urls[d.(map[string]any)["id"].(string)] = d.(map[string]any)["url"]
	}
	if urls["dep_old"] != "http://web--old.apps.localhost" || urls["dep_bad"] != nil {
		t.Fatalf("deployment urls: %v", urls)
	}
	var instance string
	for i := range 2 {
		if code, body := viaRouter("web--old.apps.localhost"); code != 200 || !strings.Contains(body, `"port":"3000"`) || !strings.Contains(body, `"path":"/hello"`) {
			t.Fatalf("deployment URL: %d %s", code, body)
		}
		d, _ := e.st.GetDeployment(ctx, stored.ID, "dep_old")
		inst, _ := e.st.GetSandbox(ctx, d.SandboxID)
		if d.State != apps.Superseded || inst.SnapshotID != snap || inst.Metadata["pandastack.app_role"] != "url" || i == 1 && d.SandboxID != instance {
			t.Fatalf("request %d: deployment %+v, instance %+v (first %s)", i, d, inst, instance)
		}
		instance = d.SandboxID
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+instance, e.admin, nil), 204)
	if code, body := viaRouter("web--old.apps.localhost"); code != 200 {
		t.Fatalf("after its instance was killed: %d %s", code, body)
	}
	if d, _ := e.st.GetDeployment(ctx, stored.ID, "dep_old"); d.SandboxID == instance || d.SandboxID == "" {
		t.Fatalf("not restored again: %q", d.SandboxID)
	}
	if code, body := viaRouter("web--bad.apps.localhost"); code != 404 || !strings.Contains(body, "no release") {
		t.Fatalf("failed deployment's URL: %d %s", code, body)
	}

	e.mustStatus(e.do("DELETE", "/v1/apps/web", e.admin, nil), 204)
	e.mustStatus(e.do("GET", "/v1/apps/web", e.admin, nil), 404)
}

// newBaseSandbox creates a sandbox of base and returns its id.
func newBaseSandbox(t *testing.T, e *env) string {
	return e.mustStatus(e.do("POST", "/v1/sandboxes", e.admin, `{"template": "base"}`), 201).json(t)["id"].(string)
}

// TestGitHubWebhook: a recorded push payload whose clone URL is a repository served here, with a
// valid signature (deploys that commit), a repeated delivery (ignored), a bad signature (401),
// another branch (ignored) and a ping.
func TestGitHubWebhook(t *testing.T) {
	if _, err := os.Stat(apps.GitBackend); err != nil {
		t.Skip("git-http-backend is not installed")
	}
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "site"}), 201)
	e.mustStatus(e.do("POST", "/v1/apps/site/github", e.admin, map[string]any{"repo": "not a repo"}), 400)
	hook := e.mustStatus(e.do("POST", "/v1/apps/site/github", e.admin, map[string]any{"repo": "acme/site"}), 200).json(t)
	secret, url := hook["secret"].(string), hook["webhook_url"].(string)
	if !strings.HasPrefix(secret, "whsec_") || !strings.HasSuffix(url, "/github/webhook") {
		t.Fatalf("hook: %v", hook)
	}
	if a := e.mustStatus(e.do("GET", "/v1/apps/site", e.admin, nil), 200); strings.Contains(string(a.body), secret) {
		t.Fatal("the webhook secret is answered")
	}

	// A repository served over HTTP on loopback, with one commit on main.
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+root)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(work, 0o755)
	os.WriteFile(filepath.Join(work, "index.html"), []byte("<h1>from github</h1>"), 0o644)
	run(work, "init", "-q", "-b", "main")
	run(work, "add", "-A")
	run(work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
	sha := run(work, "rev-parse", "HEAD")
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "site.git"))
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "private.git"))
	// private.git answers only requests with the token (as GitHub does, basic auth).
	const token = "ghp_private-4711"
	backend := &cgi.Handler{Path: apps.GitBackend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	var tokenSeen, refused atomic.Int64
	gitSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/private.git") {
			if user, pass, ok := r.BasicAuth(); !ok || user != "x-access-token" || pass != token {
				refused.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="private"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
			tokenSeen.Add(1)
		}
		backend.ServeHTTP(w, r)
	}))
	defer gitSrv.Close()

	payload := func(ref string) []byte {
		b, _ := json.Marshal(map[string]any{"ref": ref, "after": sha, "deleted": false,
			"repository": map[string]any{"full_name": "acme/site", "clone_url": gitSrv.URL + "/site.git"}})
		return b
	}
	sign := func(key string, body []byte) string {
		m := hmac.New(sha256.New, []byte(key))
		m.Write(body)
		return "sha256=" + hex.EncodeToString(m.Sum(nil))
	}
	path := strings.TrimPrefix(url, "http://"+strings.TrimPrefix(e.hs.URL, "http://"))
	deliver := func(event, delivery, sig string, body []byte) resp {
		return e.do("POST", path, "", body, "X-GitHub-Event", event, "X-GitHub-Delivery", delivery, "X-Hub-Signature-256", sig,
			"Content-Type", "application/json")
	}
	push := payload("refs/heads/main")
	if r := deliver("push", "d-1", sign("whsec_wrong", push), push); r.status != 401 {
		t.Fatalf("bad signature: %d %s", r.status, r.body)
	}
	if r := deliver("push", "d-1", "sha256=zz", push); r.status != 401 {
		t.Fatalf("malformed signature: %d %s", r.status, r.body)
	}
	if r := deliver("ping", "d-0", sign(secret, []byte(`{}`)), []byte(`{}`)); r.status != 200 || !strings.Contains(string(r.body), "pong") {
		t.Fatalf("ping: %d %s", r.status, r.body)
	}
	tag := payload("refs/tags/v1")
	if r := deliver("push", "d-2", sign(secret, tag), tag); r.status != 200 || !strings.Contains(string(r.body), "ignored") {
		t.Fatalf("a tag: %d %s", r.status, r.body)
	}
	if r := deliver("push", "d-1", sign(secret, push), push); r.status != 202 || !strings.Contains(string(r.body), "deploying "+sha) {
		t.Fatalf("push: %d %s", r.status, r.body)
	}
	if r := deliver("push", "d-1", sign(secret, push), push); r.status != 200 || !strings.Contains(string(r.body), "duplicate") {
		t.Fatalf("repeated delivery: %d %s", r.status, r.body)
	}
	// A push to another branch deploys its preview.
	run(work, "checkout", "-q", "-b", "feature/x")
	run(work, "push", "-q", filepath.Join(root, "site.git"), "feature/x")
	feature := payload("refs/heads/feature/x")
	if r := deliver("push", "d-3", sign(secret, feature), feature); r.status != 202 {
		t.Fatalf("a push to another branch: %d %s", r.status, r.body)
	}
	var deps []struct{ Commit, Source, Branch string }
	waitFor(t, 30*time.Second, "the pushed commits' deployments", func() bool {
		var l struct {
			Deployments []struct{ Commit, Source, Branch string }
		}
		json.Unmarshal(e.do("GET", "/v1/apps/site/deployments", e.admin, nil).body, &l)
		deps = l.Deployments
		return len(deps) == 2
	})
	branches := map[string]bool{}
	for _, d := range deps {
		if d.Commit != sha || d.Source != "git" {
			t.Fatalf("deployments: %+v", deps)
		}
		branches[d.Branch] = true
	}
	if !branches["main"] || !branches["feature/x"] {
		t.Fatalf("deployments: %+v", deps)
	}

	// A private repository: cloned with the app's token; without it, refused (nothing deployed).
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "priv"}), 201)
	e.mustStatus(e.do("POST", "/v1/apps/priv/github", e.admin, map[string]any{"repo": "acme/private", "token": "has space"}), 400)
	e.mustStatus(e.do("POST", "/v1/apps/priv/github", e.admin, map[string]any{"repo": "acme/private", "token": strings.Repeat("x", 1025)}), 400)
	tokenOf := map[string]string{"priv": token, "nopriv": ""}
	privateDelivery := func(app, delivery string) {
		t.Helper()
		hook := e.mustStatus(e.do("POST", "/v1/apps/"+app+"/github", e.admin, map[string]any{"repo": "acme/private", "token": tokenOf[app]}), 200).json(t)
		if (hook["private"] == true) != (tokenOf[app] != "") {
			t.Fatalf("hook of %s: %v", app, hook)
		}
		b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "after": sha, "deleted": false,
			"repository": map[string]any{"full_name": "acme/private", "clone_url": gitSrv.URL + "/private.git"}})
		p := strings.TrimPrefix(hook["webhook_url"].(string), e.hs.URL)
		r := e.do("POST", p, "", b, "X-GitHub-Event", "push", "X-GitHub-Delivery", delivery, "X-Hub-Signature-256", sign(hook["secret"].(string), b),
			"Content-Type", "application/json")
		if r.status != 202 {
			t.Fatalf("push to %s: %d %s", app, r.status, r.body)
		}
	}
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "nopriv"}), 201)
	privateDelivery("nopriv", "p-1")
	waitFor(t, 30*time.Second, "the clone without a token to be refused", func() bool { return refused.Load() > 0 })
	privateDelivery("priv", "p-2")
	waitFor(t, 30*time.Second, "the private push's deployment", func() bool {
		var l struct{ Deployments []struct{ Commit string } }
		json.Unmarshal(e.do("GET", "/v1/apps/priv/deployments", e.admin, nil).body, &l)
		return len(l.Deployments) == 1 && l.Deployments[0].Commit == sha
	})
	if tokenSeen.Load() == 0 {
		t.Fatal("the clone did not send the token")
	}
	for _, app := range []string{"priv", "nopriv"} {
		if b := e.mustStatus(e.do("GET", "/v1/apps/"+app, e.admin, nil), 200).body; strings.Contains(string(b), token) {
			t.Fatalf("%s answers the token: %s", app, b)
		}
	}
	e.srv.apps.Wait()
	var l struct{ Deployments []struct{ Commit string } }
	if json.Unmarshal(e.do("GET", "/v1/apps/nopriv/deployments", e.admin, nil).body, &l); len(l.Deployments) != 0 {
		t.Fatalf("a clone without the token deployed: %+v", l)
	}
}

// TestAppInstancesBalanced: the router spreads an app's requests round-robin over its live
// deployment's instances (found by their metadata), skips one that was killed, and answers 502
// when none is left; a build sandbox or another deployment's are not among them. Maintenance
// restores the missing instances from the release.
func TestAppInstancesBalanced(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ProxyDomain = "localhost" })
	ctx := context.Background()
	e.agent.ServePorts(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) }))
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "duo", "min_instances": 2}), 201)
	app, _ := e.st.GetAppByName(ctx, "duo")
	instance := func(dep, role string) string {
		return e.create(e.admin, map[string]any{"template": "base", "metadata": map[string]string{
			"pandastack.app": "duo", "pandastack.app_role": role, "pandastack.deployment": dep}}).ID
	}
	a, b := instance("dep_live", "instance"), instance("dep_live", "instance")
	instance("dep_live", "build")
	instance("dep_other", "instance")
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+newBaseSandbox(t, e)+"/snapshots", e.admin, `{}`), 201).json(t)["id"].(string)
	if _, err := e.st.CreateDeployment(ctx, store.Deployment{ID: "dep_live", AppID: app.ID, TeamID: app.TeamID, State: apps.Live,
		Source: "upload", Plan: `{"port": 3000}`, SandboxID: a, SnapshotID: snap}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.st.SetLiveDeployment(ctx, app.ID, "", "dep_live"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	get := func() (int, string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = "duo.apps.localhost"
		w := httptest.NewRecorder()
		e.srv.Handler().ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	seen := map[string]int{}
	for range 6 {
		code, body := get()
		if code != 200 {
			t.Fatalf("request: %d %s", code, body)
		}
		seen[body]++
	}
	if len(seen) != 2 || seen[a] != 3 || seen[b] != 3 {
		t.Fatalf("requests reached %v; want 3 each of %s and %s", seen, a, b)
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+a, e.admin, nil), 204)
	for range 3 {
		if code, body := get(); code != 200 || body != b {
			t.Fatalf("with %s killed: %d %s", a, code, body)
		}
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+b, e.admin, nil), 204)
	if code, body := get(); code != 502 || !strings.Contains(body, "no running instance") {
		t.Fatalf("with both killed: %d %s", code, body)
	}
	// Maintenance restores two new instances of the release; requests reach both.
	if err := e.srv.apps.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	e.srv.apps.Wait()
	seen = map[string]int{}
	for range 4 {
		if code, body := get(); code != 200 || body == a || body == b {
			t.Fatalf("after the replacement: %d %s", code, body)
		} else {
			seen[body]++
		}
	}
	if len(seen) != 2 {
		t.Fatalf("replaced instances answering: %v", seen)
	}
}

// TestAppRuntimeLogsAllInstances: GET /v1/apps/{id}/logs reads the app's process on every live
// instance (restores of the release: the same pid), each line labelled with its instance, the
// secret redacted; with follow too; a killed instance drops out; none left is a 409.
func TestAppRuntimeLogsAllInstances(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.mustStatus(e.do("POST", "/v1/apps", e.admin, map[string]any{"name": "duo", "min_instances": 2,
		"secrets": map[string]string{"TOKEN": "s3cr3t-value"}}), 201)
	app, _ := e.st.GetAppByName(ctx, "duo")
	src := newBaseSandbox(t, e)
	started := e.mustStatus(e.do("POST", "/v1/sandboxes/"+src+"/processes", e.admin, map[string]any{"cmd": "echo listening with s3cr3t-value"}), 201).json(t)
	pid := int64(started["pid"].(float64))
	snap := e.mustStatus(e.do("POST", "/v1/sandboxes/"+src+"/snapshots", e.admin, `{}`), 201).json(t)["id"].(string)
	instance := func() string {
		return e.create(e.admin, map[string]any{"snapshot_id": snap, "metadata": map[string]string{
			"pandastack.app": "duo", "pandastack.app_role": "instance", "pandastack.deployment": "dep_live"}}).ID
	}
	a, b := instance(), instance()
	if _, err := e.st.CreateDeployment(ctx, store.Deployment{ID: "dep_live", AppID: app.ID, TeamID: app.TeamID, State: apps.Live,
		Source: "upload", Plan: `{"port": 3000}`, SandboxID: a, SnapshotID: snap, Pid: pid}); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.st.SetLiveDeployment(ctx, app.ID, "", "dep_live"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	line := func(id string) string { return "[" + id + "] listening with " + apps.Redacted + "\n" }
	for _, q := range []string{"", "?follow=1"} {
		got := string(e.mustStatus(e.do("GET", "/v1/apps/duo/logs"+q, e.admin, nil), 200).body)
		if len(got) != len(line(a))+len(line(b)) || !strings.Contains(got, line(a)) || !strings.Contains(got, line(b)) {
			t.Fatalf("logs%s:\n%s", q, got)
		}
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+a, e.admin, nil), 204)
	if got := string(e.mustStatus(e.do("GET", "/v1/apps/duo/logs", e.admin, nil), 200).body); got != line(b) {
		t.Fatalf("logs with %s killed:\n%s", a, got)
	}
	e.mustStatus(e.do("DELETE", "/v1/sandboxes/"+b, e.admin, nil), 204)
	if r := e.do("GET", "/v1/apps/duo/logs", e.admin, nil); r.status != 409 || !strings.Contains(r.errMessage(), "no running instance") {
		t.Fatalf("logs with none left: %d %s", r.status, r.body)
	}
}
