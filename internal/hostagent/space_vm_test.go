package hostagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TestSnapshotAdmission: on a 5 GiB pool, snapshots of a running sandbox are admitted against
// the pool's real free space (its memory size + an allowance for its disk each, before anything
// is written): past it a snapshot and a hibernation are 507 no_space naming what is needed and
// available, nothing half-made is left, the pool keeps its reserve and the sandbox keeps running.
// Deleting a snapshot makes room again.
func TestSnapshotAdmission(t *testing.T) {
	const reserveMiB = 256
	h := newHarness(t, func(c *Config) { c.PoolGiB = 5; c.DiskReserveMiB = reserveMiB })
	sb := h.create()
	// Guest memory that differs from the template's: every snapshot copies it (~200 MiB each).
	if r := h.exec(sb.ID, map[string]any{"cmd": "head -c 200M /dev/urandom > /dev/shm/ballast && echo ok"}); r.Stdout != "ok\n" {
		t.Fatalf("ballast: %+v", r)
	}
	var ok []hostapi.Snapshot
	var e apiErr
	code := 0
	for range 40 {
		var snap hostapi.Snapshot
		var raw []byte
		if code = h.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &raw); code != 201 {
			jsonInto(t, raw, &e)
			break
		}
		jsonInto(t, raw, &snap)
		ok = append(ok, snap)
		// The guest writes between snapshots, as a real one would.
		h.exec(sb.ID, map[string]any{"cmd": "head -c 16M /dev/urandom > /home/user/junk-$RANDOM"})
	}
	sp, _ := h.agent.pool.Space()
	t.Logf("%d snapshots taken (%d MiB of guest memory copied each), then: %d %s; pool %d MiB free", len(ok), ok[0].DirtyBytes>>20, code, e.Error.Message, sp.Free()>>20)
	if len(ok) == 0 || code != 507 || e.Error.Code != "no_space" ||
		!strings.Contains(e.Error.Message, "needs") || !strings.Contains(e.Error.Message, "available") {
		t.Fatalf("after %d snapshots: %d %+v, want 507 no_space naming what is needed and available", len(ok), code, e)
	}
	if sp.Free() < reserveMiB<<20 {
		t.Fatalf("pool has %d MiB free when snapshots stop; the reserve is %d MiB", sp.Free()>>20, reserveMiB)
	}
	dirs, _ := filepath.Glob(filepath.Join(h.agent.snapshotsDir(), "*"))
	if len(dirs) != len(ok) || len(h.agent.snapshots.List()) != len(ok) {
		t.Fatalf("snapshot dirs %v for %d snapshots taken: a refused one left something", dirs, len(ok))
	}
	// Hibernation writes the memory too (less than a snapshot's estimate): with the pool's other
	// room taken by a file, it is refused the same way and the sandbox stays up.
	filler := filepath.Join(h.agent.pool.Dir, "filler")
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(h.agent.disk.Space().FreeMiB-100, 10)+"MiB", filler).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v %s", err, out)
	}
	if code := h.call("POST", "/v1/sandboxes/"+sb.ID+"/hibernate", nil, &e); code != 507 || e.Error.Code != "no_space" {
		t.Fatalf("hibernate on a full pool: %d %+v", code, e)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "echo alive"}); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after refused snapshot and hibernation: %+v", r)
	}
	if info, _ := h.agent.Get(sb.ID); info.State != sandbox.StateRunning {
		t.Fatalf("sandbox is %s after refusals", info.State)
	}
	os.Remove(filler)
	// Deleting snapshots gives their room back.
	for _, s := range ok[:min(2, len(ok))] {
		if code := h.call("DELETE", "/v1/snapshots/"+s.ID, nil, nil); code != 204 {
			t.Fatalf("delete snapshot: %d", code)
		}
	}
	if code := h.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &e); code != 201 {
		t.Fatalf("snapshot after deleting two: %d %+v", code, e)
	}
}
