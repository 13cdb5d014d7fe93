package hostagent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/agentclient/agenttest"
	"github.com/pandastack/pandastack/internal/blob/blobtest"
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
