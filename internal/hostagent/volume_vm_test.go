package hostagent

import (
	"encoding/json"
	"reflect"
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

// TestVolumeSnapshotsAndForks: a snapshot or fork of a sandbox with a volume copies the volume at
// the instant of its memory; a sandbox made from it mounts a new volume of its own made from the
// copy, already mounted, and writes in one copy are seen in no other.
func TestVolumeSnapshotsAndForks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	src := h.createWithVolume("vol_src")
	var raw []byte
	read := func(id string) string {
		t.Helper()
		r := h.exec(id, map[string]any{"cmd": "cat /data/a; cat /data/b 2>/dev/null || echo no-b"})
		if r.ExitCode != 0 {
			t.Fatalf("read in %s: %+v", id, r)
		}
		return strings.ReplaceAll(r.Stdout, "\n", " ")
	}
	write := func(id, cmd string) {
		t.Helper()
		if r := h.exec(id, map[string]any{"cmd": cmd}); r.ExitCode != 0 {
			t.Fatalf("write in %s: %+v", id, r)
		}
	}
	write(src.ID, "echo one > /data/a")

	var snap hostapi.Snapshot
	if code := h.call("POST", "/v1/sandboxes/"+src.ID+"/snapshots", nil, &snap); code != 201 {
		t.Fatalf("snapshot with a volume: %d", code)
	}
	if want := []hostapi.SnapshotVolume{{Slot: 0, VolumeID: "vol_src", MountPath: "/data", SizeMiB: 64, FS: "ext4"}}; !reflect.DeepEqual(snap.Volumes, want) || snap.Published {
		t.Fatalf("snapshot volumes %+v published %v, want %+v, not published", snap.Volumes, snap.Published, want)
	}
	write(src.ID, "echo two > /data/a; echo b > /data/b")

	// A restore sees the volume as it was at the snapshot, in a new volume of its own.
	var r hostapi.Sandbox
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &raw); code != 201 {
		t.Fatalf("create from the snapshot: %d %s", code, raw)
	}
	jsonInto(t, raw, &r)
	if len(r.Volumes) != 1 || r.Volumes[0].VolumeID == "vol_src" || r.Volumes[0].MountPath != "/data" || r.Volumes[0].ReadOnly {
		t.Fatalf("restored volumes %+v", r.Volumes)
	}
	if got := read(r.ID); got != "one no-b " {
		t.Errorf("restored copy reads %q, want the snapshot's %q", got, "one no-b ")
	}
	write(r.ID, "echo restored > /data/a")
	if got := read(src.ID); got != "two b " {
		t.Errorf("source after a write in its restored copy reads %q", got)
	}

	// A fork: each child its own copy of the parent's volume.
	var kids hostapi.SandboxList
	if code := h.call("POST", "/v1/sandboxes/"+src.ID+"/fork", map[string]any{"count": 2}, &kids); code != 201 || len(kids.Sandboxes) != 2 {
		t.Fatalf("fork with a volume: %d %+v", code, kids)
	}
	c1, c2 := kids.Sandboxes[0], kids.Sandboxes[1]
	ids := map[string]bool{"vol_src": true, r.Volumes[0].VolumeID: true}
	for _, c := range kids.Sandboxes {
		if len(c.Volumes) != 1 || ids[c.Volumes[0].VolumeID] || c.Volumes[0].MountPath != "/data" {
			t.Fatalf("fork child's volumes %+v (others: %v)", c.Volumes, ids)
		}
		ids[c.Volumes[0].VolumeID] = true
	}
	write(c1.ID, "echo child1 > /data/a")
	for id, want := range map[string]string{c1.ID: "child1 b ", c2.ID: "two b ", src.ID: "two b ", r.ID: "restored no-b "} {
		if got := read(id); got != want {
			t.Errorf("%s reads %q, want %q", id, got, want)
		}
	}

	// A sandbox made from a snapshot with volumes takes no others.
	var e apiErr
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID,
		"volumes": []map[string]any{{"volume_id": "vol_src", "mount_path": "/other"}}}, &e); code != 409 || !strings.Contains(e.Error.Message, "copies") {
		t.Errorf("create from a snapshot with volumes, with a volume: %d %+v", code, e)
	}

	// The copies outlive their sandboxes, detached, and are deleted like any volume.
	for _, id := range []string{r.ID, c1.ID, c2.ID} {
		h.call("DELETE", "/v1/sandboxes/"+id, nil, nil)
	}
	delete(ids, "vol_src")
	for id := range ids {
		var v hostapi.Volume
		if code := h.call("GET", "/v1/volumes/"+id, nil, &v); code != 200 || v.SizeMiB != 64 || len(v.Attachments) != 0 {
			t.Errorf("copy %s after its sandbox: %d %+v", id, code, v)
		}
		if code := h.call("DELETE", "/v1/volumes/"+id, nil, nil); code != 204 {
			t.Errorf("delete copy %s: %d", id, code)
		}
	}
	if got := read(src.ID); got != "two b " {
		t.Errorf("source at the end reads %q", got)
	}
}

// createWithVolume creates volume id (64 MiB) and a sandbox of base with it at /data.
func (h *harness) createWithVolume(id string) hostapi.Sandbox {
	h.t.Helper()
	if code := h.call("POST", "/v1/volumes", map[string]any{"id": id, "size_mib": 64}, nil); code != 201 {
		h.t.Fatalf("create volume: %d", code)
	}
	var raw []byte
	if code := h.call("POST", "/v1/sandboxes", map[string]any{"template": "base",
		"volumes": []map[string]any{{"volume_id": id, "mount_path": "/data"}}}, &raw); code != 201 {
		h.t.Fatalf("create with a volume: %d %s", code, raw)
	}
	var sb hostapi.Sandbox
	jsonInto(h.t, raw, &sb)
	return sb
}
