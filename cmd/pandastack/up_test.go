package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestMain lets a test run the binary's main in a child process: the test binary itself, with
// PANDASTACK_TEST_MAIN=1 and the CLI's arguments.
func TestMain(m *testing.M) {
	if os.Getenv("PANDASTACK_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mountedAt reports whether something is mounted at dir.
func mountedAt(t *testing.T, dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// loopsOf lists the loop devices backed by file.
func loopsOf(file string) []string {
	out, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", file).Output()
	return strings.Fields(string(out))
}

// upProcess is `pandastack up` running in a child process (see TestMain).
type upProcess struct {
	cmd    *exec.Cmd
	stdout strings.Builder // the banner, then the rest once wait has read it
	stderr testenv.SyncBuffer
	out    io.Reader
}

// startUp starts `up` on dir with key (no bake, no network, a poolGiB disk pool) and returns once
// its banner says it is up.
// extra are more flags (a later one wins: "--network=true" turns the network on).
func startUp(t *testing.T, dir, key string, poolGiB int, extra ...string) *upProcess {
	t.Helper()
	args := append([]string{"up", "--data-dir", dir, "--addr", "127.0.0.1:0", "--bake", "",
		"--pool-gib", strconv.Itoa(poolGiB), "--network=false", "--guest-agent", testenv.GuestAgent(t), "--image-cache", testenv.ImageCache()}, extra...)
	u := &upProcess{cmd: exec.Command(os.Args[0], args...)}
	u.cmd.Env = append(os.Environ(), "PANDASTACK_TEST_MAIN=1", "PANDASTACK_API_KEY="+key)
	u.cmd.Stderr = &u.stderr
	var err error
	if u.out, err = u.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(u.out)
		for sc.Scan() {
			u.stdout.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "sandbox exec") { // the banner's last line: up is up
				break
			}
		}
		close(started)
	}()
	select {
	case <-started:
	case <-time.After(120 * time.Second):
		// SIGQUIT: Go's runtime prints every goroutine's stack, which shows where up waits.
		u.cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { u.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			u.cmd.Process.Kill()
			<-done
		}
		t.Fatalf("up did not start in 120 s:\n%s\n%s", u.stdout.String(), u.stderr.String())
	}
	if !strings.Contains(u.stdout.String(), "PandaStack is up.") {
		u.cmd.Process.Kill()
		u.cmd.Wait()
		t.Fatalf("up did not print its banner:\n%s\n%s", u.stdout.String(), u.stderr.String())
	}
	return u
}

// baseURL is the URL the banner printed.
func (u *upProcess) baseURL(t *testing.T) string {
	for _, f := range strings.Fields(u.stdout.String()) {
		if strings.HasPrefix(f, "http://") {
			return f
		}
	}
	t.Fatalf("no URL in the banner:\n%s", u.stdout.String())
	return ""
}

// wait waits (at most 2 minutes) for up to exit, once told to, and returns how it ended.
func (u *upProcess) wait(t *testing.T) error {
	t.Helper()
	exited := make(chan error, 1)
	go func() { io.Copy(&u.stdout, u.out); exited <- u.cmd.Wait() }()
	select {
	case err := <-exited:
		return err
	case <-time.After(120 * time.Second):
		u.cmd.Process.Kill()
		t.Fatalf("up did not stop:\n%s", u.stderr.String())
		return nil
	}
}

// upDataDir is a data dir for `up`, an operator's key, and the paths of the disk pool up will
// make there (its mount point and image), which cleanup unmounts and detaches whatever a failure
// left (off the shared machine).
func upDataDir(t *testing.T) (dir, key, pool, img string) {
	dir = t.TempDir()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	pool, img = filepath.Join(dir, "agent", "pool"), filepath.Join(dir, "agent", "pool.xfs")
	t.Cleanup(func() {
		if mountedAt(t, pool) {
			syscall.Unmount(pool, 0)
		}
		for _, dev := range loopsOf(img) {
			exec.Command("losetup", "-d", dev).Run()
		}
	})
	return dir, key, pool, img
}

// `up` with an operator's key never prints it, and a clean SIGTERM with no sandboxes leaves no
// loop-mounted pool and no cgroup folder behind.
func TestUpHygiene(t *testing.T) {
	testenv.NeedVMs(t) // root: loop devices, mounts, cgroups
	dir, key, pool, img := upDataDir(t)
	var cgroups []string
	t.Cleanup(func() {
		for i := len(cgroups) - 1; i >= 0; i-- {
			syscall.Rmdir(cgroups[i])
		}
	})

	u := startUp(t, dir, key, 1)
	cmd, stdout, stderr := u.cmd, &u.stdout, &u.stderr

	// Running: the pool is a loop mount and the agent has its cgroups.
	if !mountedAt(t, pool) || len(loopsOf(img)) == 0 {
		t.Errorf("while up runs, %s is not a loop-mounted pool", pool)
	}
	cgroups = testenv.AgentCgroups(filepath.Join(dir, "agent"))
	if len(cgroups) == 0 {
		t.Errorf("while up runs, no cgroup of its agent is found:\n%s", stderr.String())
	}
	t.Logf("pool %s, cgroups %v", pool, cgroups)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := u.wait(t); err != nil {
		t.Errorf("up after SIGTERM: %v", err)
	}

	all := stdout.String() + stderr.String()
	if strings.Contains(all, key) || strings.Contains(all, key[len(auth.KeyPrefix)+8:]) {
		t.Errorf("up printed the API key from PANDASTACK_API_KEY:\n%s", all)
	}
	if !strings.Contains(stdout.String(), auth.DisplayPrefix(key)+"…") {
		t.Errorf("the banner does not name the key by its prefix:\n%s", stdout.String())
	}
	if mountedAt(t, pool) {
		t.Errorf("after a clean stop %s is still mounted", pool)
	}
	if loops := loopsOf(img); len(loops) > 0 {
		t.Errorf("after a clean stop %s is still attached to %v", img, loops)
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("after a clean stop the cgroup %s is still there", d)
		}
	}
}
