package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/bundle"
	"github.com/pandastack/pandastack/internal/testenv"
)

// benchApp is a plain node server (no dependencies) that answers its version.
const benchAppServer = `const http = require('http');
const version = require('fs').readFileSync(__dirname + '/version.txt', 'utf8').trim();
http.createServer((req, res) => res.end('bench ' + version + '\n')).listen(Number(process.env.PORT));
`

// appsSuite runs a real agent and server and measures apps: a deploy (build in a microVM, release
// snapshot, restore, health check, switch), requests failed across a blue-green switch (goal 0),
// rollbacks (restore an earlier release, check, switch: no rebuild), and the first response of an
// app woken from zero (its instance hibernated) against a cold start of the same server in a
// fresh sandbox (create, write, node server.js, first answer) in the same run, interleaved.
func appsSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string, rounds int) error {
	cl, err := startCluster(guestAgent, imageCache, "10.207.0.0/20")
	if err != nil {
		return err
	}
	defer cl.stop()
	c := cl.public
	// Generous health timeout: npm start under a loaded TCG machine can take tens of seconds.
	if _, err := c.do("POST", "/v1/apps", map[string]any{"name": "bench", "health_timeout_seconds": 300}, 201); err != nil {
		return err
	}
	deploy := func(version string) (string, float64, error) {
		archive, err := benchAppArchive(version)
		if err != nil {
			return "", 0, err
		}
		return deployBenchApp(c, "bench", archive)
	}
	v1, d1, err := deploy("v1")
	if err != nil {
		return err
	}
	res["app_first_deploy_ms"] = d1

	// Blue-green: a second deploy while 4 clients loop requests.
	var failed, served atomic.Int64
	stop := testenv.Loop(4, func() {
		if body, err := appRequest(c.base, "bench"); err != nil || !strings.HasPrefix(body, "bench v") {
			failed.Add(1)
		}
		served.Add(1)
	})
	v2, d2, err := deploy("v2")
	stop()
	if err != nil {
		return err
	}
	res["app_redeploy_ms"] = d2
	res["app_switch_requests"] = float64(served.Load())
	res["app_switch_failed_requests"] = float64(failed.Load())

	// Rollbacks, back and forth: restore + health check + switch + drain of the old.
	var rb []float64
	for i := range samples(rounds) {
		target := v1
		if i%2 == 1 {
			target = v2
		}
		t := time.Now()
		if _, err := c.do("POST", "/v1/apps/bench/rollback", map[string]any{"deployment_id": target}, 200); err != nil {
			return err
		}
		rb = append(rb, ms(time.Since(t)))
	}
	res["app_rollback_p50_ms"], res["app_rollback_p99_ms"] = pct(rb, 50), pct(rb, 99)

	// Wake from zero against a cold start, interleaved.
	wake := timed(func() error {
		b, err := c.do("GET", "/v1/apps/bench", nil, 200)
		if err != nil {
			return err
		}
		var a struct {
			Live string `json:"live_deployment_id"`
		}
		json.Unmarshal(b, &a)
		b, err = c.do("GET", "/v1/apps/bench/deployments/"+a.Live, nil, 200)
		if err != nil {
			return err
		}
		var d struct {
			SandboxID string `json:"sandbox_id"`
		}
		json.Unmarshal(b, &d)
		if _, err := c.do("POST", "/v1/sandboxes/"+d.SandboxID+"/hibernate", nil, 200); err != nil {
			return err
		}
		return nil
	})
	first := func() (float64, error) {
		if _, err := wake(); err != nil { // hibernate (not timed)
			return 0, err
		}
		t := time.Now()
		if _, err := appRequest(c.base, "bench"); err != nil {
			return 0, err
		}
		return ms(time.Since(t)), nil
	}
	cold := func() (float64, error) {
		t := time.Now()
		body, err := c.do("POST", "/v1/sandboxes", map[string]any{"template": "base"}, 201)
		if err != nil {
			return 0, err
		}
		var sb struct{ ID string }
		json.Unmarshal(body, &sb)
		defer c.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, 204)
		cmd := "mkdir -p /tmp/app && cd /tmp/app && echo v1 > version.txt && cat > server.js <<'EOF'\n" + benchAppServer +
			"EOF\n(PORT=8080 setsid nohup node server.js > /dev/null 2>&1 &)"
		if _, err := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": cmd}, 200); err != nil {
			return 0, err
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			req, _ := http.NewRequest("GET", c.base+"/", nil)
			req.Host = "8080-" + sb.ID + ".localhost"
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && strings.HasPrefix(string(b), "bench") {
					return ms(time.Since(t)), nil
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		return 0, fmt.Errorf("the cold node server did not answer in a minute")
	}
	lat, err := interleaved(rounds, first, cold)
	if err != nil {
		return err
	}
	res["app_wake_first_response_p50_ms"], res["app_wake_first_response_p99_ms"] = pct(lat[0], 50), pct(lat[0], 99)
	res["app_cold_start_first_response_p50_ms"], res["app_cold_start_first_response_p99_ms"] = pct(lat[1], 50), pct(lat[1], 99)
	res["app_cold_over_wake"] = res["app_cold_start_first_response_p50_ms"] / res["app_wake_first_response_p50_ms"]
	return nil
}

// appRequest sends one GET / to app through the server's router.
func appRequest(base, app string) (string, error) { return appGet(base, app, "/") }

// appGet GETs path of app through the server's proxy: the body, or an error for a status not 200.
func appGet(base, app, path string) (string, error) {
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Host = app + ".apps.localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s answered %d: %s", app, resp.StatusCode, b)
	}
	return string(b), err
}

// deployBenchApp uploads archive to app and waits until the deployment is live: its id and the
// time from the upload to live.
func deployBenchApp(c *apiClient, app string, archive []byte) (string, float64, error) {
	t := time.Now()
	req, _ := http.NewRequest("POST", c.base+"/v1/apps/"+app+"/deployments", bytes.NewReader(archive))
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var d struct{ ID, State, Error string }
	if json.Unmarshal(body, &d); resp.StatusCode != 202 {
		return "", 0, fmt.Errorf("deploy: %d %s", resp.StatusCode, body)
	}
	for d.State != "live" {
		if d.State == "failed" {
			logs, _ := c.do("GET", "/v1/apps/"+app+"/deployments/"+d.ID+"/logs", nil, 200)
			return "", 0, fmt.Errorf("deployment %s failed: %s\n%s", d.ID, d.Error, logs)
		}
		time.Sleep(100 * time.Millisecond)
		b, err := c.do("GET", "/v1/apps/"+app+"/deployments/"+d.ID, nil, 200)
		if err != nil {
			return "", 0, err
		}
		json.Unmarshal(b, &d)
	}
	return d.ID, ms(time.Since(t)), nil
}

// benchAppArchive packs the bench app at version.
func benchAppArchive(version string) ([]byte, error) {
	return packTree(func(dir string) error {
		return writeFiles(dir, map[string]string{"server.js": benchAppServer, "version.txt": version + "\n",
			"package.json": `{"name": "bench", "scripts": {"start": "node server.js"}}`})
	})
}

// packTree packs (bundle.Pack) the tree fill writes into a temporary directory, removed after.
func packTree(fill func(dir string) error) ([]byte, error) {
	dir, err := os.MkdirTemp("", "pandastack-bench-app-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := fill(dir); err != nil {
		return nil, err
	}
	return bundle.Pack(dir)
}

// nextApp is a minimal Next.js app (app router, one page); its dependencies come from the npm
// registry inside the build VM.
var nextApp = map[string]string{
	"package.json": `{"name": "nextbench", "private": true,
  "dependencies": {"next": "^15", "react": "^19", "react-dom": "^19"}}
`,
	"app/layout.js": "export default function RootLayout({ children }) { return <html><body>{children}</body></html>; }\n",
	"app/page.js":   "export default function Page() { return <h1>next bench</h1>; }\n",
}

// buildBench is an app whose build the bench measures in a build microVM: deployed twice, the
// second time a source change built on the first build's cache.
type buildBench struct {
	name, key, cidr string         // the app's name, its figures' key prefix, the cluster's network
	spec            map[string]any // POST /v1/apps body (its name is set from name)
	serverArgs      []string
	// source writes deploy i's (1 or 2) tree into dir; check looks at the app live after deploy i.
	source func(dir string, i int) error
	check  func(base string, i int) error
}

// appsBuildSuite deploys b twice and records the whole deploys (upload to live) and the builds
// (build VM to release snapshot) under b.key: _first_ and _redeploy_ (on the build cache).
func appsBuildSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string, b buildBench) error {
	cl, err := startCluster(guestAgent, imageCache, b.cidr, b.serverArgs...)
	if err != nil {
		return err
	}
	defer cl.stop()
	c := cl.public
	spec := maps.Clone(b.spec)
	spec["name"] = b.name
	if _, err := c.do("POST", "/v1/apps", spec, 201); err != nil {
		return err
	}
	for i, key := range []string{b.key + "_first", b.key + "_redeploy"} {
		archive, err := packTree(func(dir string) error { return b.source(dir, i+1) })
		if err != nil {
			return err
		}
		id, total, err := deployBenchApp(c, b.name, archive)
		if err != nil {
			return err
		}
		body, err := c.do("GET", "/v1/apps/"+b.name+"/deployments/"+id, nil, 200)
		if err != nil {
			return err
		}
		var d struct {
			BuildMS float64 `json:"build_ms"`
		}
		json.Unmarshal(body, &d)
		res[key+"_deploy_ms"], res[key+"_build_ms"] = total, d.BuildMS
		if err := b.check(c.base, i+1); err != nil {
			return fmt.Errorf("the %s app after deploy %d: %w", b.name, i+1, err)
		}
		fmt.Printf("%s app deploy %d: %.0f ms (build %.0f ms)\n", b.name, i+1, total, d.BuildMS)
	}
	return nil
}

// writeFiles writes files (path → content) under dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nextBench is a real `next build` (issue 18's Next.js figure): nextApp's install reaches the npm
// registry from the guest — behind a TLS-inspecting proxy give its CA with -guest-ca-file (the
// server's --guest-ca-file) — and the redeploy's install is skipped on the build cache.
func nextBench() buildBench {
	next := "node node_modules/next/dist/bin/next"
	var args []string
	if guestCAFile != "" {
		args = append(args, "--guest-ca-file", guestCAFile)
	}
	return buildBench{name: "nextbench", key: "app_next", cidr: "10.208.0.0/20", serverArgs: args,
		spec: map[string]any{"health_timeout_seconds": 600, "env": map[string]string{"NEXT_TELEMETRY_DISABLED": "1"},
			"build": map[string]any{"install": "npm install --no-audit --no-fund", "build": next + " build", "start": next + " start -p $PORT"}},
		source: func(dir string, i int) error {
			files := maps.Clone(nextApp)
			files["app/page.js"] = strings.Replace(files["app/page.js"], "next bench", fmt.Sprintf("next bench %d", i), 1)
			return writeFiles(dir, files)
		},
		check: func(base string, i int) error {
			if body, err := appGet(base, "nextbench", "/"); err != nil || !strings.Contains(body, fmt.Sprintf("next bench %d", i)) {
				return fmt.Errorf("%v %q", err, body)
			}
			return nil
		},
	}
}

// viteFixture is the apps e2e test's vite app (its lock file pins vite).
const viteFixture = "internal/api/testdata/apps/vite"

// viteBench is a `vite build` of the apps e2e test's vite fixture (issue 18's build figure of the
// fixture vite app). Its node_modules are installed here by the host's npm from the lock file
// (`npm ci --ignore-scripts`, as the test does): the build VM needs no registry, and the figure is
// vite's build plus the release, not the download.
func viteBench() buildBench {
	return buildBench{name: "vitebench", key: "app_vite", cidr: "10.209.0.0/20",
		spec: map[string]any{"health_timeout_seconds": 300, "build": map[string]any{"install": "true", "build": "node node_modules/vite/bin/vite.js build"}},
		source: func(dir string, i int) error {
			if err := os.CopyFS(dir, os.DirFS(viteFixture)); err != nil {
				return fmt.Errorf("the vite fixture (run the bench from the repository's root): %w", err)
			}
			main := filepath.Join(dir, "main.js")
			src, err := os.ReadFile(main)
			if err != nil {
				return err
			}
			if err := os.WriteFile(main, bytes.Replace(src, []byte("vite fixture built"), []byte(fmt.Sprintf("vite bench %d built", i)), 1), 0o644); err != nil {
				return err
			}
			cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("npm ci of the vite fixture: %v\n%s", err, out)
			}
			return nil
		},
		check: func(base string, i int) error {
			page, err := appGet(base, "vitebench", "/")
			asset := regexp.MustCompile(`/assets/index-[A-Za-z0-9_-]+\.js`).FindString(page)
			if err != nil || asset == "" {
				return fmt.Errorf("its index.html: %v %q", err, page)
			}
			if js, err := appGet(base, "vitebench", asset); err != nil || !strings.Contains(js, fmt.Sprintf("vite bench %d built", i)) {
				return fmt.Errorf("its bundle %s: %v", asset, err)
			}
			return nil
		},
	}
}
