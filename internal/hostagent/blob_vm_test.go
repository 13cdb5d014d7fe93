package hostagent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
	"github.com/pandastack/pandastack/internal/faultpoint"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// A host with a blob store publishes what it bakes; a second host with an empty data dir and an
// empty image cache pulls the bake (seconds) instead of building the image and baking (minutes),
// and its sandboxes restore from the pulled files.
func TestTemplatesTravelThroughBlobStore(t *testing.T) {
	srv := blobtest.StartS3(t)
	srv.Env(t)
	url := srv.URL("pandastack", "fleet")
	lines := func() (func(string), func() string) {
		var mu sync.Mutex
		var b strings.Builder
		return func(s string) { mu.Lock(); b.WriteString(s + "\n"); mu.Unlock() },
			func() string { mu.Lock(); defer mu.Unlock(); return b.String() }
	}
	ctx := context.Background()

	a := newHarness(t, func(c *Config) { c.BlobStore = url })
	say, said := lines()
	if _, err := a.agent.EnsureTemplate(ctx, "base", say); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(said(), "published template base") {
		t.Fatalf("host A did not publish its bake:\n%s", said())
	}
	t.Logf("host A:\n%s", said())

	emptyCache := t.TempDir()
	b := newHarness(t, func(c *Config) { c.BlobStore = url; c.ImageCacheDir = emptyCache })
	say, said = lines()
	if _, err := b.agent.EnsureTemplate(ctx, "base", say); err != nil {
		t.Fatal(err)
	}
	if out := said(); !strings.Contains(out, "pulled template base") || strings.Contains(out, "image:") || strings.Contains(out, "cold boot") {
		t.Fatalf("host B did not come from a pull:\n%s", out)
	}
	t.Logf("host B:\n%s", said())
	sb := b.create()
	if r := b.exec(sb.ID, map[string]any{"cmd": "echo restored-from-a-pull"}); strings.TrimSpace(r.Stdout) != "restored-from-a-pull" || r.ExitCode != 0 {
		t.Fatalf("exec in a sandbox of the pulled template: %+v", r)
	}
	// A restart of B finds the pulled bake on disk: no second pull. (The sandbox goes first: an
	// adopted VMM is not this process's child, and the harness's cleanup could not wait for it
	// before unmounting the pool.)
	if code := b.call("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil); code != 204 {
		t.Fatalf("kill: status %d", code)
	}
	b.stop()
	b.start()
	say, said = lines()
	if _, err := b.agent.EnsureTemplate(ctx, "base", say); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(said(), "pulling") {
		t.Fatalf("a restarted host pulled its template again:\n%s", said())
	}

	// S3 gone during a publish: the snapshot is taken and answered (kept on this host, not
	// published) within bounds, nothing is left half-made (the doctor finds nothing, even with
	// no age threshold), and once S3 is back the next snapshot is published.
	t.Setenv(faultpoint.MinAgeEnv, "0")
	sb = a.create()
	srv.Stop()
	start := time.Now()
	var snap hostapi.Snapshot
	if code := a.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snap); code != 201 && code != 200 {
		t.Fatalf("a snapshot with S3 gone: status %d", code)
	}
	t.Logf("snapshot with S3 gone answered in %v", time.Since(start).Round(time.Millisecond))
	if snap.Published {
		t.Fatalf("a snapshot taken with S3 gone says it is published: %+v", snap)
	}
	var report hostapi.DoctorReport
	if code := a.call("GET", "/v1/doctor", nil, &report); code != 200 || len(report.Findings) != 0 {
		t.Fatalf("after a publish with S3 gone the doctor finds %+v (status %d)", report.Findings, code)
	}
	var child hostapi.Sandbox
	if code := a.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &child); code != 201 {
		t.Fatalf("restore of the unpublished snapshot on its host: status %d", code)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if code := a.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &snap); (code != 201 && code != 200) || !snap.Published {
		t.Fatalf("a snapshot once S3 is back: status %d, %+v", code, snap)
	}
}

// TestSnapshotsTravelThroughBlobStore holds two real agents sharing a blob store to the
// two-host contract (agenttest.RunTravel; TestTravelFake holds the fakes to it): a snapshot taken
// on one is restored on the other (plain and as a fork child) and a hibernated sandbox adopted
// there; here also the parent's running process is running in each, and the other host neither
// baked nor pulled the template to do it.
func TestSnapshotsTravelThroughBlobStore(t *testing.T) {
	t.Parallel()
	// A directory store: the S3 driver's credentials are process environment (t.Setenv), which a
	// parallel test cannot set; TestTemplatesTravelThroughBlobStore and blobtest cover S3.
	url := "file://" + t.TempDir()
	a := newHarness(t, func(c *Config) { c.BlobStore = url })
	b := newHarness(t, func(c *Config) { c.BlobStore = url })
	run := func(t *testing.T, c *agentclient.Client, id, cmd string) {
		t.Helper()
		if r, err := c.Exec(context.Background(), id, agentclient.ExecRequest{Cmd: cmd}); err != nil || r.ExitCode != 0 {
			t.Errorf("%s in %s: %+v %v", cmd, id, r, err)
		}
	}
	agenttest.RunTravel(t, agenttest.Target{Client: agentclient.New(a.srv.URL, "test-token"), Template: "base"},
		agenttest.Target{Client: agentclient.New(b.srv.URL, "test-token"), Template: "base"}, agenttest.GuestChecks{
			Prepare: func(t *testing.T, c *agentclient.Client, id string) {
				run(t, c, id, "(setsid sleep 3600 >/dev/null 2>&1 &)")
			},
			Alive: func(t *testing.T, c *agentclient.Client, id string) { run(t, c, id, "pgrep -x sleep") },
		})
	for name, tm := range b.templateNames() {
		if tm.Baked {
			t.Errorf("host B baked or pulled template %s to restore a snapshot", name)
		}
	}
}

// TestLazyRestore: a host with LazyRestore restores a snapshot it pulls with the memory served
// on demand (its "ram" a link into a FUSE mount served by a process of its own); the guest's
// memory is the parent's; the agent stops and starts again and the guest, whose 64 MiB of tmpfs
// were not read until then, still reads them whole (the server outlived the agent); a snapshot
// of the restored sandbox (full path: FUSE cannot reflink) restores too; freeing the snapshot
// ends the server.
func TestLazyRestore(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	url := "file://" + t.TempDir()
	a := newHarness(t, func(c *Config) { c.BlobStore = url })
	b := newHarness(t, func(c *Config) { c.BlobStore, c.LazyRestore = url, true })
	t.Cleanup(func() { // before the harness's: its VMs go, then their memory's server
		for _, sb := range b.agent.List() {
			b.agent.Kill(sb.ID)
		}
		mounts, _ := filepath.Glob(filepath.Join(b.dir, "lazy", "*"))
		for _, m := range mounts {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	})
	parent := a.create()
	r := a.exec(parent.ID, map[string]any{"cmd": "head -c 64M /dev/urandom > /dev/shm/big && sha256sum < /dev/shm/big", "user": "root"})
	if r.ExitCode != 0 {
		t.Fatalf("fill the parent: %+v", r)
	}
	sum := r.Stdout
	var snap hostapi.Snapshot
	if code := a.call("POST", "/v1/sandboxes/"+parent.ID+"/snapshots", nil, &snap); code != 201 && code != 200 {
		t.Fatalf("snapshot: status %d", code)
	}

	var sb hostapi.Sandbox
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &sb); code != 201 {
		t.Fatalf("restore on the lazy host: status %d", code)
	}
	ram := filepath.Join(b.agent.layout.Snapshots(), snap.ID, "ram")
	target, err := os.Readlink(ram)
	if err != nil {
		t.Fatalf("the pulled snapshot's memory is not served lazily: %v", err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(target, &fs); err != nil || fs.Type != 0x65735546 {
		t.Fatalf("%s -> %s is not on FUSE (%x, %v)", ram, target, fs.Type, err)
	}
	if fi, err := os.Stat(filepath.Dir(filepath.Dir(target))); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the lazy mounts' directory is %v (%v), want root only (0700)", fi.Mode().Perm(), err)
	}
	if r := b.exec(sb.ID, map[string]any{"cmd": "echo up"}); r.Stdout != "up\n" {
		t.Fatalf("exec in the lazily restored sandbox: %+v", r)
	}

	b.stop()
	b.start()
	if r := b.exec(sb.ID, map[string]any{"cmd": "sha256sum < /dev/shm/big", "user": "root"}); r.ExitCode != 0 || r.Stdout != sum {
		t.Fatalf("the parent's memory after an agent restart: %+v (want %q)", r, sum)
	}

	var child hostapi.Snapshot
	if code := b.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, &child); code != 201 && code != 200 {
		t.Fatalf("snapshot of the lazily restored sandbox: status %d", code)
	}
	var again hostapi.Sandbox
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": child.ID}, &again); code != 201 {
		t.Fatalf("restore of that snapshot: status %d", code)
	}
	if r := b.exec(again.ID, map[string]any{"cmd": "sha256sum < /dev/shm/big", "user": "root"}); r.Stdout != sum {
		t.Fatalf("memory of a snapshot of the lazily restored sandbox: %+v", r)
	}

	// A sandbox hibernated on A and published wakes on B with its memory served lazily; killing
	// it ends the serving.
	var hib hostapi.Sandbox
	if code := a.call("POST", "/v1/sandboxes/"+parent.ID+"/hibernate", nil, &hib); code != 200 || hib.Hibernated == "" {
		t.Fatalf("hibernate on A: status %d, publication %q", code, hib.Hibernated)
	}
	var adopted hostapi.Sandbox
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"id": parent.ID, "hibernated": hib.Hibernated}, &adopted); code != 201 {
		t.Fatalf("adopt on the lazy host: status %d", code)
	}
	mems, _ := filepath.Glob(filepath.Join(b.agent.layout.Sandboxes(), parent.ID, "mem-*", "ram"))
	if len(mems) != 1 {
		t.Fatalf("adopted sandbox's memory files: %v", mems)
	}
	adoptedMem, err := os.Readlink(mems[0])
	if err != nil || syscall.Statfs(adoptedMem, &fs) != nil || fs.Type != 0x65735546 {
		t.Fatalf("the adopted sandbox's memory is not served lazily: %s -> %s (%v)", mems[0], adoptedMem, err)
	}
	if r := b.exec(parent.ID, map[string]any{"cmd": "sha256sum < /dev/shm/big", "user": "root"}); r.ExitCode != 0 || r.Stdout != sum {
		t.Fatalf("the adopted sandbox's memory: %+v (want %q)", r, sum)
	}
	b.call("DELETE", "/v1/sandboxes/"+parent.ID, nil, nil)
	if err := syscall.Statfs(adoptedMem, &fs); err == nil && fs.Type == 0x65735546 {
		t.Errorf("the killed adopted sandbox's memory is still served")
	}

	// Freed: the sandboxes go, the snapshot is deleted; GC ends its server.
	for _, id := range []string{sb.ID, again.ID} {
		b.call("DELETE", "/v1/sandboxes/"+id, nil, nil)
	}
	b.call("DELETE", "/v1/snapshots/"+child.ID, nil, nil)
	if code := b.call("DELETE", "/v1/snapshots/"+snap.ID, nil, nil); code != 204 && code != 200 {
		t.Fatalf("delete the pulled snapshot: status %d", code)
	}
	b.agent.snapshots.GC()
	if _, err := os.Lstat(filepath.Dir(ram)); !os.IsNotExist(err) {
		t.Errorf("the freed snapshot's files are still there: %v", err)
	}
	if err := syscall.Statfs(target, &fs); err == nil && fs.Type == 0x65735546 {
		t.Errorf("the freed snapshot's memory is still served")
	}
}

// TestVolumeCopiesTravelThroughBlobStore: a snapshot and a hibernation of a sandbox with a volume
// carry a copy of it through the blob store. Host B, which never had the volume, restores the
// snapshot with a new volume made from the copy (the file host A's guest wrote, in its slot,
// already mounted) and adopts the hibernated sandbox with its volume under the same id; a
// published volume chunk that is corrupt fails the restore with an error naming the artifact and
// the chunk.
func TestVolumeCopiesTravelThroughBlobStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "file://" + dir
	a := newHarness(t, func(c *Config) { c.BlobStore = url })
	b := newHarness(t, func(c *Config) { c.BlobStore = url })
	src := a.createWithVolume("vol_travel")
	var raw []byte
	if r := a.exec(src.ID, map[string]any{"cmd": "echo from-a > /data/note && sync"}); r.ExitCode != 0 {
		t.Fatalf("write to the volume: %+v", r)
	}
	read := func(h *harness, id string) string {
		t.Helper()
		r := h.exec(id, map[string]any{"cmd": "grep -c ' /data ext4 ' /proc/mounts; cat /data/note"})
		if r.ExitCode != 0 {
			t.Fatalf("read in %s: %+v", id, r)
		}
		return strings.ReplaceAll(r.Stdout, "\n", " ")
	}

	var snap hostapi.Snapshot
	if code := a.call("POST", "/v1/sandboxes/"+src.ID+"/snapshots", nil, &snap); code != 201 || !snap.Published || len(snap.Volumes) != 1 {
		t.Fatalf("snapshot of a sandbox with a volume on a host with a blob store: %d %+v", code, snap)
	}
	var restored hostapi.Sandbox
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &raw); code != 201 {
		t.Fatalf("restore on host B: %d %s", code, raw)
	}
	jsonInto(t, raw, &restored)
	if len(restored.Volumes) != 1 || restored.Volumes[0].MountPath != "/data" || restored.Volumes[0].VolumeID == "vol_travel" {
		t.Fatalf("volumes of the restore on host B: %+v", restored.Volumes)
	}
	if got := read(b, restored.ID); got != "1 from-a " {
		t.Errorf("the restore on host B reads %q, want the volume mounted once with host A's note", got)
	}
	var v hostapi.Volume
	if code := b.call("GET", "/v1/volumes/"+restored.Volumes[0].VolumeID, nil, &v); code != 200 || len(v.Attachments) != 1 || v.Attachments[0].SandboxID != restored.ID {
		t.Errorf("host B's copy: %d %+v", code, v)
	}

	// A chunk of the volume copy that only a second snapshot has, corrupt in the store.
	if r := a.exec(src.ID, map[string]any{"cmd": "head -c 1M /dev/urandom > /data/fresh && sync"}); r.ExitCode != 0 {
		t.Fatalf("write to the volume: %+v", r)
	}
	var snap2 hostapi.Snapshot
	if code := a.call("POST", "/v1/sandboxes/"+src.ID+"/snapshots", nil, &snap2); code != 201 || !snap2.Published {
		t.Fatalf("second snapshot: %d %+v", code, snap2)
	}
	bs, err := blob.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m1, err1 := artifact.Get(ctx, bs, "snapshot", snap.ID)
	m2, err2 := artifact.Get(ctx, bs, "snapshot", snap2.ID)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	// The guest's working set travels with its memory: a pulling host reads it ahead.
	if !slices.ContainsFunc(m1.Files, func(f artifact.File) bool { return f.Path == snapshot.WorkingSetFile }) {
		t.Errorf("the published snapshot carries no %s: %+v", snapshot.WorkingSetFile, m1.Files)
	}
	old := map[string]bool{}
	for _, f := range m1.Files {
		for _, c := range f.Chunks {
			old[c] = true
		}
	}
	bad := ""
	for _, f := range m2.Files {
		if f.Path == volume.CopyFile(0) {
			for _, c := range f.Chunks {
				if c != "" && !old[c] {
					bad = c
				}
			}
		}
	}
	if bad == "" {
		t.Fatalf("the second snapshot's volume copy has no chunk the first lacks: %+v", m2.Files)
	}
	good, err := bs.Get(ctx, "chunks/"+bad)
	if err != nil {
		t.Fatal(err)
	}
	goodBytes, err := io.ReadAll(good)
	good.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Put(ctx, "chunks/"+bad, strings.NewReader("not the chunk")); err != nil {
		t.Fatal(err)
	}
	var e apiErr
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap2.ID}, &e); code < 400 ||
		!strings.Contains(e.Error.Message, "snapshot/"+snap2.ID) || !strings.Contains(e.Error.Message, bad) {
		t.Errorf("restore of a snapshot with a corrupt volume chunk: %d %+v, want an error naming snapshot/%s and chunk %s", code, e, snap2.ID, bad)
	}
	// Whole again (the hibernation below shares the chunk).
	if err := bs.Put(ctx, "chunks/"+bad, bytes.NewReader(goodBytes)); err != nil {
		t.Fatal(err)
	}

	// The hibernated sandbox, adopted on host B with its volume under the same id.
	var hib hostapi.Sandbox
	if code := a.call("POST", "/v1/sandboxes/"+src.ID+"/hibernate", nil, &hib); code != 200 || hib.Hibernated == "" {
		t.Fatalf("hibernate a sandbox with a volume on a host with a blob store: %d %+v (want a publication)", code, hib)
	}
	var moved hostapi.Sandbox
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"id": src.ID, "hibernated": hib.Hibernated}, &raw); code != 201 {
		t.Fatalf("adopt on host B: %d %s", code, raw)
	}
	jsonInto(t, raw, &moved)
	if len(moved.Volumes) != 1 || moved.Volumes[0].VolumeID != "vol_travel" || moved.Volumes[0].MountPath != "/data" {
		t.Fatalf("volumes of the adopted sandbox: %+v", moved.Volumes)
	}
	if r := b.exec(moved.ID, map[string]any{"cmd": "cat /data/note; test -s /data/fresh && echo fresh"}); r.Stdout != "from-a\nfresh\n" {
		t.Errorf("the adopted sandbox reads %+v", r)
	}
	if code := b.call("GET", "/v1/volumes/vol_travel", nil, &v); code != 200 || len(v.Attachments) != 1 || v.Attachments[0].SandboxID != moved.ID || v.SizeMiB != 64 {
		t.Errorf("host B's volume of the adopted sandbox: %d %+v", code, v)
	}
}
