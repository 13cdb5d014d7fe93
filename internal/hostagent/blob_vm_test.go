package hostagent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/pandastack/pandastack/internal/blob/blobtest"
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
}

// TestSnapshotsTravelThroughBlobStore: a snapshot taken on a host with a blob store is published; another host that has neither the
// snapshot nor its template restores it after pulling it: the files and the running processes
// are the parent's. A second restore there uses the pulled copy; an id in no store is a 404.
func TestSnapshotsTravelThroughBlobStore(t *testing.T) {
	t.Parallel()
	// A directory store: the S3 driver's credentials are process environment (t.Setenv), which a
	// parallel test cannot set; TestTemplatesTravelThroughBlobStore and blobtest cover S3.
	url := "file://" + t.TempDir()

	a := newHarness(t, func(c *Config) { c.BlobStore = url })
	parent := a.create()
	if r := a.exec(parent.ID, map[string]any{"cmd": "echo from-host-a > /tmp/mark && (setsid sleep 3600 >/dev/null 2>&1 &)"}); r.ExitCode != 0 {
		t.Fatalf("prepare the parent: %+v", r)
	}
	var snap hostapi.Snapshot
	if code := a.call("POST", "/v1/sandboxes/"+parent.ID+"/snapshots", nil, &snap); code != 201 && code != 200 {
		t.Fatalf("snapshot: status %d", code)
	}
	if !snap.Published {
		t.Fatalf("a host with a blob store did not publish its snapshot: %+v", snap)
	}

	b := newHarness(t, func(c *Config) { c.BlobStore = url })
	for i := range 2 {
		var sb hostapi.Sandbox
		if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": snap.ID}, &sb); code != 201 {
			t.Fatalf("restore %d of a published snapshot on another host: status %d", i, code)
		}
		r := b.exec(sb.ID, map[string]any{"cmd": "cat /tmp/mark && pgrep -x sleep >/dev/null && echo sleeper-alive"})
		if r.ExitCode != 0 || r.Stdout != "from-host-a\nsleeper-alive\n" {
			t.Fatalf("restore %d on host B: %+v", i, r)
		}
	}
	for name, tm := range b.templateNames() {
		if tm.Baked {
			t.Errorf("host B baked or pulled template %s to restore a snapshot", name)
		}
	}
	if code := b.call("POST", "/v1/sandboxes", map[string]any{"snapshot_id": "snap_nowhere"}, nil); code != 404 {
		t.Errorf("a snapshot in no store: status %d, want 404", code)
	}
}
