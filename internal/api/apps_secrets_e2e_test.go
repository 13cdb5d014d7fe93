package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestE2EAppsSecretRotation: a build on the previous release (the build cache) would carry that
// release's memory — freed pages, which the guest kernel does not clear, included — into the new
// release. After a secret is changed, the next build starts from base instead, and the new
// release's memory file on the host holds the new value (the check can see it) but not the old
// one. With the secrets unchanged, the build after is a warm one again.
func TestE2EAppsSecretRotation(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	host, cp := startNetworkedCP(t, Config{ProxyDomain: "localhost"})
	random := func(prefix string) string {
		b := make([]byte, 12)
		rand.Read(b)
		return prefix + hex.EncodeToString(b)
	}
	old, cur := random("rotated-away-"), random("current-token-")
	spec, _ := json.Marshal(map[string]any{"name": "rot", "secrets": map[string]string{"API_TOKEN": old}, "health_timeout_seconds": 300,
		"build": map[string]any{"build": "echo building", "start": "node server.js"}}) // no npm start-up under TCG
	if code, b := cp.call(t, "POST", "/v1/apps", spec, "application/json"); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	deploy := func(version string, want ...string) deploymentJSON {
		t.Helper()
		d := cp.appDeployLive(t, "rot", version, packFixture(t, "node", func(dir string) {
			os.WriteFile(filepath.Join(dir, "version.txt"), []byte(version+"\n"), 0o644)
		}), want...)
		t.Logf("%s built in %d ms", version, d.BuildMS)
		return d
	}
	d1 := deploy("v1", "==> build sandbox from base")
	if code, b := cp.call(t, "PATCH", "/v1/apps/rot", []byte(`{"set_secrets": {"API_TOKEN": "`+cur+`"}}`), "application/json"); code != 200 {
		t.Fatalf("rotate: %d %s", code, b)
	}
	d2 := deploy("v2", "==> the app's secrets changed since the release of "+d1.ID, "==> build sandbox from base")
	cp.mustServe(t, "rot", "node v2")
	ram := releaseRAM(t, host, cp, "rot", d2.ID)
	if !fileContains(t, ram, cur) {
		t.Fatalf("the current token is not found in %s: the check cannot see a token", ram)
	}
	if fileContains(t, ram, old) {
		t.Fatalf("the rotated token is in the memory of the release built after the rotation (%s)", ram)
	}
	deploy("v3", "==> build sandbox from the release of "+d2.ID)
	cp.mustServe(t, "rot", "node v3")
}

// releaseRAM is the memory file, on the host, of deployment depID's release snapshot.
func releaseRAM(t *testing.T, h *vmHost, cp *e2eCP, app, depID string) string {
	t.Helper()
	ctx := context.Background()
	a, err := cp.st.GetAppByName(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cp.st.GetDeployment(ctx, a.ID, depID)
	if err != nil || d.SnapshotID == "" {
		t.Fatalf("deployment %s: %+v %v", depID, d, err)
	}
	for _, pattern := range []string{"snapshots", "*/snapshots", "*/*/snapshots"} {
		if m, _ := filepath.Glob(filepath.Join(h.dir, pattern, d.SnapshotID, "ram")); len(m) == 1 {
			return m[0]
		}
	}
	t.Fatalf("no memory file of snapshot %s under %s", d.SnapshotID, h.dir)
	return ""
}

// fileContains says whether the file at path holds needle, read in pieces.
func fileContains(t *testing.T, path, needle string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	keep := 0
	for {
		n, err := io.ReadFull(f, buf[keep:])
		if bytes.Contains(buf[:keep+n], []byte(needle)) {
			return true
		}
		if err != nil {
			return false
		}
		keep = copy(buf, buf[keep+n-len(needle)+1:keep+n])
	}
}
