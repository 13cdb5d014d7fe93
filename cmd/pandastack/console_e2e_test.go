package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/web"
)

// TestConsoleInBrowser drives the web console in Debian's chromium (playwright-core, from web/'s
// node_modules) against a real `pandastack up`: web/e2e/console.e2e.mjs signs in, runs a command
// in a sandbox's terminal, uploads a file, forks, hibernates and wakes, invokes a function, checks
// that another team's resources never show, revokes the key and sees the console sign out. Its
// screenshots are kept in CONSOLE_ARTIFACTS (default: a directory under the test's temp root,
// printed). Without chromium, node, web/node_modules or a console built into this binary it
// skips, saying which is missing; `make test` provides all four.
func TestConsoleInBrowser(t *testing.T) {
	testenv.NeedVMs(t)
	browser := os.Getenv("CHROMIUM")
	if browser == "" {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				browser = p
				break
			}
		}
	}
	if browser == "" {
		t.Skip("SKIPPED, not passed: no chromium (apt install chromium; make setup does) for the browser test")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED, not passed: no node for the browser test")
	}
	const webDir = "../../web" // from this package's directory, where go test runs it
	if _, err := os.Stat(webDir + "/node_modules/playwright-core"); err != nil {
		t.Skip("SKIPPED, not passed: web/node_modules has no playwright-core (make build runs npm ci)")
	}
	if !web.Built() {
		t.Skip("SKIPPED, not passed: the console is not built into this test binary (make build, then test)")
	}
	t.Parallel() // minutes of VM steps: alongside the package's other parallel tests
	art := os.Getenv("CONSOLE_ARTIFACTS")
	if art == "" {
		var err error
		if art, err = os.MkdirTemp("", "pandastack-console-shots-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("console screenshots: %s", art)

	dir, key, _, _ := upDataDir(t)
	// Functions' runners are reached over the sandbox network: on, in a /20 no route uses.
	u := startUp(t, dir, key, 8, "--network=true", "--network-cidr", freeCIDR(t))
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// SIGUSR2 (pandastack down --kill-sandboxes): every sandbox of every team ends, then up.
		u.cmd.Process.Signal(syscall.SIGUSR2)
		if err := u.wait(t); err != nil {
			t.Logf("up after SIGUSR2: %v", err)
		}
	}
	t.Cleanup(stop)
	if !strings.Contains(u.stdout.String(), u.baseURL(t)+"/   (sign in with the API key)") {
		t.Errorf("the banner does not print the console's URL:\n%s", u.stdout.String())
	}

	cmd := exec.CommandContext(t.Context(), node, "e2e/console.e2e.mjs")
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(), "PANDASTACK_BASE_URL="+u.baseURL(t), "PANDASTACK_API_KEY="+key,
		"CHROMIUM="+browser, "CONSOLE_ARTIFACTS="+art)
	out, err := cmd.CombinedOutput()
	t.Logf("web/e2e/console.e2e.mjs:\n%s", out)
	if err != nil {
		t.Errorf("the browser test failed (%v); screenshots in %s; up's log:\n%s", err, art, u.stderr.String())
	}
	stop()
}

// freeCIDR is a 10.x.0.0/20 whose /16 no route of this host uses (an `up` already running here, or
// another test's, keeps its slots).
func freeCIDR(t *testing.T) string {
	out, err := exec.Command("ip", "-4", "route").Output()
	if err != nil {
		t.Fatalf("ip -4 route: %v", err)
	}
	for a := 201 + os.Getpid()%50; a < 251+50; a++ {
		prefix := fmt.Sprintf("10.%d.", 201+(a-201)%50)
		if !strings.Contains("\n"+string(out), "\n"+prefix) {
			return prefix + "0.0/20"
		}
	}
	t.Fatal("no free 10.x.0.0/20 for the sandbox network")
	return ""
}
