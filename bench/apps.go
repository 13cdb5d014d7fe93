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
	"path/filepath"
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
func appRequest(base, app string) (string, error) {
	req, _ := http.NewRequest("GET", base+"/", nil)
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

// benchAppArchive packs the bench app at version.
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

func benchAppArchive(version string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "pandastack-bench-app-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for name, content := range map[string]string{"server.js": benchAppServer, "version.txt": version + "\n",
		"package.json": `{"name": "bench", "scripts": {"start": "node server.js"}}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
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

// appsNextSuite measures a real ` + "`next build`" + ` in a build microVM (issue 18's Next.js figure): a
// deploy of nextApp, whose install reaches the npm registry from the guest — behind a
// TLS-inspecting proxy give its CA with -guest-ca-file (the server's --guest-ca-file) — then a
// redeploy of a source change on the build cache (node_modules reused, the install skipped). Its
// figures are the whole deploys (upload to live) and the build (build VM to release snapshot).
// Run only when named (-suites appsnext): it needs the registry and takes many minutes under TCG.
func appsNextSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string) error {
	var args []string
	if guestCAFile != "" {
		args = append(args, "--guest-ca-file", guestCAFile)
	}
	cl, err := startCluster(guestAgent, imageCache, "10.208.0.0/20", args...)
	if err != nil {
		return err
	}
	defer cl.stop()
	c := cl.public
	next := "node node_modules/next/dist/bin/next"
	if _, err := c.do("POST", "/v1/apps", map[string]any{"name": "nextbench", "health_timeout_seconds": 600,
		"env":   map[string]string{"NEXT_TELEMETRY_DISABLED": "1"},
		"build": map[string]any{"install": "npm install --no-audit --no-fund", "build": next + " build", "start": next + " start -p $PORT"}}, 201); err != nil {
		return err
	}
	for i, key := range []string{"app_next_first", "app_next_redeploy"} {
		dir, err := os.MkdirTemp("", "pandastack-bench-next-")
		if err != nil {
			return err
		}
		files := maps.Clone(nextApp)
		files["app/page.js"] = strings.Replace(files["app/page.js"], "next bench", fmt.Sprintf("next bench %d", i+1), 1)
		for name, content := range files {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		archive, err := bundle.Pack(dir)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		id, total, err := deployBenchApp(c, "nextbench", archive)
		if err != nil {
			return err
		}
		b, err := c.do("GET", "/v1/apps/nextbench/deployments/"+id, nil, 200)
		if err != nil {
			return err
		}
		var d struct {
			BuildMS float64 `json:"build_ms"`
		}
		json.Unmarshal(b, &d)
		res[key+"_deploy_ms"], res[key+"_build_ms"] = total, d.BuildMS
		if body, err := appRequest(c.base, "nextbench"); err != nil || !strings.Contains(body, fmt.Sprintf("next bench %d", i+1)) {
			return fmt.Errorf("the next app after deploy %d: %v %q", i+1, err, body)
		}
		fmt.Printf("next app deploy %d: %.0f ms (build %.0f ms)\n", i+1, total, d.BuildMS)
	}
	return nil
}
