package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"sync"
	"time"
)

// benchModule imports in 1 s (a model load, say); its handler is trivial.
const benchModule = `import time
time.sleep(1)
def handler(event, context):
    return {"ok": True}
`

// functionsBefore (-functions-before) is a directory with an earlier build's pandastack and
// pandastack-guest: suite functions then also runs a cluster of them and interleaves its
// invocations and creates with this build's (a same-run before/after).
var functionsBefore string

// functionsSuite runs a real agent and server (as the controlplane suite does) and compares, in
// the same run and interleaved: a function invocation (a fresh VM restored from the version's
// warm snapshot, the import already done), a sandbox create, and the naive path (a fresh
// sandbox, the module written into it and imported by a new interpreter). Then invocations per
// second with 8 clients.
func functionsSuite(ctx context.Context, res map[string]float64, guestAgent, imageCache string, rounds int) error {
	cl, err := startCluster(guestAgent, imageCache, "10.198.0.0/20")
	if err != nil {
		return err
	}
	defer cl.stop()
	t := time.Now()
	fnID, err := deployBenchFunction(cl.public)
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, cl.dir)
	}
	res["fn_deploy_ms"] = ms(time.Since(t))
	invoke := timed(func() error { return invokeOnce(cl.public, fnID) })
	// The same invocation with the runner reached through the guest agent's relay instead of the
	// guest's network (the port path, the default).
	relayed := &apiClient{base: cl.public.base, auth: cl.public.auth, header: http.Header{"X-Pandastack-Function-Transport": {"relay"}}}
	invokeRelay := timed(func() error { return invokeOnce(relayed, fnID) })
	create := cl.public.createTimed("/v1/sandboxes", func() any { return map[string]any{"template": "base"} })
	naive := timed(func() error { return naiveOnce(cl.public) })
	trigger := timed(func() error { return httpTriggerOnce(cl.public.base, fnID) })
	names, runs := []string{"fn_invoke", "fn_invoke_relay", "fn_sandbox_create", "fn_naive_vm_import", "fn_http_trigger"},
		[]sample{invoke, invokeRelay, create, naive, trigger}
	if functionsBefore != "" { // an earlier build's invocations and creates, interleaved with these
		before, err := startCluster(filepath.Join(functionsBefore, "pandastack-guest"), imageCache, "10.215.0.0/20")
		if err != nil {
			return fmt.Errorf("the -functions-before cluster: %w", err)
		}
		defer before.stop()
		beforeID, err := deployBenchFunction(before.public)
		if err != nil {
			return fmt.Errorf("%w (logs in %s)", err, before.dir)
		}
		names = append(names, "fn_before_invoke", "fn_before_sandbox_create")
		runs = append(runs, timed(func() error { return invokeOnce(before.public, beforeID) }),
			before.public.createTimed("/v1/sandboxes", func() any { return map[string]any{"template": "base"} }))
	}
	lat, err := interleaved(rounds, runs...)
	if err != nil {
		return err
	}
	for i, name := range names {
		res[name+"_p50_ms"], res[name+"_p99_ms"] = pct(lat[i], 50), pct(lat[i], 99)
	}
	if functionsBefore != "" {
		res["fn_before_invoke_over_create"] = res["fn_before_invoke_p50_ms"] / res["fn_before_sandbox_create_p50_ms"]
		res["fn_invoke_over_before_invoke"] = res["fn_invoke_p50_ms"] / res["fn_before_invoke_p50_ms"]
	}
	res["fn_invoke_over_create"] = res["fn_invoke_p50_ms"] / res["fn_sandbox_create_p50_ms"]
	res["fn_invoke_relay_over_create"] = res["fn_invoke_relay_p50_ms"] / res["fn_sandbox_create_p50_ms"]
	res["fn_invoke_relay_over_invoke"] = res["fn_invoke_relay_p50_ms"] / res["fn_invoke_p50_ms"]
	res["fn_http_trigger_over_invoke"] = res["fn_http_trigger_p50_ms"] / res["fn_invoke_p50_ms"]
	res["fn_naive_over_invoke"] = res["fn_naive_vm_import_p50_ms"] / res["fn_invoke_p50_ms"]

	// The host agent's restore steps (means from its /metrics) of sandbox creates alone, then of
	// invocations alone: what of an invocation's restore differs from a create's.
	for _, phase := range []struct {
		name string
		run  sample
	}{{"create", create}, {"invoke", invoke}} {
		before, err := agentStepTotals(cl.direct)
		if err != nil {
			return err
		}
		for range samples(8) {
			if _, err := phase.run(); err != nil {
				return err
			}
		}
		after, err := agentStepTotals(cl.direct)
		if err != nil {
			return err
		}
		means := stepMeansSince(before, after)
		printStepMeans("the agent's restore steps, "+phase.name+" (means from its /metrics):", means)
		for step, v := range means {
			res["fn_host_step_"+phase.name+"_"+step+"_ms"] = v
		}
	}

	// The runner's first and second request in one VM restored from the warm snapshot, straight
	// through the host agent (no control plane): the same path twice, the second with the
	// emulator's translations of it already made.
	first, second, err := runnerTwice(cl, fnID, samples(8))
	if err != nil {
		return err
	}
	res["fn_runner_first_p50_ms"], res["fn_runner_second_p50_ms"] = pct(first, 50), pct(second, 50)
	res["fn_runner_first_over_second"] = res["fn_runner_first_p50_ms"] / res["fn_runner_second_p50_ms"]
	fmt.Printf("runner in a restored VM: first request p50 %.0f ms, second %.0f ms\n", res["fn_runner_first_p50_ms"], res["fn_runner_second_p50_ms"])

	// 8 clients at once on one host: an invocation that fails (on an overloaded machine, one that
	// times out) is counted, not fatal, so the figures above are kept.
	clients, each := 8, samples(4)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := invokeOnce(cl.public, fnID); err != nil {
					mu.Lock()
					if failed++; failed == 1 {
						fmt.Println("an invocation with 8 clients failed:", err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res["fn_invokes_failed_8_clients"] = float64(failed)
	res["fn_invokes_per_s_8_clients"] = float64(clients*each-failed) / time.Since(start).Seconds()
	if samplesCap == 0 && scheduleDriftOn { // real minutes: not in a smoke run
		drift, err := scheduleDrift(cl.public, fnID, 3)
		if err != nil {
			return err
		}
		res["schedule_drift_p50_ms"], res["schedule_drift_p99_ms"] = pct(drift, 50), pct(drift, 99)
	}
	return nil
}

// runnerTwice restores n VMs from the function's warm snapshot on the host agent and sends each
// VM's runner two invocations over the agent's port path; the latencies of the first and the
// second.
func runnerTwice(cl *cluster, fnID string, n int) (first, second []float64, err error) {
	body, err := cl.public.do("GET", "/v1/functions/"+fnID+"/versions", nil, 200)
	if err != nil {
		return nil, nil, err
	}
	var vs struct {
		Versions []struct {
			SnapshotID string `json:"snapshot_id"`
		}
	}
	if json.Unmarshal(body, &vs); len(vs.Versions) == 0 {
		return nil, nil, fmt.Errorf("no versions: %s", body)
	}
	event := map[string]any{"payload": map[string]any{}, "secrets": map[string]string{}, "context": map[string]any{"function_id": fnID, "timeout_seconds": 60}}
	for range n {
		body, err := cl.direct.do("POST", "/v1/sandboxes", map[string]any{"snapshot_id": vs.Versions[0].SnapshotID}, 201)
		if err != nil {
			return nil, nil, err
		}
		var sb struct{ ID string }
		json.Unmarshal(body, &sb)
		for _, out := range []*[]float64{&first, &second} {
			t := time.Now()
			if _, err := cl.direct.do("POST", "/v1/sandboxes/"+sb.ID+"/ports/7411/invoke", event, 200); err != nil {
				return nil, nil, err
			}
			*out = append(*out, ms(time.Since(t)))
		}
		if _, err := cl.direct.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, 204); err != nil {
			return nil, nil, err
		}
	}
	return first, second, nil
}

// agentStepTotals reads the host agent's create step histograms.
func agentStepTotals(direct *apiClient) (stepTotals, error) {
	m, err := direct.do("GET", "/metrics", nil, 200)
	return parseStepTotals(string(m), "create"), err
}

// scheduleDrift runs an every-minute schedule of the function for n instants and returns, per
// instant, how late its run started (started_at minus scheduled_for).
func scheduleDrift(c *apiClient, fnID string, n int) ([]float64, error) {
	body, err := c.do("POST", "/v1/schedules", map[string]any{"cron": "* * * * *", "function_id": fnID, "overlap": "allow"}, 201)
	if err != nil {
		return nil, err
	}
	var sc struct{ ID string }
	json.Unmarshal(body, &sc)
	defer c.do("DELETE", "/v1/schedules/"+sc.ID, nil, 204)
	deadline := time.Now().Add(time.Duration(n+2) * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		body, err := c.do("GET", "/v1/schedules/"+sc.ID+"/runs", nil, 200)
		if err != nil {
			return nil, err
		}
		var runs struct {
			Runs []struct {
				ScheduledFor time.Time `json:"scheduled_for"`
				StartedAt    time.Time `json:"started_at"`
			}
		}
		json.Unmarshal(body, &runs)
		if len(runs.Runs) >= n {
			var out []float64
			for _, r := range runs.Runs[:n] {
				out = append(out, ms(r.StartedAt.Sub(r.ScheduledFor)))
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("schedule %s did not fire %d times in %d minutes", sc.ID, n, n+2)
}

func deployBenchFunction(c *apiClient) (string, error) {
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	w, _ := zw.Create("main.py")
	w.Write([]byte(benchModule))
	zw.Close()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	sw, _ := mw.CreateFormField("spec")
	json.NewEncoder(sw).Encode(map[string]any{"name": "bench", "runtime": "python3", "handler": "main.handler", "timeout_seconds": 60})
	bw, _ := mw.CreateFormFile("bundle", "bundle.zip")
	bw.Write(zb.Bytes())
	mw.Close()
	req, _ := http.NewRequest("POST", c.base+"/v1/functions", &body)
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		return "", fmt.Errorf("deploy: %d %s", resp.StatusCode, data)
	}
	var fn struct{ ID string }
	json.Unmarshal(data, &fn)
	return fn.ID, nil
}

func invokeOnce(c *apiClient, fnID string) error {
	body, err := c.do("POST", "/v1/functions/"+fnID+"/invoke", map[string]any{"payload": map[string]any{}}, 200)
	if err != nil {
		return err
	}
	var run struct{ Status string }
	if json.Unmarshal(body, &run); run.Status != "succeeded" {
		return fmt.Errorf("invoke: %s", body)
	}
	return nil
}

// httpTriggerOnce calls the function through its HTTP trigger, <id>.fn.localhost (the server's
// default proxy domain).
func httpTriggerOnce(base, fnID string) error {
	req, _ := http.NewRequest("GET", base+"/", nil)
	req.Host = fnID + ".fn.localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP trigger: %d %s", resp.StatusCode, body)
	}
	return nil
}

// naiveOnce is what a platform without warm snapshots does: a fresh sandbox, the code written
// in, a new interpreter that imports it (paying the import) and calls the handler.
func naiveOnce(c *apiClient) error {
	body, err := c.do("POST", "/v1/sandboxes", map[string]any{"template": "base"}, 201)
	if err != nil {
		return err
	}
	var sb struct{ ID string }
	json.Unmarshal(body, &sb)
	defer c.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, 204)
	req, _ := http.NewRequest("PUT", c.base+"/v1/sandboxes/"+sb.ID+"/files?path=/tmp/fn/main.py", bytes.NewReader([]byte(benchModule)))
	req.Header.Set("Authorization", c.auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("naive: file write %d", resp.StatusCode)
	}
	out, err := c.do("POST", "/v1/sandboxes/"+sb.ID+"/exec",
		map[string]any{"cmd": "cd /tmp/fn && python3 -c 'import main; print(main.handler({}, None))'"}, 200)
	if err != nil {
		return err
	}
	var r struct {
		ExitCode int `json:"exit_code"`
	}
	if json.Unmarshal(out, &r); r.ExitCode != 0 {
		return fmt.Errorf("naive: %s", out)
	}
	return nil
}
