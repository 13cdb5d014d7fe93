package hostagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// counterServer is a python3 process that keeps a counter in its memory only: each request to
// /inc answers the incremented value. It stands for any in-memory state (a REPL, a loaded model).
const counterServer = `nohup setsid python3 -c '
import http.server
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        self.send_response(200); self.end_headers(); self.wfile.write(str(n).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 9000), H).serve_forever()
' >/dev/null 2>&1 &
for i in $(seq 100); do curl -s localhost:9000/inc >/dev/null && break; sleep 0.1; done`

func (h *harness) inc(id string) string {
	h.t.Helper()
	r := h.exec(id, map[string]any{"cmd": "curl -s localhost:9000/inc"})
	return r.Stdout
}

func TestForkSnapshotHibernate(t *testing.T) {
	h := newHarness(t)
	parent := h.create().ID
	h.exec(parent, map[string]any{"cmd": counterServer})
	for i := 0; i < 4; i++ {
		h.inc(parent)
	} // the server answered 1 at start-up, then 2..5
	h.call("PUT", "/v1/sandboxes/"+parent+"/files?path=/home/user/before-fork.txt", []byte("written before the fork"), nil)

	var fork struct{ Sandboxes []hostapi.Sandbox }
	if code := h.call("POST", "/v1/sandboxes/"+parent+"/fork", map[string]any{"count": 3}, &fork); code != 201 || len(fork.Sandboxes) != 3 {
		t.Fatalf("fork: %d %+v", code, fork)
	}
	// Every child continues from the parent's in-memory counter, then diverges on its own.
	for i, c := range fork.Sandboxes {
		if c.ForkOf != parent {
			t.Fatalf("child %s: fork_of %q", c.ID, c.ForkOf)
		}
		for j := 0; j <= i; j++ {
			if got, want := h.inc(c.ID), []string{"6", "7", "8"}[j]; got != want {
				t.Fatalf("child %d inc %d: %q, want %s", i, j, got, want)
			}
		}
		r := h.exec(c.ID, map[string]any{"cmd": "cat /home/user/before-fork.txt"})
		if r.Stdout != "written before the fork" {
			t.Fatalf("child %d misses the pre-fork file: %q", i, r.Stdout)
		}
	}
	h.call("PUT", "/v1/sandboxes/"+fork.Sandboxes[0].ID+"/files?path=/home/user/child0.txt", []byte("mine"), nil)
	for _, id := range []string{parent, fork.Sandboxes[1].ID} {
		var e apiErr
		if code := h.call("GET", "/v1/sandboxes/"+id+"/files/stat?path=/home/user/child0.txt", nil, &e); code != 404 {
			t.Fatalf("child 0's file visible in %s: %d", id, code)
		}
	}
	// The parent kept its own count and keeps working.
	if got := h.inc(parent); got != "6" {
		t.Fatalf("parent after fork: %q, want 6", got)
	}

	// Hibernate frees the VMM; the next exec wakes it with memory intact.
	var info hostapi.Sandbox
	h.call("GET", "/v1/sandboxes/"+parent, nil, &info)
	pid := info.PID
	if code := h.call("POST", "/v1/sandboxes/"+parent+"/hibernate", nil, &info); code != 200 || info.State != sandbox.StateHibernated {
		t.Fatalf("hibernate: %d %+v", code, info)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		if cmd, _ := os.ReadFile("/proc/" + itoa(pid) + "/cmdline"); strings.Contains(string(cmd), "qemu") {
			t.Fatalf("VMM %d still runs after hibernate", pid)
		}
	}
	if got := h.inc(parent); got != "7" {
		t.Fatalf("after wake: %q, want 7", got)
	}
	h.call("GET", "/v1/sandboxes/"+parent, nil, &info)
	if info.State != sandbox.StateRunning || info.PID == pid {
		t.Fatalf("after wake: %+v", info)
	}
	// Hibernate twice in a row: the second snapshot's base is the first one's memory.
	h.call("POST", "/v1/sandboxes/"+parent+"/hibernate", nil, nil)
	h.call("POST", "/v1/sandboxes/"+parent+"/wake", nil, nil)
	if got := h.inc(parent); got != "8" {
		t.Fatalf("after second wake: %q, want 8", got)
	}

	// A snapshot outlives its sandbox and seeds new ones.
	var snap hostapi.Snapshot
	if code := h.call("POST", "/v1/sandboxes/"+fork.Sandboxes[2].ID+"/snapshots", nil, &snap); code != 201 || snap.ID == "" {
		t.Fatalf("snapshot: %d %+v", code, snap)
	}
	h.call("DELETE", "/v1/sandboxes/"+fork.Sandboxes[2].ID, nil, nil)
	var seeded hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &seeded); code != 201 {
		t.Fatalf("create from snapshot: %d", code)
	}
	if got := h.inc(seeded.ID); got != "9" { // child 2 had counted to 8
		t.Fatalf("from snapshot: %q, want 9", got)
	}
	// Deleting the snapshot does not break the sandbox restored from it.
	if code := h.call("DELETE", "/v1/snapshots/"+snap.ID, nil, nil); code != 204 {
		t.Fatalf("delete snapshot: %d", code)
	}
	if code := h.call("GET", "/v1/snapshots/"+snap.ID, nil, nil); code != 404 {
		t.Fatalf("deleted snapshot still answers: %d", code)
	}
	if got := h.inc(seeded.ID); got != "10" {
		t.Fatalf("after snapshot delete: %q", got)
	}
	h.call("POST", "/v1/sandboxes/"+seeded.ID+"/hibernate", nil, nil)
	if got := h.inc(seeded.ID); got != "11" {
		t.Fatalf("hibernate/wake after its snapshot was deleted: %q", got)
	}
	h.call("DELETE", "/v1/sandboxes/"+seeded.ID, nil, nil)
	if _, err := os.Stat(filepath.Join(h.agent.snapshotsDir(), snap.ID)); !os.IsNotExist(err) {
		t.Fatalf("deleted snapshot's files outlived its last user: %v", err)
	}

	// Bad input.
	for _, c := range []struct {
		path string
		body any
		want int
	}{
		{"/v1/sandboxes/" + parent + "/fork", map[string]any{"count": 0}, 400},
		{"/v1/sandboxes/" + parent + "/fork", map[string]any{"count": MaxForkCount + 1}, 400},
		{"/v1/sandboxes/sb_gone/fork", map[string]any{"count": 1}, 404},
		{"/v1/sandboxes", map[string]any{"snapshot_id": "snap_missing"}, 404},
	} {
		var e apiErr
		if code := h.call("POST", c.path, c.body, &e); code != c.want || e.Error.Message == "" {
			t.Errorf("POST %s %v: %d %+v, want %d", c.path, c.body, code, e, c.want)
		}
	}

	// A hibernated sandbox whose memory files are gone: error state with the reason.
	victim := fork.Sandboxes[1].ID
	h.call("POST", "/v1/sandboxes/"+victim+"/hibernate", nil, nil)
	mems, _ := filepath.Glob(filepath.Join(h.agent.sandboxesDir(), victim, "mem-*", "ram"))
	if len(mems) != 1 {
		t.Fatalf("hibernated memory files: %v", mems)
	}
	os.Remove(mems[0])
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes/"+victim+"/exec", map[string]any{"cmd": "true"}, &e); code != 409 || !strings.Contains(e.Error.Message, "missing") {
		t.Fatalf("wake without memory file: %d %+v", code, e)
	}
	h.call("GET", "/v1/sandboxes/"+victim, nil, &info)
	if info.State != sandbox.StateError || !strings.Contains(info.Error, "missing") {
		t.Fatalf("state after failed wake: %+v", info)
	}
}

func TestIdleAutoHibernate(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.IdleHibernate = 2 * time.Second })
	id := h.create().ID
	h.exec(id, map[string]any{"cmd": counterServer})
	waitState(t, h, id, sandbox.StateHibernated)
	if got := h.inc(id); got != "2" {
		t.Fatalf("woken by exec: %q, want 2", got)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// The full-RAM path (the fallback when a diff is impossible) restores the same state.
func TestFullSnapshotPath(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.FullSnapshots = true })
	id := h.create().ID
	h.exec(id, map[string]any{"cmd": counterServer})
	var snap hostapi.Snapshot
	if code := h.call("POST", "/v1/sandboxes/"+id+"/snapshots", nil, &snap); code != 201 {
		t.Fatalf("full snapshot: %d", code)
	}
	if snap.DirtyBytes < 64<<20 { // the whole RAM stream, not a diff
		t.Fatalf("full snapshot streamed only %d bytes", snap.DirtyBytes)
	}
	var child hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &child); code != 201 {
		t.Fatalf("create from full snapshot: %d", code)
	}
	if got := h.inc(child.ID); got != "2" {
		t.Fatalf("child of a full snapshot: %q, want 2", got)
	}
	h.call("POST", "/v1/sandboxes/"+id+"/hibernate", nil, nil)
	if got := h.inc(id); got != "2" {
		t.Fatalf("wake after a full hibernate: %q, want 2", got)
	}
}

// A snapshot that runs out of host disk fails clearly; the sandbox keeps running and no partial
// snapshot is visible. The pool here is a small XFS image, nearly filled by the test.
func TestSnapshotOnFullDisk(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.PoolGiB = 4 })
	if !h.agent.pool.Loop {
		t.Fatalf("this test needs the loop-mounted pool (data dir %s can reflink)", h.dir)
	}
	id := h.create().ID
	h.exec(id, map[string]any{"cmd": counterServer})
	h.exec(id, map[string]any{"cmd": "head -c 96M /dev/urandom > /dev/shm/dirty", "user": "root"})
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.agent.pool.Dir, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(h.agent.pool.Dir, "filler")
	free := int64(st.Bavail)*st.Bsize - 16<<20 // leave 16 MiB: less than the guest dirtied
	if err := exec.Command("fallocate", "-l", itoa(int(free)), filler).Run(); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	defer os.Remove(filler)
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes/"+id+"/snapshots", nil, &e); code != 507 || e.Error.Code != "no_space" {
		t.Fatalf("snapshot on a full disk: %d %+v", code, e)
	}
	var list struct{ Snapshots []hostapi.Snapshot }
	h.call("GET", "/v1/snapshots", nil, &list)
	leftovers, _ := filepath.Glob(filepath.Join(h.agent.snapshotsDir(), "*"))
	if len(list.Snapshots) != 0 || len(leftovers) != 0 {
		t.Fatalf("partial snapshot left: %+v %v", list.Snapshots, leftovers)
	}
	if got := h.inc(id); got != "2" {
		t.Fatalf("sandbox after the failed snapshot: %q, want 2", got)
	}
	os.Remove(filler)
	if code := h.call("POST", "/v1/sandboxes/"+id+"/snapshots", nil, nil); code != 201 {
		t.Fatalf("snapshot once space is back: %d", code)
	}
}
