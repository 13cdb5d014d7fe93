package hostagent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// The per-VM size limits: a template larger than the host allows is refused with a 400 that names
// the limit, before any VM boots (a bake of 64 GiB / 16 vCPUs used to start on any host).
func TestSizeLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.HostMemoryMiB = 4096 // max_memory_mib defaults to half: 2048
		c.Templates = map[string]template.Spec{
			"big":  {Name: "big", From: "base", MemoryMiB: 4096},
			"wide": {Name: "wide", From: "base", VCPUs: goruntime.NumCPU() + 1},
		}
	})
	var info map[string]any
	h.call("GET", "/v1/info", nil, &info)
	if info["max_vcpus"] != float64(goruntime.NumCPU()) || info["max_memory_mib"] != float64(2048) {
		t.Fatalf("info limits: max_vcpus %v, max_memory_mib %v", info["max_vcpus"], info["max_memory_mib"])
	}
	for _, c := range []struct{ tmpl, limit string }{{"big", "max_memory_mib"}, {"wide", "max_vcpus"}} {
		var e apiErr
		if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": c.tmpl}, &e); code != 400 || e.Error.Code != "invalid_request" ||
			!strings.Contains(e.Error.Message, c.limit) {
			t.Errorf("create of %s: status %d %+v, want 400 naming %s", c.tmpl, code, e, c.limit)
		}
	}
	// A build is refused before its stream starts: a plain 400, not an NDJSON error.
	var e apiErr
	spec := []byte(`{"name":"huge","from":"base","memory_mib":65536,"vcpus":16}`)
	if code := h.call("POST", "/v1/templates", spec, &e); code != 400 || !strings.Contains(e.Error.Message, "max_") {
		t.Errorf("build of a 64 GiB / 16 vCPU template: status %d %+v, want 400 naming the limit", code, e)
	}
	if len(h.agent.List()) != 0 {
		t.Errorf("sandboxes left: %+v", h.agent.List())
	}

	// A bake VM counts against the commit limit like a sandbox: with 256 MiB to commit, the
	// 512 MiB bake of base is refused before it boots.
	tiny := newHarness(t, func(c *Config) { c.HostMemoryMiB, c.MemoryOvercommit = 1024, 0.25; ownBakes(c) })
	if code := tiny.call("POST", "/v1/sandboxes", map[string]any{"template": "base"}, &e); code != 503 || e.Error.Code != "capacity" ||
		!strings.Contains(e.Error.Message, "bake") {
		t.Errorf("create needing a bake past the commit limit: status %d %+v, want 503 capacity naming the bake", code, e)
	}
}

// Memory policy on a small host: the agent's VMs may use 1 GiB together (a real cgroup limit, so
// the hog cannot reach the shared machine), guest memory is committed up to 2 × that, and below a
// 256 MiB watermark the idlest sandboxes are hibernated. Four 512 MiB sandboxes fill the commit
// limit (a fifth is refused, `capacity`); two of them then write 250 and 350 MiB, one after the
// other. Without the pressure path that leaves 48 MiB of the group's 1 GiB available (measured:
// the kernel reclaims file pages first), and the next write anywhere meets the cgroup's OOM
// killer (350 MiB for the first writer ended a VMM: its exec failed with a 502); with it, the
// idlest sandbox is hibernated and memory stays above the watermark.
func TestMemoryPressure(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	const watermark = 256
	h := newHarness(t, func(c *Config) {
		c.HostMemoryMiB, c.MemoryOvercommit, c.MemoryWatermarkMiB = 1024, 2.0, watermark
		c.PressureInterval = 200 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if !h.agent.confined {
		t.Skip("needs confinement (root): the small host is a cgroup limit")
	}
	var ids []string
	for range 4 {
		ids = append(ids, h.create().ID)
	}
	// The commit limit (4 × 512 MiB = 2 × 1024 MiB): the fifth is refused, and says why.
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "base"}, &e); code != 503 || e.Error.Code != "capacity" ||
		!strings.Contains(e.Error.Message, "memory_overcommit") {
		t.Fatalf("create past the commit limit: status %d %+v, want 503 capacity", code, e)
	}
	var info map[string]any
	h.call("GET", "/v1/info", nil, &info)
	if info["mem_mib_committed"] != float64(2048) || info["mem_mib_commit_limit"] != float64(2048) {
		t.Fatalf("info: committed %v of %v, want 2048 of 2048", info["mem_mib_committed"], info["mem_mib_commit_limit"])
	}
	logIdleMemory(t, h, ids)

	// The hog writes mib MiB, 10 MiB at a time; a guest's written pages stay taken on the host
	// after the guest frees them.
	runHog := func(id string, mib int) {
		hog := fmt.Sprintf(`python3 -c "
import time
b = []
for i in range(%d):
    b.append(bytearray(b'\x01') * (10 << 20))
    time.sleep(0.3)
"`, mib/10)
		var r hostapi.ExecResult
		if code := h.call("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": hog, "timeout_seconds": 300}, &r); code != 200 || r.ExitCode != 0 {
			t.Fatalf("hog in %s: status %d, exit %d: %s; sandboxes: %+v (OOM kills: %d)", id, code, r.ExitCode, r.Stderr, h.agent.List(), oomKills(h))
		}
		t.Logf("after the hog in %s: %d MiB available to VMs", id, h.agent.sandboxes.MemAvailableMiB())
	}
	// Use order: ids[0] (a counter in its memory, then a 250 MiB hog) longest ago, then ids[2],
	// ids[3]; ids[1] writes 350 MiB last, and is busy meanwhile.
	h.exec(ids[0], map[string]any{"cmd": counterServer}) // counts to 1
	runHog(ids[0], 250)
	if avail := h.agent.sandboxes.MemAvailableMiB(); avail < watermark+64 {
		t.Fatalf("%d MiB available after the first hog: too close to the watermark for this test", avail)
	}
	h.exec(ids[2], map[string]any{"cmd": "true"})
	h.exec(ids[3], map[string]any{"cmd": "true"})
	runHog(ids[1], 350)
	// The idlest is hibernated first, then the next idlest, until memory is above the watermark.
	waitState(t, h, ids[0], sandbox.StateHibernated)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for h.agent.sandboxes.MemAvailableMiB() < watermark && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	var order []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "memory pressure: hibernated") {
			for _, id := range ids {
				if strings.Contains(line, id) {
					order = append(order, id)
				}
			}
		}
	}
	t.Logf("hibernated under pressure, in order: %v; %d MiB available", order, h.agent.sandboxes.MemAvailableMiB())
	if len(order) == 0 || order[0] != ids[0] {
		t.Errorf("hibernation order %v: want the idlest, %s, first", order, ids[0])
	}
	if avail := h.agent.sandboxes.MemAvailableMiB(); avail < watermark {
		t.Errorf("%d MiB available after the relief, below the %d MiB watermark", avail, watermark)
	}
	for _, sb := range h.agent.List() {
		if sb.State == sandbox.StateError {
			t.Errorf("sandbox %s ended: %s", sb.ID, sb.Error)
		}
	}
	if oom := oomKills(h); oom != 0 {
		t.Errorf("the VMMs' cgroup saw %d OOM kills", oom)
	}
	// With ids[0] hibernated there is room to commit one more sandbox; then ids[0]'s wake is past
	// the commit limit, so the idlest other sandbox with no call in flight (ids[2]) is hibernated
	// to make room, and ids[0] wakes on its next call with its memory.
	ids = append(ids, h.create().ID)
	if got := h.inc(ids[0]); got != "2" {
		t.Fatalf("counter after the wake: %q, want 2", got)
	}
	if sb, _ := h.agent.Get(ids[0]); sb.State != sandbox.StateRunning {
		t.Fatalf("woken sandbox: %+v", sb)
	}
	if sb, _ := h.agent.Get(ids[2]); sb.State != sandbox.StateHibernated {
		t.Errorf("the idlest sandbox after the wake: %+v, want hibernated", sb)
	}
	h.call("GET", "/v1/info", nil, &info)
	if c, l := info["mem_mib_committed"].(float64), info["mem_mib_commit_limit"].(float64); c > l {
		t.Errorf("committed %v MiB past the %v MiB limit", c, l)
	}
	if oom := oomKills(h); oom != 0 {
		t.Errorf("the VMMs' cgroup saw %d OOM kills", oom)
	}
}

// logIdleMemory logs what idle restored sandboxes really take (the figures behind the default
// overcommit ratio).
func logIdleMemory(t *testing.T, h *harness, ids []string) {
	for _, id := range ids {
		sb, _ := h.agent.Get(id)
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", sb.PID))
		var parts []string
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && (f[0] == "Rss:" || f[0] == "Pss:" || f[0] == "Pss_Anon:" || f[0] == "Pss_File:" || f[0] == "Shared_Clean:") {
				parts = append(parts, f[0]+f[1])
			}
		}
		t.Logf("idle sandbox %s (%d MiB guest): %s kB", id, sb.MemoryMiB, strings.Join(parts, " "))
	}
	limit, used, _ := h.agent.cg.Memory()
	t.Logf("VMMs' cgroup: working set %d MiB of %d MiB", used>>20, limit>>20)
}

// oomKills is the OOM kill count of the VMMs' cgroup (v1 memory.oom_control, v2 memory.events).
func oomKills(h *harness) int {
	for _, d := range h.agent.cg.Dirs() {
		for _, f := range []string{"memory.oom_control", "memory.events"} {
			data, err := os.ReadFile(d + "/" + f)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				var n int
				if _, err := fmt.Sscanf(line, "oom_kill %d", &n); err == nil {
					return n
				}
			}
		}
	}
	return 0
}
