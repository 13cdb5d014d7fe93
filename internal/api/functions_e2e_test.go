package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/testenv"
)

// Functions on real microVMs: deploys bake warm snapshots; every invocation restores one.

const pyMain = `import os, time
time.sleep(2)  # import-time work: the warm snapshot holds it, invocations never pay it
with open("/tmp/imports", "a") as f:
    f.write("x")
IMPORTED_AT = time.time()

def handler(event, context):
    op = (event or {}).get("op")
    if op == "boom":
        raise ValueError("boom: %s" % event.get("n"))
    if "method" in event:  # the HTTP trigger
        return {"status": 201, "headers": {"X-Fn": "yes"},
                "body": "%s %s?%s %s" % (event["method"], event["path"], event["query"], event["body"])}
    if op == "sleep":
        time.sleep(600)
    if op == "mark":
        open("/tmp/mark-" + event["id"], "w").write("1")
        time.sleep(1)
        return {"marks": sorted(f for f in os.listdir("/tmp") if f.startswith("mark-"))}
    print("token set:", bool(os.environ.get("API_TOKEN")))
    with open("/tmp/imports") as f:
        imports = f.read().count("x")
    return {"imports": imports, "imported_at": IMPORTED_AT, "greeting": os.environ.get("GREETING"),
            "token_len": len(os.environ.get("API_TOKEN", "")), "run": context.run_id}
`

const nodeIndex = `import { hostname } from 'node:os';
const loadedAt = Date.now();
export async function handler(event, context) {
  console.log('adding', event.a, event.b);
  return { sum: event.a + event.b, name: context.function_name, loadedBeforeCall: loadedAt < Date.now() };
}
`

type fnRun struct {
	ID       string          `json:"id"`
	Status   string          `json:"status"`
	Attempts int             `json:"attempts"`
	Result   json.RawMessage `json:"result"`
	Logs     string          `json:"logs"`
	Error    *struct{ Type, Message, Traceback string }
}

// call sends one API request to cp with key and returns status and body.
func (cp *e2eCP) call(t *testing.T, method, path string, body []byte, contentType string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, cp.hs.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+cp.admin)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func (cp *e2eCP) deploy(t *testing.T, spec map[string]any, bundle []byte) (int, map[string]any) {
	t.Helper()
	body, ct := deployBody(t, spec, bundle)
	code, b := cp.call(t, "POST", "/v1/functions", body, ct)
	var m map[string]any
	json.Unmarshal(b, &m)
	return code, m
}

func (cp *e2eCP) invoke(t *testing.T, id string, payload any, query string) (int, fnRun) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"payload": payload})
	code, b := cp.call(t, "POST", "/v1/functions/"+id+"/invoke"+query, body, "application/json")
	var r fnRun
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("invoke answer %d %s", code, b)
	}
	return code, r
}

func TestE2EFunctions(t *testing.T) {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	t.Parallel()
	// The runner is reached through the host's port path: the sandboxes need their network.
	host, cp := startNetworkedCP(t, Config{ProxyDomain: "localhost"})

	// A handler that fails to import is refused at deploy, with its traceback.
	code, m := cp.deploy(t, map[string]any{"name": "broken", "runtime": "python3", "handler": "main.handler"},
		zipBundle(t, map[string]string{"main.py": "import no_such_module\n"}))
	if code != 400 || !strings.Contains(string(mustJSON(m)), "could not be imported: ModuleNotFoundError") {
		t.Fatalf("broken deploy: %d %v", code, m)
	}

	spec := map[string]any{"name": "pyfn", "runtime": "python3", "handler": "main.handler", "timeout_seconds": 20, "retries": 1,
		"env": map[string]string{"GREETING": "hello"}, "secrets": map[string]string{"API_TOKEN": "s3cr3t-token-value"}}
	code, fn := cp.deploy(t, spec, zipBundle(t, map[string]string{"main.py": pyMain}))
	if code != 201 || fn["version"] != float64(1) || fn["state"] != "ready" {
		t.Fatalf("deploy: %d %v", code, fn)
	}
	id := fn["id"].(string)

	// The import happened once, at deploy: the invocation's VM starts with it done.
	before := float64(time.Now().UnixNano()) / 1e9
	code, run := cp.invoke(t, id, map[string]any{}, "")
	if code != 200 || run.Status != "succeeded" {
		t.Fatalf("invoke: %d %+v", code, run)
	}
	var res struct {
		Imports    int     `json:"imports"`
		ImportedAt float64 `json:"imported_at"`
		Greeting   string  `json:"greeting"`
		TokenLen   int     `json:"token_len"`
		Run        string  `json:"run"`
	}
	json.Unmarshal(run.Result, &res)
	if res.Imports != 1 || res.ImportedAt >= before || res.Greeting != "hello" || res.TokenLen != len("s3cr3t-token-value") || res.Run != run.ID {
		t.Fatalf("result %s: want one import, done before the invocation (%f), env and secret set", run.Result, before)
	}
	if run.Logs != "token set: True\n" {
		t.Fatalf("logs %q", run.Logs)
	}

	// Errors come back with their traceback; a run past its timeout is killed and says so.
	if _, run := cp.invoke(t, id, map[string]any{"op": "boom", "n": 7}, ""); run.Status != "failed" || run.Error == nil ||
		run.Error.Type != "ValueError" || run.Error.Message != "boom: 7" || !strings.Contains(run.Error.Traceback, `main.py", line 10, in handler`) {
		t.Fatalf("error run %+v %+v", run, run.Error)
	}
	_, slow := cp.invoke(t, id, map[string]any{"op": "sleep"}, "")
	if slow.Status != "timed_out" || slow.Error == nil || slow.Error.Type != "Timeout" {
		t.Fatalf("timeout run %+v", slow)
	}

	// Concurrent invocations are isolated: each VM sees only its own file.
	var wg sync.WaitGroup
	marks := make([]string, 3)
	for i, name := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, r := cp.invoke(t, id, map[string]any{"op": "mark", "id": name}, "")
			marks[i] = r.Status + string(r.Result)
		}()
	}
	wg.Wait()
	for i, name := range []string{"a", "b", "c"} {
		if want := `succeeded{"marks":["mark-` + name + `"]}`; marks[i] != want {
			t.Errorf("concurrent run %s: %s, want %s", name, marks[i], want)
		}
	}

	// Async: 202 at once; a failing run is retried (retries: 1) and recorded failed.
	code, queued := cp.invoke(t, id, map[string]any{"op": "boom", "n": 1}, "?async=1")
	if code != 202 || queued.Status != "queued" {
		t.Fatalf("async: %d %+v", code, queued)
	}
	cp.srv.functions.Wait()
	_, b := cp.call(t, "GET", "/v1/functions/"+id+"/runs/"+queued.ID, nil, "")
	var done fnRun
	json.Unmarshal(b, &done)
	if done.Status != "failed" || done.Attempts != 2 || done.Error == nil || done.Error.Message != "boom: 1" {
		t.Fatalf("async run after its retry: %s", b)
	}

	// Every invocation's VM is gone; the secret is in no answer and no run.
	if left := host.running(); len(left) != 0 {
		t.Errorf("sandboxes left running: %v", left)
	}
	for _, p := range []string{"/v1/functions/" + id, "/v1/functions/" + id + "/versions", "/v1/functions/" + id + "/runs"} {
		_, b := cp.call(t, "GET", p, nil, "")
		if strings.Contains(string(b), "s3cr3t-token-value") {
			t.Errorf("GET %s shows the secret", p)
		}
		if p == "/v1/functions/"+id+"/runs" && strings.Count(string(b), `"function_id"`) != 7 {
			t.Errorf("runs: want 7, got %s", b)
		}
	}

	// The HTTP trigger: the request is the event, the handler's {status, headers, body} the answer.
	req, _ := http.NewRequest("POST", cp.hs.URL+"/hook/a?x=1", strings.NewReader("ping"))
	req.Host = id + ".fn.localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get("X-Fn") != "yes" || string(hb) != "POST /hook/a?x=1 ping" {
		t.Fatalf("HTTP trigger: %d %v %q", resp.StatusCode, resp.Header, hb)
	}
	if fn["url"] != "http://"+id+".fn.localhost" {
		t.Errorf("url %v", fn["url"])
	}

	// Node, and a second version.
	code, nfn := cp.deploy(t, map[string]any{"name": "nodefn", "runtime": "node", "handler": "index.handler"},
		tarGzBundle(t, map[string]string{"index.js": nodeIndex}))
	if code != 201 {
		t.Fatalf("node deploy: %d %v", code, nfn)
	}
	_, nrun := cp.invoke(t, nfn["id"].(string), map[string]any{"a": 2, "b": 40}, "")
	if nrun.Status != "succeeded" || string(nrun.Result) != `{"sum":42,"name":"nodefn","loadedBeforeCall":true}` || nrun.Logs != "adding 2 40\n" {
		t.Fatalf("node run %+v %s", nrun, nrun.Result)
	}
	// A lost warm snapshot (deleted here; a lost host alike) is baked again from the stored bundle.
	var vs struct {
		Versions []struct {
			SnapshotID string `json:"snapshot_id"`
		}
	}
	_, b = cp.call(t, "GET", "/v1/functions/"+id+"/versions", nil, "")
	json.Unmarshal(b, &vs)
	if code, b := cp.call(t, "DELETE", "/v1/snapshots/"+vs.Versions[0].SnapshotID, nil, ""); code != 204 {
		t.Fatalf("delete the warm snapshot: %d %s", code, b)
	}
	if _, run := cp.invoke(t, id, map[string]any{}, ""); run.Status != "succeeded" {
		t.Fatalf("invoke after the snapshot was lost: %+v", run)
	}
	_, b = cp.call(t, "GET", "/v1/functions/"+id+"/versions", nil, "")
	old := vs.Versions[0].SnapshotID
	json.Unmarshal(b, &vs)
	if vs.Versions[0].SnapshotID == old || vs.Versions[0].SnapshotID == "" {
		t.Fatalf("not re-baked: %s", b)
	}

	spec["env"] = map[string]string{"GREETING": "hi again"}
	if code, fn2 := cp.deploy(t, spec, zipBundle(t, map[string]string{"main.py": pyMain})); code != 201 || fn2["id"] != id || fn2["version"] != float64(2) {
		t.Fatalf("redeploy: %d %v", code, fn2)
	}
	_, b = cp.call(t, "GET", "/v1/functions/"+id+"/versions", nil, "")
	if !strings.Contains(string(b), `"version":2`) || !strings.Contains(string(b), `"version":1`) || !strings.Contains(string(b), `"secret_names":["API_TOKEN"]`) {
		t.Fatalf("versions %s", b)
	}
	// A schedule runs the function (triggered now rather than waiting for its hour).
	code, b = cp.call(t, "POST", "/v1/schedules", mustJSON(map[string]any{"cron": "@hourly", "function_id": id, "payload": map[string]any{}}), "application/json")
	var sc struct{ ID string }
	if json.Unmarshal(b, &sc); code != 201 {
		t.Fatalf("schedule: %d %s", code, b)
	}
	if code, b := cp.call(t, "POST", "/v1/schedules/"+sc.ID+"/trigger", nil, ""); code != 202 {
		t.Fatalf("trigger: %d %s", code, b)
	}
	cp.srv.Schedules().Wait()
	_, b = cp.call(t, "GET", "/v1/schedules/"+sc.ID+"/runs", nil, "")
	var sruns struct {
		Runs []struct {
			Status        string
			FunctionRunID string `json:"function_run_id"`
			Output        string
		}
	}
	if json.Unmarshal(b, &sruns); len(sruns.Runs) != 1 || sruns.Runs[0].Status != "succeeded" || sruns.Runs[0].FunctionRunID == "" ||
		!strings.Contains(sruns.Runs[0].Output, `"greeting": "hi again"`) {
		t.Fatalf("schedule runs %s", b)
	}
	if code, _ := cp.call(t, "DELETE", "/v1/functions/"+id, nil, ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := cp.call(t, "GET", "/v1/functions/"+id, nil, ""); code != 404 {
		t.Fatalf("deleted function: %d", code)
	}
}

// startNetworkedCP starts a host agent whose sandboxes have their network (slots and an outside
// namespace of the test's own, nothing beyond) and a control plane over it configured by cfg.
func startNetworkedCP(t *testing.T, cfg Config) (*vmHost, *e2eCP) {
	host, cp, _ := startNetworkedCPOut(t, cfg)
	return host, cp
}

// startNetworkedCPOut is startNetworkedCP that also returns the outside world its sandboxes reach.
func startNetworkedCPOut(t *testing.T, cfg Config) (*vmHost, *e2eCP, *nettest.Outside) {
	t.Helper()
	prefix := nettest.NewPrefix()
	out := nettest.NewOutside(t, prefix)
	slots := nettest.FreeCIDR(t, 22)
	host := startVMHostWith(t, func(c *hostagent.Config) {
		c.Network = &network.Config{CIDR: slots, Prefix: prefix, Ready: 4, DNS: out.Addr}
	})
	return host, startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{}, cfg, host), out
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
