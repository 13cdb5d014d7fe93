package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
)

// instancesOf returns the running instances of deployment dep (their sandbox ids).
func (cp *e2eCP) instancesOf(t *testing.T, dep string) []string {
	t.Helper()
	_, b := cp.call(t, "GET", "/v1/sandboxes?state=running&metadata.pandastack.app_role=instance&metadata.pandastack.deployment="+dep, nil, "")
	var page struct{ Sandboxes []struct{ ID string } }
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatalf("sandboxes of %s: %s", dep, b)
	}
	ids := []string{}
	for _, sb := range page.Sandboxes {
		ids = append(ids, sb.ID)
	}
	return ids
}

// answeringInstances names each instance of dep (a file its app serves at /instance), then asks
// app's route until every one answered (at most 10 requests per instance) and returns the names
// seen and how often.
func (cp *e2eCP) answeringInstances(t *testing.T, app, dep string, want int) map[string]int {
	t.Helper()
	ids := cp.instancesOf(t, dep)
	if len(ids) != want {
		t.Fatalf("deployment %s has instances %v; want %d", dep, ids, want)
	}
	for _, id := range ids {
		if code, b := cp.call(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/home/user/instance.txt", []byte(id), "application/octet-stream"); code != 200 {
			t.Fatalf("naming instance %s: %d %s", id, code, b)
		}
	}
	seen := map[string]int{}
	for i := 0; i < 10*want && len(seen) < want; i++ {
		code, body, err := cp.appGet(app, "/instance")
		if err != nil || code != 200 || !strings.HasPrefix(body, "sb_") {
			t.Fatalf("%s/instance: %d %q %v", app, code, body, err)
		}
		seen[body]++
	}
	if len(seen) != want {
		t.Fatalf("requests to %s reached %v; want each of %v", app, seen, ids)
	}
	return seen
}

// wsEcho opens a WebSocket to app's /ws through the router (the upgrade passes through to the
// app) and checks bytes both ways: the app's greeting, then a text and a 200 KiB binary message
// echoed back.
func (cp *e2eCP) wsEcho(t *testing.T, app, greeting string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(cp.hs.URL, "http")+"/ws", &websocket.DialOptions{Host: app + ".apps.localhost"})
	if err != nil {
		t.Fatalf("websocket to %s: %v %+v", app, err, res)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if typ, b, err := c.Read(ctx); err != nil || typ != websocket.MessageText || string(b) != greeting {
		t.Fatalf("websocket greeting of %s: %v %q %v; want %q", app, typ, b, err, greeting)
	}
	big := make([]byte, 200<<10)
	rand.Read(big)
	for _, m := range []struct {
		typ  websocket.MessageType
		data []byte
	}{{websocket.MessageText, []byte("ping über the router")}, {websocket.MessageBinary, big}} {
		if err := c.Write(ctx, m.typ, m.data); err != nil {
			t.Fatalf("websocket write to %s: %v", app, err)
		}
		typ, b, err := c.Read(ctx)
		if err != nil || typ != m.typ || !bytes.Equal(b, m.data) {
			t.Fatalf("websocket echo of %d bytes from %s: %v %d bytes %v", len(m.data), app, typ, len(b), err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("websocket close: %v", err)
	}
}

// TestE2EAppsInstances: an app with min_instances 2 serves from two instances of its release,
// requests balanced across both, WebSockets passed through; a deploy replaces both blue-green
// without a failed request.
func TestE2EAppsInstances(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	_, cp := startNetworkedCP(t, Config{ProxyDomain: "localhost"})
	for _, bad := range []int{-1, 11} {
		if code, b := cp.call(t, "POST", "/v1/apps", []byte(fmt.Sprintf(`{"name":"duo","min_instances":%d}`, bad)), "application/json"); code != 400 {
			t.Fatalf("min_instances %d: %d %s", bad, code, b)
		}
	}
	if code, b := cp.call(t, "POST", "/v1/apps", []byte(`{"name":"duo","min_instances":2,"health_timeout_seconds":300}`), "application/json"); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	d1 := cp.appWait(t, "duo", cp.appDeploy(t, "duo", packFixture(t, "node", nil)).ID)
	if d1.State != "live" {
		t.Fatalf("v1: %+v", d1)
	}
	t.Logf("v1 across two instances: %v", cp.answeringInstances(t, "duo", d1.ID, 2))
	cp.wsEcho(t, "duo", "hello v1")
	old := cp.instancesOf(t, d1.ID)
	// Runtime logs: the app's output on both instances, each line labelled with its instance.
	if _, rt := cp.call(t, "GET", "/v1/apps/duo/logs", nil, ""); !strings.Contains(string(rt), "["+old[0]+"] listening on 8080") ||
		!strings.Contains(string(rt), "["+old[1]+"] listening on 8080") {
		t.Fatalf("runtime logs of %v:\n%s", old, rt)
	}

	d2 := cp.blueGreen(t, "duo", 2, packFixture(t, "node", func(dir string) {
		os.WriteFile(filepath.Join(dir, "version.txt"), []byte("v2\n"), 0o644)
	}), "node v2")
	t.Logf("v2 across two instances: %v", cp.answeringInstances(t, "duo", d2.ID, 2))
	waitFor(t, 2*time.Minute, "v1's instances to stop", func() bool {
		for _, id := range old {
			if _, b := cp.call(t, "GET", "/v1/sandboxes/"+id, nil, ""); !strings.Contains(string(b), `"state":"killed"`) {
				return false
			}
		}
		return true
	})
	cp.srv.apps.Wait()
}

// TestE2EAppsBuildCache: a build starts from the previous release and skips the install when
// what it reads is unchanged (its node_modules reused); a change of a dependency installs again.
func TestE2EAppsBuildCache(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	_, cp := startNetworkedCP(t, Config{ProxyDomain: "localhost"})
	if code, b := cp.call(t, "POST", "/v1/apps", []byte(`{"name":"deps"}`), "application/json"); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	deploy := func(version, greeting string, want ...string) deploymentJSON {
		t.Helper()
		return cp.appDeployLive(t, "deps", version, packFixture(t, "nodedeps", func(dir string) {
			os.WriteFile(filepath.Join(dir, "version.txt"), []byte(version+"\n"), 0o644)
			if greeting != "" {
				os.WriteFile(filepath.Join(dir, "vendor", "greet", "index.js"), []byte("module.exports = () => '"+greeting+"';\n"), 0o644)
			}
		}), want...)
	}
	d1 := deploy("v1", "", "==> build sandbox from base", "==> install: npm ci")
	cp.mustServe(t, "deps", "nodedeps v1: hello from greet to you")
	// A source change, the same dependencies: built on v1's release, the install skipped.
	d2 := deploy("v2", "", "==> build sandbox from the release of "+d1.ID, "==> install: skipped")
	cp.mustServe(t, "deps", "nodedeps v2: hello from greet to you")
	t.Logf("build (build VM to release snapshot) with npm ci %d ms, again with its node_modules reused %d ms (%.2fx)",
		d1.BuildMS, d2.BuildMS, float64(d1.BuildMS)/float64(max(d2.BuildMS, 1)))
	// A dependency changed: installed again.
	deploy("v3", "greet v2", "==> build sandbox from the release of "+d2.ID, "==> install: npm ci")
	cp.mustServe(t, "deps", "nodedeps v3: greet v2")
	cp.srv.apps.Wait()
}
