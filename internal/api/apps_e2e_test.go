package api

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// Apps on real microVMs: fixture apps (testdata/apps) built in build sandboxes, released as
// snapshots, served through the router, switched blue-green, rolled back.

const appSecret = "tok-4711-very-secret"

type deploymentJSON struct {
	ID, State, Error, Branch, URL string
	SandboxID                     string `json:"sandbox_id"`
	BuildMS                       int64  `json:"build_ms"`
	Plan                          struct{ Framework, Start string }
}

// packFixture copies testdata/apps/<name> to a temporary directory, lets edit change it, and
// packs it as an upload does.
func packFixture(t *testing.T, name string, edit func(dir string)) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("testdata", "apps", name)
	filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, _ := os.ReadFile(p)
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if edit != nil {
		edit(dir)
	}
	b, err := bundle.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (cp *e2eCP) appDeploy(t *testing.T, app string, archive []byte, query ...string) deploymentJSON {
	t.Helper()
	path := "/v1/apps/" + app + "/deployments"
	if len(query) > 0 {
		path += "?" + strings.Join(query, "&")
	}
	code, b := cp.call(t, "POST", path, archive, "application/gzip")
	var d deploymentJSON
	if code != 202 || json.Unmarshal(b, &d) != nil {
		t.Fatalf("deploy %s: %d %s", app, code, b)
	}
	return d
}

// appDeployLive deploys archive (of version) to app, waits for it to be live and checks its build
// logs hold each of want.
func (cp *e2eCP) appDeployLive(t *testing.T, app, version string, archive []byte, want ...string) deploymentJSON {
	t.Helper()
	d := cp.appWait(t, app, cp.appDeploy(t, app, archive).ID)
	_, logs := cp.call(t, "GET", "/v1/apps/"+app+"/deployments/"+d.ID+"/logs", nil, "")
	if d.State != "live" {
		t.Fatalf("%s: %+v\n%s", version, d, logs)
	}
	for _, w := range want {
		if !strings.Contains(string(logs), w) {
			t.Fatalf("%s's build logs lack %q:\n%s", version, w, logs)
		}
	}
	return d
}

// appWait waits for a deployment to end (live or failed) and returns it.
func (cp *e2eCP) appWait(t *testing.T, app, id string) deploymentJSON {
	t.Helper()
	var d deploymentJSON
	waitFor(t, 15*time.Minute, "deployment "+id+" of "+app, func() bool {
		_, b := cp.call(t, "GET", "/v1/apps/"+app+"/deployments/"+id, nil, "")
		json.Unmarshal(b, &d)
		return d.State == "live" || d.State == "failed"
	})
	return d
}

// appGet sends one request through the router to app's host name.
func (cp *e2eCP) appGet(app, path string) (int, string, error) {
	req, _ := http.NewRequest("GET", cp.hs.URL+path, nil)
	req.Host = app + ".apps.localhost"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func (cp *e2eCP) mustServe(t *testing.T, app, want string) {
	t.Helper()
	code, body, err := cp.appGet(app, "/")
	if err != nil || code != 200 || !strings.Contains(body, want) {
		t.Fatalf("%s serves %d %q %v; want %q", app, code, body, err, want)
	}
}

// blueGreen deploys archive to app while clients loop requests to it, and fails the test when
// one fails; want is what the new release answers (one client must see it before they stop).
func (cp *e2eCP) blueGreen(t *testing.T, app string, clients int, archive []byte, want string) deploymentJSON {
	t.Helper()
	var failed, served atomic.Int64
	var sawNew atomic.Bool
	stop := testenv.Loop(clients, func() {
		code, body, err := cp.appGet(app, "/")
		switch {
		case err != nil || code != 200:
			failed.Add(1)
			t.Logf("request failed during the switch: %d %q %v", code, body, err)
		case strings.Contains(body, want):
			sawNew.Store(true)
		}
		served.Add(1)
	})
	d := cp.appDeploy(t, app, archive)
	got := cp.appWait(t, app, d.ID)
	if got.State == "live" {
		waitFor(t, time.Minute, "a client to see "+want, sawNew.Load)
	}
	stop()
	if got.State != "live" {
		_, logs := cp.call(t, "GET", "/v1/apps/"+app+"/deployments/"+d.ID+"/logs", nil, "")
		t.Fatalf("%s's new deployment: %+v\n%s", app, got, logs)
	}
	if failed.Load() != 0 || served.Load() < 10 {
		t.Fatalf("blue-green: %d of %d requests failed", failed.Load(), served.Load())
	}
	t.Logf("blue-green of %s: %d requests, none failed", app, served.Load())
	cp.mustServe(t, app, want)
	return got
}

// vendorVite packs testdata/apps/vite with its node_modules installed here by the host's npm
// (`npm ci` from the lockfile, no install scripts): the VM builds it without a registry. Without
// npm or the registry it says why the vite part is skipped.
func vendorVite(t *testing.T) ([]byte, string) {
	if _, err := exec.LookPath("npm"); err != nil {
		return nil, "no npm on this host to vendor the vite fixture's node_modules"
	}
	var out []byte
	var err error
	b := packFixture(t, "vite", func(dir string) {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		cmd.Dir = dir
		out, err = cmd.CombinedOutput()
	})
	if err != nil {
		return nil, fmt.Sprintf("npm ci of the vite fixture failed (no registry here?): %v\n%s", err, out)
	}
	return b, ""
}

// testCA is the PEM of a self-signed CA certificate (the operator's --guest-ca-file).
func testCA(t *testing.T) []byte {
	pemCA, _ := testCAIssuing(t)
	return pemCA
}

// testCAIssuing is a self-signed CA certificate (PEM) and a function that issues a server
// certificate from it for the given IP addresses (a TLS-inspecting proxy's CA, in tests).
func testCAIssuing(t *testing.T) ([]byte, func(ips ...net.IP) tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test proxy CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ips ...net.IP) tls.Certificate {
		skey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "registry behind the proxy"},
			IPAddresses: ips, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		sder, err := x509.CreateCertificate(rand.Reader, leaf, ca, &skey.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{sder}, PrivateKey: skey}
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), issue
}

func TestE2EApps(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	_, cp := startNetworkedCP(t, Config{ProxyDomain: "localhost", GitDir: t.TempDir(), GuestCA: testCA(t)})
	call := func(method, path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		if body == nil {
			b = nil
		}
		code, rb := cp.call(t, method, path, b, "application/json")
		var m map[string]any
		json.Unmarshal(rb, &m)
		return code, m
	}

	// Bad input: a name that is not DNS-safe, an upload over the limit, another team's app.
	if code, m := call("POST", "/v1/apps", map[string]any{"name": "Not_DNS"}); code != 400 {
		t.Fatalf("bad name: %d %v", code, m)
	}
	for _, name := range []string{"web", "site", "py", "vite"} {
		spec := map[string]any{"name": name}
		if name == "vite" { // its dependencies come vendored (vendorVite): nothing to install in the VM
			spec["build"] = map[string]any{"install": "true", "build": "node node_modules/vite/bin/vite.js build"}
		}
		if name == "web" {
			spec["env"] = map[string]string{"GREETING": "hello"}
			spec["secrets"] = map[string]string{"API_TOKEN": appSecret}
			// A bound, not a timing: node's start-up under TCG on a loaded machine can take a minute.
			spec["health_timeout_seconds"] = 300
		}
		if code, m := call("POST", "/v1/apps", spec); code != 201 {
			t.Fatalf("create %s: %d %v", name, code, m)
		}
	}
	if code, _ := call("POST", "/v1/apps", map[string]any{"name": "web"}); code != 409 {
		t.Fatalf("a taken name: %d", code)
	}
	if code, b := cp.call(t, "POST", "/v1/apps/web/deployments", bytes.Repeat([]byte{0x1f}, 33<<20), "application/gzip"); code != 413 {
		t.Fatalf("oversize upload: %d %s", code, b)
	}
	if code, b := cp.call(t, "POST", "/v1/apps/web/deployments", []byte("not an archive"), "application/gzip"); code != 400 {
		t.Fatalf("not an archive: %d %s", code, b)
	}
	if code, m := call("POST", "/v1/teams", map[string]any{"name": "other"}); code != 201 {
		t.Fatalf("team: %d %v", code, m)
	} else {
		other := m["key"].(map[string]any)["key"].(string)
		req, _ := http.NewRequest("GET", cp.hs.URL+"/v1/apps/web", nil)
		req.Header.Set("Authorization", "Bearer "+other)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 404 {
			t.Fatalf("another team's app: %v %v", res.StatusCode, err)
		}
		res.Body.Close()
	}

	// Four apps deploy at once: a plain node server, a static site, a standard-library python app
	// and a vite app (its node_modules vendored here by the host's npm; the VM reaches no registry).
	viteSrc, viteSkip := vendorVite(t)
	v1 := cp.appDeploy(t, "web", packFixture(t, "node", func(dir string) {
		os.WriteFile(filepath.Join(dir, "debug.log"), []byte("ignored"), 0o644)
	}))
	site := cp.appDeploy(t, "site", packFixture(t, "static", nil))
	py := cp.appDeploy(t, "py", packFixture(t, "python", nil))
	if v1.Plan.Framework != "node" || site.Plan.Framework != "static" || py.Plan.Framework != "python" {
		t.Fatalf("plans: %+v %+v %+v", v1.Plan, site.Plan, py.Plan)
	}
	deploys := []struct{ app, id string }{{"web", v1.ID}, {"site", site.ID}, {"py", py.ID}}
	if viteSkip == "" {
		vd := cp.appDeploy(t, "vite", viteSrc)
		if vd.Plan.Framework != "vite" || !strings.Contains(vd.Plan.Start, "dist") {
			t.Fatalf("vite plan: %+v", vd.Plan)
		}
		deploys = append(deploys, struct{ app, id string }{"vite", vd.ID})
	}
	for _, d := range deploys {
		got := cp.appWait(t, d.app, d.id)
		if got.State != "live" {
			_, logs := cp.call(t, "GET", "/v1/apps/"+d.app+"/deployments/"+d.id+"/logs", nil, "")
			t.Fatalf("%s: %+v\n%s", d.app, got, logs)
		}
		t.Logf("%s: build (build VM to release snapshot) %d ms, four at once", d.app, got.BuildMS)
	}
	cp.mustServe(t, "web", "node v1 built=true")
	cp.mustServe(t, "site", "static fixture")
	cp.mustServe(t, "py", "python ok /")
	t.Run("vite", func(t *testing.T) {
		if viteSkip != "" {
			t.Skip(viteSkip)
		}
		_, body, _ := cp.appGet("vite", "/")
		asset := regexp.MustCompile(`/assets/index-[A-Za-z0-9_-]+\.js`).FindString(body)
		if !strings.Contains(body, "<title>vite fixture</title>") || asset == "" {
			t.Fatalf("vite's built index.html: %q", body)
		}
		if code, js, err := cp.appGet("vite", asset); code != 200 || !strings.Contains(js, "vite fixture built") {
			t.Fatalf("vite's built bundle %s: %d %q %v", asset, code, js, err)
		}
	})
	if _, body, _ := cp.appGet("web", "/env"); !strings.Contains(body, `"greeting":"hello"`) || !strings.Contains(body, `"tokenLength":20`) ||
		!strings.Contains(body, `"extraCA":true,"bundleHasCA":true`) {
		t.Fatalf("env: %s", body)
	}
	_, logs := cp.call(t, "GET", "/v1/apps/web/deployments/"+v1.ID+"/logs", nil, "")
	if !strings.Contains(string(logs), "building with token [redacted]") || strings.Contains(string(logs), appSecret) {
		t.Fatalf("build logs:\n%s", logs)
	}
	if _, rt := cp.call(t, "GET", "/v1/apps/web/logs", nil, ""); !strings.Contains(string(rt), "listening on 8080 with token [redacted]") ||
		strings.Contains(string(rt), appSecret) {
		t.Fatalf("runtime logs:\n%s", rt)
	}

	// Blue-green: a second deploy while clients loop requests; not one fails.
	v2 := cp.blueGreen(t, "web", 2, packFixture(t, "node", func(dir string) {
		os.WriteFile(filepath.Join(dir, "version.txt"), []byte("v2\n"), 0o644)
	}), "node v2")

	// A broken build fails and leaves v2 serving, its logs saying why. It is a clean build: not on
	// v2's release (the build cache) but in a new sandbox of base.
	bad := cp.appDeploy(t, "web", packFixture(t, "node", func(dir string) {
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"scripts": {"build": "echo compiling; exit 3", "start": "node server.js"}}`), 0o644)
	}), "clean=1")
	if got := cp.appWait(t, "web", bad.ID); got.State != "failed" || !strings.Contains(got.Error, "exit 3") {
		t.Fatalf("broken build: %+v", got)
	}
	if _, logs := cp.call(t, "GET", "/v1/apps/web/deployments/"+bad.ID+"/logs", nil, ""); !strings.Contains(string(logs), "==> clean build") ||
		!strings.Contains(string(logs), "==> build sandbox from base") || strings.Contains(string(logs), "from the release of") {
		t.Fatalf("clean build's logs:\n%s", logs)
	}
	cp.mustServe(t, "web", "node v2")

	// A release that never answers its health check fails too; v2 keeps serving.
	if code, m := call("PATCH", "/v1/apps/web", map[string]any{"health_timeout_seconds": 5}); code != 200 {
		t.Fatalf("patch: %d %v", code, m)
	}
	deaf := cp.appDeploy(t, "web", packFixture(t, "node", func(dir string) {
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"scripts": {"start": "node -e 'setInterval(() => {}, 1000)'"}}`), 0o644)
	}))
	if got := cp.appWait(t, "web", deaf.ID); got.State != "failed" || !strings.Contains(got.Error, "health check") {
		t.Fatalf("unhealthy release: %+v", got)
	}
	cp.mustServe(t, "web", "node v2")
	call("PATCH", "/v1/apps/web", map[string]any{"health_timeout_seconds": 300})

	// Rollback to v1: no build, the old release restored.
	start := time.Now()
	if code, m := call("POST", "/v1/apps/web/rollback", map[string]any{"deployment_id": v1.ID}); code != 200 || m["state"] != "live" {
		t.Fatalf("rollback: %d %v", code, m)
	}
	t.Logf("rollback took %s", time.Since(start))
	cp.mustServe(t, "web", "node v1")

	// git push to the app's remote deploys its branch.
	repo := t.TempDir()
	os.CopyFS(repo, os.DirFS(filepath.Join("testdata", "apps", "node")))
	os.WriteFile(filepath.Join(repo, "version.txt"), []byte("v3-from-git\n"), 0o644)
	remote := strings.Replace(cp.hs.URL, "http://", "http://git:"+cp.admin+"@", 1) + "/git/web.git"
	gitRun := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+repo)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "v3"}} {
		if out, err := gitRun(args...); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if out, err := gitRun("push", "-q", remote, "main"); err != nil {
		t.Fatalf("git push: %v %s", err, out)
	}
	var pushed deploymentJSON
	waitFor(t, time.Minute, "the push's deployment", func() bool {
		_, b := cp.call(t, "GET", "/v1/apps/web/deployments?limit=1", nil, "")
		var ds struct{ Deployments []deploymentJSON }
		json.Unmarshal(b, &ds)
		if len(ds.Deployments) == 1 && ds.Deployments[0].ID != v1.ID && ds.Deployments[0].ID != deaf.ID {
			pushed = ds.Deployments[0]
		}
		return pushed.ID != ""
	})
	if got := cp.appWait(t, "web", pushed.ID); got.State != "live" {
		t.Fatalf("pushed deployment: %+v", got)
	}
	cp.mustServe(t, "web", "node v3-from-git")
	if out, err := gitRun("push", "-q", strings.Replace(remote, cp.admin, "pds_wrong", 1), "main"); err == nil {
		t.Fatalf("a push with a bad key went through: %s", out)
	}
	if out, err := gitRun("push", "-q", strings.Replace(remote, "/web.git", "/nope.git", 1), "main"); err == nil ||
		!strings.Contains(out, "404") && !strings.Contains(out, "not found") {
		t.Fatalf("a push to an unknown app: %v %s", err, out)
	}
	code, m := call("GET", "/v1/apps/web", nil)
	if code != 200 || m["live_deployment_id"] != pushed.ID || strings.Contains(string(mustJSON(m)), appSecret) {
		t.Fatalf("app after the push: %d %v", code, m)
	}

	// A push to another branch deploys its preview, beside the app.
	os.WriteFile(filepath.Join(repo, "version.txt"), []byte("v4-preview\n"), 0o644)
	for _, args := range [][]string{{"checkout", "-q", "-b", "feature/x"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "v4"}, {"push", "-q", remote, "feature/x"}} {
		if out, err := gitRun(args...); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	var preview deploymentJSON
	waitFor(t, time.Minute, "the preview's deployment", func() bool {
		_, b := cp.call(t, "GET", "/v1/apps/web/deployments?limit=1", nil, "")
		var ds struct{ Deployments []deploymentJSON }
		json.Unmarshal(b, &ds)
		if len(ds.Deployments) == 1 && ds.Deployments[0].ID != pushed.ID {
			preview = ds.Deployments[0]
		}
		return preview.ID != ""
	})
	if got := cp.appWait(t, "web", preview.ID); got.State != "live" {
		t.Fatalf("preview: %+v", got)
	}
	cp.mustServe(t, "web--feature-x", "node v4-preview")
	cp.mustServe(t, "web", "node v3-from-git")

	// Every deployment with a release has its own URL: superseded v2 is restored there (once)
	// and serves v2 while the app serves v3; the live one's is its instance.
	_, ob := cp.call(t, "GET", "/v1/apps/web/deployments/"+v2.ID, nil, "")
	var old deploymentJSON
	json.Unmarshal(ob, &old)
	oldHost := "web--" + strings.TrimPrefix(v2.ID, "dep_")
	if old.State != "superseded" || old.URL != "http://"+oldHost+".apps.localhost" {
		t.Fatalf("v2 after later deploys: %+v", old)
	}
	start = time.Now()
	cp.mustServe(t, oldHost, "node v2")
	t.Logf("a superseded release's own URL, first response (restore + health check): %s", time.Since(start))
	cp.mustServe(t, oldHost, "node v2")
	cp.mustServe(t, "web", "node v3-from-git")
	cp.mustServe(t, "web--"+strings.TrimPrefix(pushed.ID, "dep_"), "node v3-from-git")

	// Deleting the preview: its host name answers 404, the app still serves.
	if code, _ := call("DELETE", "/v1/apps/web/previews/feature%2Fx", nil); code != 204 {
		t.Fatalf("delete preview: %d", code)
	}
	if code, _, _ := cp.appGet("web--feature-x", "/"); code != 404 {
		t.Fatalf("deleted preview answers %d", code)
	}
	cp.mustServe(t, "web", "node v3-from-git")

	// Scale to zero: idle past suspend_after_seconds, the instance hibernates; a request wakes it.
	if code, m := call("PATCH", "/v1/apps/web", map[string]any{"suspend_after_seconds": 1}); code != 200 {
		t.Fatalf("patch: %d %v", code, m)
	}
	_, b := cp.call(t, "GET", "/v1/apps/web/deployments/"+pushed.ID, nil, "")
	var live deploymentJSON
	json.Unmarshal(b, &live)
	waitFor(t, time.Minute, "the idle instance to hibernate", func() bool {
		if err := cp.srv.apps.Maintain(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, b := cp.call(t, "GET", "/v1/sandboxes/"+live.SandboxID, nil, "")
		return strings.Contains(string(b), `"state":"hibernated"`)
	})
	start = time.Now()
	cp.mustServe(t, "web", "node v3-from-git")
	t.Logf("first response from zero: %s", time.Since(start))

	// Deleting an app takes its route, instances and releases.
	if code, _ := call("DELETE", "/v1/apps/py", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _, _ := cp.appGet("py", "/"); code != 404 {
		t.Fatalf("deleted app answers %d", code)
	}
	cp.srv.apps.Wait()
}
