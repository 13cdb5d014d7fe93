package hostagent

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func jsonInto(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("bad JSON %q: %v", data, err)
	}
}

// dfTotalMiB reads the size column of a `df -m` line.
func dfTotalMiB(line string) int {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestVolumes: a volume's data outlives its sandboxes and an agent restart; one read-write user
// at a time; a full volume is ENOSPC in the guest, not a broken sandbox.
func TestVolumes(t *testing.T) {
	h := newHarness(t)
	var vol hostapi.Volume
	if code := h.call("POST", "/v1/volumes", map[string]any{"id": "vol_data", "size_mib": 256}, &vol); code != 201 || vol.SizeMiB != 256 {
		t.Fatalf("create volume: %d %+v", code, vol)
	}
	for _, c := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"id": "vol_zero", "size_mib": 0}, 400},
		{map[string]any{"id": "vol_huge", "size_mib": volume.MaxMiB + 1}, 400},
		{map[string]any{"id": "Vol-Bad", "size_mib": 10}, 400},
		{map[string]any{"id": "vol_data", "size_mib": 10}, 409},
	} {
		var e apiErr
		if code := h.call("POST", "/v1/volumes", c.body, &e); code != c.status || e.Error.Message == "" {
			t.Errorf("create volume %v: %d %+v, want %d", c.body, code, e, c.status)
		}
	}

	createWith := func(mounts ...map[string]any) (hostapi.Sandbox, int, apiErr) {
		t.Helper()
		var sb hostapi.Sandbox
		var e apiErr
		var raw []byte
		code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "base", "volumes": mounts}, &raw)
		if code == 201 {
			jsonInto(t, raw, &sb)
		} else {
			jsonInto(t, raw, &e)
		}
		return sb, code, e
	}
	rw := map[string]any{"volume_id": "vol_data", "mount_path": "/data"}
	ro := map[string]any{"volume_id": "vol_data", "mount_path": "/mnt/data", "read_only": true}

	s1, code, e := createWith(rw)
	if code != 201 {
		t.Fatalf("create with a volume: %d %+v", code, e)
	}
	// The default (unprivileged) user owns the volume's root; 100 MiB with a checksum.
	r := h.exec(s1.ID, map[string]any{"cmd": "set -e; head -c 100M /dev/urandom > /data/blob; sha256sum /data/blob | cut -d' ' -f1; df -m /data | tail -1"})
	if r.ExitCode != 0 {
		t.Fatalf("write to the volume: %+v", r)
	}
	sum := strings.Split(r.Stdout, "\n")[0]
	if n := dfTotalMiB(strings.Split(r.Stdout, "\n")[1]); n < 200 || n > 256 {
		t.Errorf("df of the 256 MiB volume: %q", r.Stdout)
	}

	// One read-write user; no read-only user beside it.
	for _, m := range []map[string]any{rw, ro} {
		if _, code, e := createWith(m); code != 409 || !strings.Contains(e.Error.Message, s1.ID) {
			t.Errorf("second attach %v: %d %+v, want 409 naming %s", m, code, e, s1.ID)
		}
	}
	var e2 apiErr
	if code := h.call("DELETE", "/v1/volumes/vol_data", nil, &e2); code != 409 {
		t.Errorf("delete while attached: %d %+v", code, e2)
	}
	if code := h.call("POST", "/v1/volumes/vol_data/resize", map[string]any{"size_mib": 512}, &e2); code != 409 {
		t.Errorf("resize while attached: %d %+v", code, e2)
	}
	if code := h.call("POST", "/v1/sandboxes/"+s1.ID+"/snapshots", nil, &e2); code != 409 || !strings.Contains(e2.Error.Message, "volumes") {
		t.Errorf("snapshot with a volume: %d %+v", code, e2)
	}
	if code := h.call("POST", "/v1/sandboxes/"+s1.ID+"/fork", map[string]any{"count": 1}, &e2); code != 409 {
		t.Errorf("fork with a volume: %d %+v", code, e2)
	}
	var got hostapi.Volume
	h.call("GET", "/v1/volumes/vol_data", nil, &got)
	if len(got.Attachments) != 1 || got.Attachments[0].SandboxID != s1.ID || got.Attachments[0].MountPath != "/data" {
		t.Errorf("attachments: %+v", got.Attachments)
	}

	// Hibernate and wake keep the volume; then a last write, flushed by the kill.
	var info hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes/"+s1.ID+"/hibernate", nil, &info); code != 200 {
		t.Fatalf("hibernate: %d", code)
	}
	if r := h.exec(s1.ID, map[string]any{"cmd": "echo after-wake > /data/note"}); r.ExitCode != 0 {
		t.Fatalf("write after wake: %+v", r)
	}
	h.call("DELETE", "/v1/sandboxes/"+s1.ID, nil, nil)

	// The agent restarts; two read-only users see the same bytes and cannot write.
	h.stop()
	h.start()
	s2, code, e := createWith(ro)
	if code != 201 {
		t.Fatalf("read-only attach after restart: %d %+v", code, e)
	}
	s3, code, e := createWith(ro)
	if code != 201 {
		t.Fatalf("second read-only attach: %d %+v", code, e)
	}
	r = h.exec(s2.ID, map[string]any{"cmd": "sha256sum /mnt/data/blob | cut -d' ' -f1; cat /mnt/data/note; touch /mnt/data/x 2>&1 || true"})
	if lines := strings.Split(r.Stdout, "\n"); len(lines) < 3 || lines[0] != sum || lines[1] != "after-wake" || !strings.Contains(lines[2], "Read-only") {
		t.Errorf("read-only view: %q, want checksum %s, the note, and a read-only error", r.Stdout, sum)
	}
	if _, code, _ := createWith(rw); code != 409 {
		t.Errorf("read-write attach beside read-only ones: %d, want 409", code)
	}
	h.call("DELETE", "/v1/sandboxes/"+s2.ID, nil, nil)
	h.call("DELETE", "/v1/sandboxes/"+s3.ID, nil, nil)

	// Grow, then fill: the guest sees the new size and gets ENOSPC, and keeps working.
	if code := h.call("POST", "/v1/volumes/vol_data/resize", map[string]any{"size_mib": 384}, &got); code != 200 || got.SizeMiB != 384 {
		t.Fatalf("resize: %d %+v", code, got)
	}
	if code := h.call("POST", "/v1/volumes/vol_data/resize", map[string]any{"size_mib": 100}, &e2); code != 400 {
		t.Errorf("shrink: %d %+v, want 400", code, e2)
	}
	s4, code, e := createWith(rw)
	if code != 201 {
		t.Fatalf("attach after resize: %d %+v", code, e)
	}
	r = h.exec(s4.ID, map[string]any{"cmd": "df -m /data | tail -1; dd if=/dev/zero of=/data/fill bs=1M 2>&1 | grep -o 'No space left on device'; echo still-here"})
	if n := dfTotalMiB(strings.Split(r.Stdout, "\n")[0]); n < 330 || n > 384 {
		t.Errorf("volume grown to 384 MiB: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "No space left") || !strings.Contains(r.Stdout, "still-here") {
		t.Errorf("full volume: %q", r.Stdout)
	}
	if r := h.exec(s4.ID, map[string]any{"cmd": "rm /data/fill && echo ok"}); r.Stdout != "ok\n" {
		t.Errorf("after the full volume: %+v", r)
	}

	// Bad mounts.
	for _, m := range [][]map[string]any{
		{{"volume_id": "vol_data", "mount_path": "relative"}},
		{{"volume_id": "vol_data", "mount_path": "/etc/x"}},
		{{"volume_id": "vol_data", "mount_path": "/"}},
		{{"volume_id": "vol_nope", "mount_path": "/data"}},
		{{"volume_id": "vol_data", "mount_path": "/a", "read_only": true}, {"volume_id": "vol_data", "mount_path": "/b", "read_only": true}},
	} {
		if _, code, e := createWith(m...); code != 400 && code != 404 {
			t.Errorf("mounts %v: %d %+v, want 400 or 404", m, code, e)
		}
	}
	h.call("DELETE", "/v1/sandboxes/"+s4.ID, nil, nil)
	if code := h.call("DELETE", "/v1/volumes/vol_data", nil, nil); code != 204 {
		t.Errorf("delete detached volume: %d", code)
	}
	if code := h.call("GET", "/v1/volumes/vol_data", nil, &e2); code != 404 {
		t.Errorf("deleted volume: %d", code)
	}
}
