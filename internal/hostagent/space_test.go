package hostagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/host/volume"
	"golang.org/x/sys/unix"
)

// smallDiskAgent is a host agent (no VM is started) whose data dir is a tmpfs of diskMiB: a small
// host disk, under which the agent makes its loop pool. Root only.
func smallDiskAgent(t *testing.T, diskMiB int, tune func(*Config)) (*Agent, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (tmpfs and loop mounts)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", diskMiB)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	cfg := Config{DataDir: dir, Accel: "tcg", Unconfined: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tune != nil {
		tune(&cfg)
	}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	t.Cleanup(func() {
		a.Close()
		if err := a.pool.Close(); err != nil {
			t.Errorf("pool close: %v", err)
		}
	})
	return a, dir
}

// apiCall does one request against the agent's handler; it returns the status and the body.
func apiCall(t *testing.T, a *Agent, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req := httptest.NewRequest(method, path, rd)
	req.RemoteAddr = "127.0.0.1:1" // the agent without a token answers loopback only
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// TestDiskAdmission: on a host with a 3 GiB disk, volume creates and resizes are admitted
// against the pool's real free space: a 1 TiB volume is 507 no_space naming what is free and
// needed, with nothing left behind; volumes fill the pool only up to its reserve; /v1/info
// reports the room; and with --volume-overcommit the same 1 TiB volumes cost 1/ratio each, still
// bounded by the pool.
func TestDiskAdmission(t *testing.T) {
	const diskMiB, reserveMiB = 3072, 256
	a, dir := smallDiskAgent(t, diskMiB, func(c *Config) { c.DiskReserveMiB = reserveMiB })
	if st, err := os.Stat(filepath.Join(dir, "pool.xfs")); err != nil || st.Size() > (diskMiB-reserveMiB)<<20 {
		t.Fatalf("pool image on a %d MiB disk: %v %v", diskMiB, st.Size()>>20, err)
	}
	var info struct {
		Total int64 `json:"pool_mib_total"`
		Free  int64 `json:"pool_mib_free"`
	}
	code, body := apiCall(t, a, "GET", "/v1/info", nil)
	if json.Unmarshal(body, &info); code != 200 || info.Total <= 0 || info.Total > diskMiB || info.Free <= 0 || info.Free > info.Total-reserveMiB {
		t.Fatalf("info: %d %s", code, body)
	}

	noSpace := func(code int, body []byte, what string) {
		t.Helper()
		var e apiErr
		json.Unmarshal(body, &e)
		if code != http.StatusInsufficientStorage || e.Error.Code != "no_space" ||
			!strings.Contains(e.Error.Message, "needs") || !strings.Contains(e.Error.Message, "available") {
			t.Fatalf("%s: %d %s, want 507 no_space naming what is needed and available", what, code, body)
		}
	}
	// Five 1 TiB volumes took 0.47 s and ~1 GiB of real pool each: now the first is refused.
	code, body = apiCall(t, a, "POST", "/v1/volumes", map[string]any{"id": "vol_huge", "size_mib": volume.MaxMiB})
	noSpace(code, body, "1 TiB volume")
	t.Logf("refused: %s", body)
	if left, _ := filepath.Glob(filepath.Join(a.volumes.Dir(), "*")); len(left) > 0 {
		t.Fatalf("a refused volume left %v", left)
	}

	// 512 MiB volumes until refused: the pool keeps its reserve, the refusal leaves nothing.
	n := 0
	for ; n < 20; n++ {
		code, body = apiCall(t, a, "POST", "/v1/volumes", map[string]any{"id": fmt.Sprintf("vol_v%d", n), "size_mib": 512})
		if code != 201 {
			break
		}
	}
	noSpace(code, body, "volume past the pool's room")
	t.Logf("%d volumes of 512 MiB admitted with %d MiB available", n, info.Free)
	if max := (info.Free + 511) / 512; n == 0 || int64(n) > max {
		t.Fatalf("%d volumes of 512 MiB admitted with %d MiB free", n, info.Free)
	}
	if _, err := os.Stat(a.volumes.File(fmt.Sprintf("vol_v%d", n))); err == nil || len(a.volumes.List()) != n {
		t.Fatalf("refused volume was kept: %d volumes", len(a.volumes.List()))
	}
	sp, _ := a.pool.Space()
	if sp.Free() < reserveMiB<<20 {
		t.Fatalf("pool has %d MiB free after admission stopped; the reserve is %d", sp.Free()>>20, reserveMiB)
	}
	// Growing one is admitted against the same room.
	code, body = apiCall(t, a, "POST", "/v1/volumes/vol_v0/resize", map[string]any{"size_mib": volume.MaxMiB})
	noSpace(code, body, "resize to 1 TiB")
	if v, _ := a.volumes.Get("vol_v0"); v.SizeMiB != 512 || v.GrowPending {
		t.Fatalf("refused resize changed the volume: %+v", v)
	}
	if st, _ := os.Stat(a.volumes.File("vol_v0")); st.Size() != 512<<20 {
		t.Fatalf("refused resize changed the file: %d bytes", st.Size())
	}
	// Deleting volumes gives their room back.
	for i := range n {
		if err := a.volumes.Delete(fmt.Sprintf("vol_v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	code, body = apiCall(t, a, "POST", "/v1/volumes", map[string]any{"id": "vol_again", "size_mib": 512})
	if code != 201 {
		t.Fatalf("create after deletes: %d %s", code, body)
	}
	a.volumes.Delete("vol_again")

	// Overcommit 1024: a 1 TiB volume is promised 1 GiB, and costs mkfs's ~1 GiB now; the pool
	// takes one or two, never five.
	a.Close()
	a2, err := New(context.Background(), Config{DataDir: dir, Accel: "tcg", Unconfined: true, DiskReserveMiB: reserveMiB,
		VolumeOvercommit: 1024, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	made := 0
	for i := range 5 {
		code, body = apiCall(t, a2, "POST", "/v1/volumes", map[string]any{"id": fmt.Sprintf("vol_t%d", i), "size_mib": volume.MaxMiB})
		if code != 201 {
			break
		}
		made++
	}
	noSpace(code, body, "1 TiB volumes with overcommit 1024")
	t.Logf("%d volumes of 1 TiB admitted with overcommit 1024: %s", made, body)
	if made < 1 || made > 2 {
		t.Fatalf("%d volumes of 1 TiB admitted with overcommit 1024 on a %d MiB pool", made, info.Total)
	}
	if sp, _ := a2.pool.Space(); sp.Free() < reserveMiB<<20 {
		t.Fatalf("pool has %d MiB free after admission stopped; the reserve is %d", sp.Free()>>20, reserveMiB)
	}
}

// A snapshot's purpose (for=) other than fork is refused before any sandbox is looked at.
func TestSnapshotPurposeChecked(t *testing.T) {
	a, _ := smallDiskAgent(t, 1536, func(c *Config) { c.DiskReserveMiB = 64 })
	code, body := apiCall(t, a, "POST", "/v1/sandboxes/sb_none/snapshots?for=backup", nil)
	if code != 400 || !strings.Contains(string(body), "invalid_request") || !strings.Contains(string(body), "fork") {
		t.Fatalf("snapshot for=backup: %d %s", code, body)
	}
	if code, body := apiCall(t, a, "POST", "/v1/sandboxes/sb_none/snapshots?for=fork", nil); code != 404 {
		t.Fatalf("fork snapshot of a missing sandbox: %d %s", code, body)
	}
}

// With no --disk-reserve-mib, a small pool on a small disk is made: the reserve is a sixteenth of
// the pool asked for (128 MiB for 2 GiB), not the 4 GiB a default 64 GiB pool keeps — the rule
// the agent applies once the pool exists, so its start and its admission agree.
func TestDefaultReserveFollowsPool(t *testing.T) {
	a, _ := smallDiskAgent(t, 3072, func(c *Config) { c.PoolGiB = 2 })
	if a.cfg.DiskReserveMiB < 64 || a.cfg.DiskReserveMiB > 128 {
		t.Fatalf("a 2 GiB pool keeps %d MiB free, want a sixteenth of it", a.cfg.DiskReserveMiB)
	}
	if sp, err := a.pool.Space(); err != nil || sp.Total>>20 < 1900 {
		t.Fatalf("pool of %d MiB (%v), want the 2 GiB asked for", sp.Total>>20, err)
	}
}
