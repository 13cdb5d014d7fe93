package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIApps: app plan reads a directory here (an unknown one says what to set); create, list,
// get, update and delete go through a server.
func TestCLIApps(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"devDependencies": {"vite": "5"}, "scripts": {"build": "vite build"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "pnpm-lock.yaml"), nil, 0o644)
	out := mustRun(t, "", "app", "plan", dir)
	for _, want := range []string{"framework:       vite", "package manager: pnpm", "npx --yes pnpm run build", "--directory dist"} {
		if !strings.Contains(out, want) {
			t.Fatalf("plan lacks %q:\n%s", want, out)
		}
	}
	if out := mustRun(t, "", "app", "plan", dir, "--start", "./serve", "--port", "3000"); !strings.Contains(out, "start:           ./serve") ||
		!strings.Contains(out, "port:            3000") {
		t.Fatalf("plan with overrides:\n%s", out)
	}
	empty := t.TempDir()
	os.WriteFile(filepath.Join(empty, "main.rs"), nil, 0o644)
	if out, _, err := run(t, "", "app", "plan", empty); err == nil || !strings.Contains(out, "set build.start") {
		t.Fatalf("unknown plan: %v\n%s", err, out)
	}

	useServer(t)
	if _, _, err := run(t, "", "app", "create", "Not_OK"); err == nil || !strings.Contains(err.Error(), "host name") {
		t.Fatalf("bad name: %v", err)
	}
	id := strings.TrimSpace(mustRun(t, "", "app", "create", "web", "-q", "--secret", "TOKEN=s3cr3t", "--port", "3000"))
	if !strings.HasPrefix(id, "app_") {
		t.Fatalf("create -q: %q", id)
	}
	if out := mustRun(t, "", "app", "list"); !strings.Contains(out, id) || !strings.Contains(out, "web") {
		t.Fatalf("list:\n%s", out)
	}
	mustRun(t, "", "app", "update", "web", "--suspend-after", "60")
	if out := mustRun(t, "", "app", "get", "web", "--json"); !strings.Contains(out, `"suspend_after_seconds": 60`) ||
		!strings.Contains(out, `"port": 3000`) || strings.Contains(out, "s3cr3t") {
		t.Fatalf("get:\n%s", out)
	}
	site := t.TempDir() // the fake host runs no build: the deploy fails, its logs say it was clean
	os.WriteFile(filepath.Join(site, "index.html"), []byte("hi"), 0o644)
	if out, _, err := run(t, "", "app", "deploy", "web", site, "--clean"); err == nil || !strings.Contains(out, "==> clean build: the build cache is not used") {
		t.Fatalf("deploy --clean: %v\n%s", err, out)
	}
	mustRun(t, "", "app", "env", "set", "web", "A=1", "B=2")
	mustRun(t, "", "app", "secrets", "set", "web", "KEY=k3y")
	mustRun(t, "", "app", "env", "unset", "web", "A")
	if out := mustRun(t, "", "app", "get", "web", "--json"); !strings.Contains(out, `"B": "2"`) || strings.Contains(out, `"A"`) ||
		!strings.Contains(out, `"KEY",`) || !strings.Contains(out, `"TOKEN"`) || strings.Contains(out, "k3y") {
		t.Fatalf("after env/secrets set:\n%s", out)
	}
	if _, _, err := run(t, "", "app", "env", "unset", "web", "KEY"); err == nil || !strings.Contains(err.Error(), "KEY is not in the env of app web") {
		t.Fatalf("env unset of a secret: %v", err)
	}
	if _, _, err := run(t, "", "app", "secrets", "unset", "web", "B"); err == nil || !strings.Contains(err.Error(), "B is not in the secrets") {
		t.Fatalf("secrets unset of an env variable: %v", err)
	}
	mustRun(t, "", "app", "secrets", "unset", "web", "KEY")
	if out := mustRun(t, "", "app", "get", "web", "--json"); strings.Contains(out, `"KEY"`) || !strings.Contains(out, `"B": "2"`) {
		t.Fatalf("after secrets unset:\n%s", out)
	}
	if _, _, err := run(t, "", "app", "secrets", "set", "web", "NOPAIR"); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Fatalf("secrets set without =: %v", err)
	}
	if out := mustRun(t, "", "app", "preview", "list", "web"); !strings.Contains(out, "SLUG") {
		t.Fatalf("preview list:\n%s", out)
	}
	if _, _, err := run(t, "", "app", "preview", "delete", "web", "feature/x"); err == nil || !strings.Contains(err.Error(), "no preview feature-x") {
		t.Fatalf("preview delete of none: %v", err)
	}
	mustRun(t, "", "app", "delete", "web")
	if _, _, err := run(t, "", "app", "get", "web"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("deleted: %v", err)
	}
}
