package hostagent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TestCatalogTemplates builds every catalog template and checks that each does its job in a
// sandbox. It downloads and bakes several GiB, so it runs only with PANDASTACK_CATALOG_TESTS=1
// (`make test-catalog`); see docs/templates.md.
func TestCatalogTemplates(t *testing.T) {
	if os.Getenv("PANDASTACK_CATALOG_TESTS") != "1" {
		t.Skip("the catalog suite runs with PANDASTACK_CATALOG_TESTS=1 (make test-catalog)")
	}
	h := newHarness(t)
	checks := []struct {
		template string
		cmd      string
		want     []string // substrings of stdout
		exit     int
	}{
		{"code-interpreter", `python -c 'import numpy, pandas, scipy, sklearn, matplotlib; print(int(numpy.arange(10).sum()), pandas.DataFrame({"a": [1, 2]}).a.sum())'`,
			[]string{"45 3"}, 0},
		{"agent", "claude --version && codex --version && opencode --version", []string{"Claude Code", "codex"}, 0},
		{"browser", browserCheck, []string{"title=PandaStack browser check"}, 0},
		{"postgres-16", `psql -v ON_ERROR_STOP=1 -tAc "CREATE EXTENSION IF NOT EXISTS vector" -c "SELECT '[1,2,3]'::vector <-> '[1,2,5]'::vector" -c "SHOW server_version"`,
			[]string{"2\n", "17."}, 0},
		{"claude-agent", `pandastack-worker --check && echo '{"prompt": "say hi"}' | env -u ANTHROPIC_API_KEY pandastack-worker; echo "exit=$?"`,
			[]string{`"version"`, `"query":"function"`, "exit=2"}, 0},
	}
	for _, c := range checks {
		t.Run(c.template, func(t *testing.T) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
			defer cancel()
			info, err := h.agent.EnsureTemplate(ctx, c.template, func(line string) { t.Log(line) })
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			t.Logf("%s: built in %s, %d MiB baked", info.Name, time.Since(start).Round(time.Second), info.SizeBytes>>20)
			var sb hostapi.Sandbox
			if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": c.template}, &sb); code != 201 {
				t.Fatalf("create: %d", code)
			}
			defer h.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
			r := h.exec(sb.ID, map[string]any{"cmd": c.cmd, "timeout_seconds": 300})
			if r.ExitCode != c.exit {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.ExitCode, c.exit, r.Stdout, r.Stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.Stdout+r.Stderr, w) {
					t.Errorf("output lacks %q\nstdout: %s\nstderr: %s", w, r.Stdout, r.Stderr)
				}
			}
			if c.template == "claude-agent" && !strings.Contains(r.Stderr, "ANTHROPIC_API_KEY is not set") {
				t.Errorf("the worker should say the key is missing; stderr: %s", r.Stderr)
			}
		})
	}
}

// browserCheck serves a page inside the sandbox and has playwright-core drive Debian's Chromium
// to it.
const browserCheck = `set -e
mkdir -p /tmp/site && cd /tmp/site
echo '<html><head><title>PandaStack browser check</title></head><body>hi</body></html>' > index.html
python3 -m http.server 8765 >/dev/null 2>&1 &
for i in $(seq 50); do curl -sf http://127.0.0.1:8765/ >/dev/null && break; sleep 0.2; done
cat > /tmp/check.cjs <<'EOF'
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH, args: ['--no-sandbox'] });
  const page = await browser.newPage();
  await page.goto('http://127.0.0.1:8765/');
  console.log('title=' + await page.title());
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });
EOF
node /tmp/check.cjs`
