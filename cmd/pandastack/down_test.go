package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/testenv"
)

// `down` stops `up` and leaves its sandboxes running (the next `up` re-adopts them); `down
// --kill-sandboxes` kills every sandbox first, and the disk pool is released.
func TestDown(t *testing.T) {
	testenv.NeedVMs(t) // root: loop devices, mounts, VMs
	dir, key, pool, img := upDataDir(t)
	var u *upProcess
	t.Cleanup(func() { // runs before upDataDir's: up releases the pool itself if it can
		if u != nil && u.cmd.ProcessState == nil {
			u.cmd.Process.Signal(syscall.SIGUSR2) // kill its sandboxes, then stop
			u.wait(t)
		}
	})
	t.Setenv("PANDASTACK_API_KEY", key)
	upAgain := func() {
		u = startUp(t, dir, key, 4) // room to bake base
		t.Setenv("PANDASTACK_BASE_URL", u.baseURL(t))
	}
	down := func(want string, args ...string) {
		t.Helper()
		out, stderr, code := runMain(t, append([]string{"down", "--data-dir", dir}, args...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("down %v: exit %d, %q %s", args, code, out, stderr)
		}
		if err := u.wait(t); err != nil {
			t.Fatalf("up after down %v: %v\n%s", args, err, u.stderr.String())
		}
		if _, err := os.Stat(app.PIDFile(dir)); !os.IsNotExist(err) {
			t.Errorf("after down %v the pid file is still there: %v", args, err)
		}
	}

	upAgain()
	out, stderr, code := runMain(t, "sandbox", "create", "-q")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb_") {
		t.Fatalf("create: %d %s\n%s", code, stderr, u.stderr.String())
	}

	down("its sandboxes keep running")
	if _, stderr, code := runMain(t, "down", "--data-dir", dir); code != 0 || !strings.Contains(stderr, "nothing to stop") {
		t.Errorf("down with no up: %d %s", code, stderr)
	}
	upAgain() // re-adopts the sandbox: it still answers
	if out, stderr, code := runMain(t, "sandbox", "exec", id, "echo alive"); code != 0 || out != "alive\n" {
		t.Fatalf("exec after down and up: %d %q %s", code, out, stderr)
	}

	down("every sandbox was killed", "--kill-sandboxes")
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if sb, err := st.GetSandbox(context.Background(), id); err != nil || sb.State != store.StateKilled {
		t.Errorf("after down --kill-sandboxes the sandbox is %s (%v)", sb.State, err)
	}
	// A pool busy past its close is detached lazily (storage.Pool.Close): its loop device goes
	// when the last holder does, such as a mount namespace another test's process made
	// meanwhile. A bounded wait for that, not a measure.
	for i := 0; mountedAt(t, pool) || len(loopsOf(img)) > 0; i++ {
		if i == 600 {
			t.Errorf("after down --kill-sandboxes the pool %s is still mounted (%v) or its image attached (%v)", pool, mountedAt(t, pool), loopsOf(img))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, stderr, code := runMain(t, "down", "--data-dir", dir, "--kill-sandboxes"); code == 0 || !strings.Contains(stderr, "start it") {
		t.Errorf("down --kill-sandboxes with no up: %d %s", code, stderr)
	}
}
