// Command bench measures PandaStack on this machine and writes bench/results.json (flat keys,
// merged with what other benchmarks wrote). Every ratio compares figures measured in the same run.
//
//	go run ./bench -out bench/results.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/bench/results"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/template"
)

func main() {
	out := flag.String("out", "bench/results.json", "results file (merged)")
	dataDir := flag.String("data-dir", "/var/tmp/pandastack-bench", "agent data dir (re-used between runs)")
	guestAgent := flag.String("guest-agent", "bin/pandastack-guest", "pandastack-guest binary")
	imageCache := flag.String("image-cache", os.Getenv("PANDASTACK_IMAGE_CACHE"), "guest image cache (default: inside the data dir)")
	creates := flag.Int("creates", 30, "creates for the create latency figures")
	suites := flag.String("suites", defaultSuites, "comma-separated suites to run (templates, which builds the whole catalog, code, which bakes code-interpreter, and soak, which runs for -soak-duration, run only when named)")
	idle := flag.Int("idle", 20, "sandboxes kept running for the PSS figure")
	flag.IntVar(&pitrMiB, "pitr-mib", 256, "suite pitr (run only when named): the database's size in MiB")
	flag.StringVar(&guestBefore, "guest-agent-before", "", "an earlier pandastack-guest binary: suite guest-before compares creates with it against -guest-agent")
	flag.StringVar(&cpuModel, "cpu", "qemu64", "suite cpu compares creates (and what the template runs) under this QEMU CPU model against the default")
	flag.BoolVar(&scheduleDriftOn, "schedule-drift", true, "suite functions: measure the scheduler's drift (3 real minutes)")
	flag.StringVar(&functionsBefore, "functions-before", "", "suite functions: a directory with an earlier pandastack and pandastack-guest whose invocations and creates run interleaved with this build's")
	flag.StringVar(&guestCAFile, "guest-ca-file", "", "suite appsnext: a PEM file of CA certificates the server gives the guests (a TLS-inspecting proxy's, for npm)")
	flag.StringVar(&serverLogLevel, "server-log-level", "info", "the log level of the servers the controlplane-style suites start (debug shows per-invocation timings)")
	flag.Int64Var(&diskReserveMiB, "disk-reserve-mib", 0, "what the bench's host agents keep free on their disk (0: the agent's default, up to 4 GiB)")
	smoke := flag.Bool("smoke", false, "check that every suite still runs: 2 samples of everything, figures not judged, no results file unless -out is given")
	cpuProfile := flag.String("cpuprofile", "", "write the bench process's CPU profile here (its agents run in it: where a host's own time goes, e.g. a publish)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *smoke {
		samplesCap, *creates, *idle = 2, 2, 2
		if !flagGiven("out") {
			*out = ""
		}
	}
	if err := run(*out, *dataDir, *guestAgent, *imageCache, *suites, *creates, *idle); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// defaultSuites are the suites a plain run (and the smoke test) runs.
const defaultSuites = "restore,sandbox,lifecycle,controlplane,network,volumes,confine,blob,crosshost,processes,functions"

// roundSuites are the suites of the main agent that take only the number of rounds (-creates).
var roundSuites = map[string]func(*bench, context.Context, map[string]float64, int) error{
	"restore": (*bench).restoreSuite, "network": (*bench).networkSuite, "volumes": (*bench).volumeSuite,
	"confine": (*bench).confineSuite, "firstexec": (*bench).firstExecSuite, "cpuweight": (*bench).cpuWeightSuite,
	"forkwake": (*bench).forkWakeSuite, "forkwake-cold": (*bench).forkWakeColdSuite, "backtoback": (*bench).backToBackSuite,
}

// The comparisons of suites guest-before and cpu, and suite appsnext's guest CA file (flags).
var guestBefore, cpuModel, guestCAFile string

// pitrMiB is suite pitr's database size (flag).
var pitrMiB int

// diskReserveMiB is what every agent of the bench keeps free on its disk (flag; 0: the default).
var diskReserveMiB int64

// Suite functions' drift measurement, and the started servers' log level (flags).
var (
	scheduleDriftOn = true
	serverLogLevel  = "info"
)

// samplesCap, when set (-smoke), caps every sample count: a quick run that shows each suite
// still works, whose figures mean nothing.
var samplesCap int

// samples is n, or samplesCap if that is smaller.
func samples(n int) int {
	if samplesCap > 0 {
		return min(n, samplesCap)
	}
	return n
}

func flagGiven(name string) (given bool) {
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// bench is the main agent (the suites' default; url serves its HTTP API) and what any extra agent
// is made from: the data dir the extra ones live under, the guest agent (an absolute path), the
// image cache.
type bench struct {
	agent      *hostagent.Agent
	url        string
	dataDir    string
	guestAgent string
	imageCache string
	minimal    *minimal // set up by the first suite that needs it
}

func run(out, dataDir, guestAgent, imageCache, suites string, creates, idle int) error {
	abs, err := filepath.Abs(guestAgent)
	if err != nil {
		return err
	}
	ctx := context.Background()
	b := &bench{dataDir: dataDir, guestAgent: abs, imageCache: imageCache}
	cfg := b.agentConfig(dataDir)
	cfg.Templates = map[string]template.Spec{
		"bench-256m": {Name: "bench-256m", From: "base", VCPUs: 1, MemoryMiB: 256},
		"bench-1g":   {Name: "bench-1g", From: "base", VCPUs: 1, MemoryMiB: 1024},
	}
	a, err := hostagent.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	b.agent, b.url = a, srv.URL
	for _, sb := range a.List() { // leftovers of an interrupted run
		a.Kill(sb.ID)
	}
	res := map[string]float64{}
	fmt.Printf("accelerator: %s\n", a.Accel())

	baked := []string{"base"}
	if strings.Contains(","+suites+",", ",sandbox,") || strings.Contains(","+suites+",", ",lifecycle,") {
		baked = append(baked, "bench-256m", "bench-1g") // the RAM-size figures; others need only base
	}
	for _, name := range baked {
		t := time.Now()
		info, err := a.EnsureTemplate(ctx, name, progress)
		if err != nil {
			return err
		}
		fmt.Printf("template %s ready (bake took %d ms; this call %d ms)\n", name, info.BakeMS, time.Since(t).Milliseconds())
		if name == "base" {
			res["cold_bake_ms"] = float64(info.BakeMS)
		}
	}

	for _, name := range strings.Split(suites, ",") {
		suite := name
		var err error
		if f, ok := roundSuites[suite]; ok {
			suite = "" // handled
			err = f(b, ctx, res, creates)
		}
		switch suite {
		case "":
		case "sandbox":
			err = b.sandboxSuite(ctx, res, creates, idle)
		case "lifecycle":
			err = b.lifecycleSuite(ctx, res)
		case "controlplane":
			var floor sample
			if floor, err = b.minimalRestore(ctx); err == nil {
				err = controlPlaneSuite(ctx, res, guestAgent, imageCache, creates, floor)
			}
		case "templates":
			err = b.templateSuite(ctx, res, max(creates/3, 5))
		case "guest-before":
			if guestBefore == "" {
				return fmt.Errorf("suite guest-before needs -guest-agent-before")
			}
			before, _ := filepath.Abs(guestBefore)
			err = b.compareSuite(ctx, res, "guest_before", func(c *hostagent.Config) { c.GuestAgent = before }, creates, nil)
		case "before":
			// The guest side as it was before issue 31 (its agent, the bake's host connected while
			// the state is saved) against now.
			if guestBefore == "" {
				return fmt.Errorf("suite before needs -guest-agent-before")
			}
			before, _ := filepath.Abs(guestBefore)
			err = b.compareSuite(ctx, res, "before", func(c *hostagent.Config) { c.GuestAgent, c.LiveBakeSnapshot = before, true }, creates, nil)
		case "livebake":
			err = b.compareSuite(ctx, res, "livebake", func(c *hostagent.Config) { c.LiveBakeSnapshot = true }, creates, nil)
		case "tsc":
			err = b.compareSuite(ctx, res, "tsc_reliable", func(c *hostagent.Config) { c.ReliableTSC = true }, creates, nil)
		case "unprepared":
			// Creates that spawn their VMM (as before VMMs were prepared) against creates that
			// take the one prepared after the create before.
			err = b.compareSuite(ctx, res, "unprepared", func(c *hostagent.Config) { c.PreparedTemplates = 0 }, creates, nil)
		case "unconfined":
			err = b.compareSuite(ctx, res, "unconfined", func(c *hostagent.Config) { c.Unconfined = true }, creates, nil)
		case "cpu":
			err = b.compareSuite(ctx, res, "cpu_"+cpuKey(cpuModel), func(c *hostagent.Config) { c.CPUModel = cpuModel }, creates, runtimesWork)
		case "blob":
			err = blobSuite(ctx, res, dataDir)
		case "crosshost":
			err = b.crossHostSuite(ctx, res)
		case "processes":
			err = b.processSuite(ctx, res)
		case "code":
			err = b.codeSuite(ctx, res, max(creates/3, 5))
		case "functions":
			err = functionsSuite(ctx, res, guestAgent, imageCache, max(creates/2, 2))
		case "databases":
			err = databasesSuite(ctx, res, guestAgent, imageCache, max(creates/2, 2))
		case "pitr":
			err = pitrSuite(ctx, res, guestAgent, imageCache, pitrMiB)
		case "apps":
			err = appsSuite(ctx, res, guestAgent, imageCache, max(creates/3, 3))
		case "appsnext":
			err = appsBuildSuite(ctx, res, guestAgent, imageCache, nextBench())
		case "appsvite":
			err = appsBuildSuite(ctx, res, guestAgent, imageCache, viteBench())
		case "soak":
			err = soakSuite(ctx, res, guestAgent, imageCache)
		default:
			err = fmt.Errorf("unknown suite %q (restore, sandbox, lifecycle, controlplane, network, volumes, confine, blob, processes, functions, databases, pitr, apps, appsnext, appsvite, soak, templates, code, before, guest-before, firstexec, forkwake, forkwake-cold, cpuweight, livebake, tsc, unconfined, unprepared, backtoback, cpu)", suite)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := merge(out, res); err != nil { // keep each suite's figures even if a later one fails
			return err
		}
	}
	printTable(res)
	return merge(out, res)
}

// sandboxSuite: create vs bare restore, RAM-size independence, exec round trip, idle PSS.
func (b *bench) sandboxSuite(ctx context.Context, res map[string]float64, creates, idle int) error {
	// Create (API call to ready-for-exec) and the bare restore of the same snapshot, interleaved so
	// both see the same machine load.
	lat, err := interleaved(creates, b.createViaAPI("base"), func() (float64, error) { return b.agent.BareRestore(ctx, "base") })
	if err != nil {
		return err
	}
	create, bare := lat[0], lat[1]
	res["create_p50_ms"], res["create_p99_ms"] = pct(create, 50), pct(create, 99)
	res["bare_restore_p50_ms"] = pct(bare, 50)
	res["create_over_bare_restore"] = res["create_p50_ms"] / res["bare_restore_p50_ms"]

	if lat, err = interleaved(creates/2, b.createViaAPI("bench-256m"), b.createViaAPI("bench-1g")); err != nil {
		return err
	}
	c256, c1g := lat[0], lat[1]
	res["create_256m_p50_ms"], res["create_1g_p50_ms"] = pct(c256, 50), pct(c1g, 50)
	res["create_1g_over_256m"] = res["create_1g_p50_ms"] / res["create_256m_p50_ms"]

	// exec `true` round trip through the API.
	_, id, err := b.create("base")
	if err != nil {
		return err
	}
	lat, err = interleaved(100, timed(func() error { return b.post("/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": "true"}, 200) }))
	if err != nil {
		return err
	}
	execs := lat[0]
	b.agent.Kill(id)
	res["exec_true_p50_ms"], res["exec_true_p99_ms"] = pct(execs, 50), pct(execs, 99)

	// Host memory per idle sandbox: PSS of each VMM with `idle` running.
	var ids []string
	for range idle {
		_, id, err := b.create("base")
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	time.Sleep(5 * time.Second)
	pss, err := b.pssMiB(ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		b.agent.Kill(id)
	}
	res["idle_pss_mib"] = pct(pss, 50)
	res["idle_sandboxes"] = float64(idle)
	return nil

}

func (b *bench) create(template string) (float64, string, error) {
	body, _ := json.Marshal(map[string]any{"template": template})
	t := time.Now()
	resp, err := http.Post(b.url+"/v1/sandboxes", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	d := ms(time.Since(t))
	var sb hostagent.SandboxInfo
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
		return 0, "", fmt.Errorf("create %s: %d %s", template, resp.StatusCode, data)
	}
	return d, sb.ID, nil
}

func (b *bench) post(path string, v any, want int) error { return postTo(b.url, path, v, want) }

// postTo posts v as JSON to the agent API at base and wants status want.
func postTo(base, path string, v any, want int) error {
	body, _ := json.Marshal(v)
	resp, err := http.Post(base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, data)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the p-th percentile with linear interpolation.
func pct(xs []float64, p float64) float64 { return results.Pct(xs, p) }

func pssKB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "Pss:" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no Pss in smaps_rollup of %d", pid)
}

func printTable(res map[string]float64) {
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println("\nfigure                      value")
	for _, k := range keys {
		fmt.Printf("%-27s %8.2f\n", k, res[k])
	}
	// The substrate's targets, those this run measured.
	var targets []string
	for _, t := range []struct{ what, key, format string }{
		{"API create/minimal-restore <= 1.3", "api_create_over_minimal_restore", "%.2f"},
		{"agent create/minimal-restore <= 1.3", "create_over_minimal_restore", "%.2f"},
		{"create/bare-restore <= 1.25", "create_over_bare_restore", "%.2f"},
		{"1g/256m create <= 1.2", "create_1g_over_256m", "%.2f"},
		{"idle PSS <= 90 MiB", "idle_pss_mib", "%.1f"},
		{"create with NIC/without <= 1.10", "create_nic_over_no_nic", "%.2f"},
		{"with volume/plain <= 1.2", "create_with_volume_over_plain", "%.2f"},
		{"confined/unconfined <= 1.10", "create_confined_over_unconfined", "%.2f"},
	} {
		if v, ok := res[t.key]; ok {
			targets = append(targets, t.what+": "+fmt.Sprintf(t.format, v))
		}
	}
	if len(targets) > 0 {
		fmt.Printf("\ntargets: %s\n", strings.Join(targets, ", "))
	}
}

// merge writes res into the results file, keeping keys other benchmarks wrote ("": no file).
func merge(path string, res map[string]float64) error {
	if path == "" {
		return nil
	}
	return results.Merge(path, res)
}
