package hostagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/jail"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/timing"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TestPreparedVMM: a create of a template takes the VMM prepared after the one before (no VMM
// spawned on its path), confined as any other and with its own egress policy; another is
// prepared after it; closing the agent ends the prepared one and leaves no file of it; a sandbox
// made from one survives an agent restart (whose doctor reclaims prepared VMMs' leftovers), and
// hibernates and wakes.
func TestPreparedVMM(t *testing.T) {
	h, out := newNetHarness(t, func(c *Config) { c.PreparedTemplates = 1 })
	if !h.agent.confined {
		t.Skip("an unconfined agent prepares no VMM (confinement needs root)")
	}
	ctx := context.Background()

	first := h.create() // bakes; nothing prepared yet
	if made, used := h.agent.PreparedCounts(); used != 0 {
		t.Fatalf("the first create took a prepared VMM (made %d, used %d)", made, used)
	}
	prepared := waitPrepared(t, h.agent)
	if !h.agent.rt.Alive(&runtime.VM{Pid: prepared}) {
		t.Fatalf("prepared VMM pid %d is not running", prepared)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", prepared))
	if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		t.Errorf("prepared VMM %d is not under QEMU's seccomp filter", prepared)
	}
	if h.agent.confined && !jail.IsJailed(prepared) {
		t.Errorf("prepared VMM %d is not jailed", prepared)
	}

	// The next create takes it: no VMM spawned, its pid is the prepared one, egress is its own.
	tr := timing.NewTrace()
	no := false
	sb, err := h.agent.Create(timing.With(ctx, tr), hostapi.CreateRequest{Template: "base",
		Egress: &network.Egress{Internet: &no, Allow: []string{out.Other.String() + "/32"}}})
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, s := range tr.Steps() {
		steps = append(steps, s.Name)
	}
	if !slices.Contains(steps, sandbox.StepPrepared) || slices.Contains(steps, runtime.StepSpawn) || slices.Contains(steps, sandbox.StepDiskClone) {
		t.Errorf("create steps %v: want %s and no %s nor %s", steps, sandbox.StepPrepared, runtime.StepSpawn, sandbox.StepDiskClone)
	}
	if sb.PID != prepared {
		t.Errorf("sandbox VMM pid %d, want the prepared %d", sb.PID, prepared)
	}
	if _, used := h.agent.PreparedCounts(); used != 1 {
		t.Errorf("creates that took a prepared VMM: %d, want 1", used)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "curl -sS --connect-timeout 3 -m 5 http://" + out.Other.String() + ":8080/"}); !strings.HasPrefix(r.Stdout, "outside ") {
		t.Errorf("allowed address not reached from the prepared VMM's sandbox: %q %q", r.Stdout, r.Stderr)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "curl -sS --connect-timeout 3 -m 5 http://" + out.Addr.String() + ":8080/"}); r.ExitCode == 0 {
		t.Errorf("the prepared VMM's sandbox reached %s with internet off: %q", out.Addr, r.Stdout)
	}
	// Its cgroup has the limits of the sandbox's, as one spawned for it would.
	if h.agent.confined {
		if got, want := cgroupMemoryMax(t, sb.PID), cgroupMemoryMax(t, first.PID); got != want {
			t.Errorf("memory limit of the prepared VMM's cgroup %q, want %q as a spawned one's", got, want)
		}
	}

	// Another is prepared; closing the agent ends it and leaves no file of it.
	next := waitPrepared(t, h.agent)
	if next == prepared {
		t.Fatalf("no new VMM was prepared after the create took %d", prepared)
	}
	h.stop()
	if syscall.Kill(next, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", next)); strings.Contains(string(st), "qemu") {
			t.Errorf("prepared VMM %d still runs after the agent closed", next)
		}
	}
	for _, pattern := range []string{filepath.Join(h.agent.sandboxesDir(), sandbox.PreparedPrefix+"*"), h.agent.runDir(sandbox.PreparedPrefix + "*")} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("prepared VMMs' files left after close: %v", left)
		}
	}

	// After a restart (its doctor runs at start) the sandbox made from a prepared VMM still runs.
	h.start()
	got, err := h.agent.Get(sb.ID)
	if err != nil || got.State != sandbox.StateRunning || got.PID != sb.PID {
		t.Fatalf("after restart: %+v, %v (pid before %d)", got, err, sb.PID)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "echo still"}); r.Stdout != "still\n" {
		t.Fatalf("after restart: exec printed %q %q", r.Stdout, r.Stderr)
	}
	if left := h.agent.PreparedVMMs(); len(left) != 0 {
		t.Errorf("prepared VMMs right after start, before any create: %v", left)
	}
	// Its memory can be saved: the VMM, jailed at the prepared run dir's path, is told to write
	// its device state into the run dir it sees (it was renamed to the sandbox's after it started).
	if _, err := h.agent.Hibernate(ctx, sb.ID); err != nil {
		t.Fatalf("hibernate the sandbox made from a prepared VMM: %v", err)
	}
	if _, err := h.agent.Wake(ctx, sb.ID); err != nil {
		t.Fatalf("wake: %v", err)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "echo awake"}); r.Stdout != "awake\n" {
		t.Fatalf("after the wake: exec printed %q %q", r.Stdout, r.Stderr)
	}
}

// waitPrepared waits for the one VMM prepared for base and returns its pid.
func waitPrepared(t *testing.T, a *Agent) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.WaitPrepared(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	vmms := a.PreparedVMMs()
	if len(vmms) != 1 {
		t.Fatalf("prepared VMMs %v, want one", vmms)
	}
	for _, pid := range vmms {
		return pid
	}
	return 0
}

// cgroupMemoryMax is the memory limit of pid's own cgroup (v2's memory.max, v1's limit_in_bytes).
func cgroupMemoryMax(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[1] == "":
			if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", f[2], "memory.max")); err == nil {
				return strings.TrimSpace(string(b))
			}
		case strings.Contains(f[1], "memory"):
			if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes")); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no memory limit found for pid %d in %q", pid, data)
	return ""
}

// TestPreparedVMMIdle: a prepared VMM no create takes within PreparedIdle is ended and its files
// removed; the template's next create then spawns its own VMM, works, and prepares another.
func TestPreparedVMMIdle(t *testing.T) {
	// Long enough that the prepared VMM is still there when looked up right after its
	// preparation; the test only waits for the expiry, it does not time it.
	const idle = 15 * time.Second
	h := newHarness(t, func(c *Config) { c.PreparedTemplates, c.PreparedIdle = 1, idle })
	if !h.agent.confined {
		t.Skip("an unconfined agent prepares no VMM (confinement needs root)")
	}
	ctx := context.Background()
	h.create() // bakes; prepares one after it
	prepared := waitPrepared(t, h.agent)
	var name string
	for n := range h.agent.PreparedVMMs() {
		name = n
	}
	if h.agent.PreparedExpired() != 0 {
		t.Fatalf("a prepared VMM expired before its idle time")
	}

	deadline := time.Now().Add(idle + 2*time.Minute)
	for h.agent.PreparedExpired() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("prepared VMM %s (pid %d) not ended %s after it was prepared: %v", name, prepared, idle+2*time.Minute, h.agent.PreparedVMMs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if left := h.agent.PreparedVMMs(); len(left) != 0 {
		t.Errorf("prepared VMMs after the expiry: %v", left)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", prepared)); err == nil && strings.Contains(string(st), "qemu") {
		t.Errorf("expired prepared VMM %d still runs", prepared)
	}
	for _, p := range []string{filepath.Join(h.agent.sandboxesDir(), name), h.agent.runDir(name)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("expired prepared VMM's %s left: %v", p, err)
		}
	}

	// The next create spawns its VMM (none is prepared), runs, and another is prepared after it.
	tr := timing.NewTrace()
	sb, err := h.agent.Create(timing.With(ctx, tr), hostapi.CreateRequest{Template: "base"})
	if err != nil {
		t.Fatalf("create after the prepared VMM expired: %v", err)
	}
	var steps []string
	for _, s := range tr.Steps() {
		steps = append(steps, s.Name)
	}
	if slices.Contains(steps, sandbox.StepPrepared) || !slices.Contains(steps, runtime.StepSpawn) {
		t.Errorf("create steps %v: want %s and no %s", steps, runtime.StepSpawn, sandbox.StepPrepared)
	}
	if sb.PID == prepared {
		t.Errorf("the create's VMM has the expired prepared VMM's pid %d", prepared)
	}
	if r := h.exec(sb.ID, map[string]any{"cmd": "echo spawned"}); r.Stdout != "spawned\n" {
		t.Errorf("exec after the create printed %q %q", r.Stdout, r.Stderr)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := h.agent.WaitPrepared(wctx, "base"); err != nil {
		t.Fatal(err)
	}
	if made, used := h.agent.PreparedCounts(); made != 2 || used != 0 {
		t.Errorf("prepared %d, taken %d: want 2 prepared (one after each create), none taken", made, used)
	}
}

// TestPreparedFork: a sandbox's second fork gives its first child the VMM prepared after the
// first fork (that child's VMM is the prepared one), and every child has the parent's memory and
// files of the second fork's instant, written after the preparation; the prepared child's memory
// is the fork snapshot's RAM file where it stays (its own snapshots are diffs, as a spawned
// child's); it hibernates and wakes; killing the parent ends the VMM prepared for its next fork
// and leaves no file of it.
func TestPreparedFork(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.PreparedTemplates = 1 })
	if !h.agent.confined {
		t.Skip("an unconfined agent prepares no VMM (confinement needs root)")
	}
	ctx := context.Background()
	parent := h.create()
	write := func(what string) {
		t.Helper()
		if r := h.exec(parent.ID, map[string]any{"cmd": "echo " + what + " > /dev/shm/mem; echo " + what + " > /root/disk", "user": "root"}); r.ExitCode != 0 {
			t.Fatalf("write in the parent: %+v", r)
		}
	}
	read := func(id string) string {
		t.Helper()
		return h.exec(id, map[string]any{"cmd": "cat /dev/shm/mem /root/disk", "user": "root"}).Stdout
	}
	// The VMM prepared for the parent's next fork.
	forkVMM := func() (string, int) {
		t.Helper()
		if err := h.agent.WaitForkPrepared(ctx, parent.ID); err != nil {
			t.Fatal(err)
		}
		name, pid, ok := h.agent.sandboxes.ForkPrepared(parent.ID)
		if !ok {
			t.Fatalf("no VMM prepared for the next fork of %s: %v", parent.ID, h.agent.PreparedVMMs())
		}
		return name, pid
	}

	write("first")
	if _, _, ok := h.agent.sandboxes.ForkPrepared(parent.ID); ok {
		t.Fatalf("a VMM prepared for the fork of a sandbox never forked")
	}
	if _, err := h.agent.Fork(ctx, parent.ID, 1); err != nil {
		t.Fatal(err)
	}
	_, pid := forkVMM()
	if !jail.IsJailed(pid) {
		t.Errorf("the VMM prepared for a fork (pid %d) is not jailed", pid)
	}
	write("second") // after the preparation: the next children must see it, memory and disk
	kids, err := h.agent.Fork(ctx, parent.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if kids[0].PID != pid {
		t.Errorf("first child's VMM pid %d, want the prepared %d", kids[0].PID, pid)
	}
	for _, k := range kids {
		if got := read(k.ID); got != "second\nsecond\n" {
			t.Errorf("child %s (pid %d) reads %q, want the parent's at the fork: second, second", k.ID, k.PID, got)
		}
	}
	// The prepared child's own snapshot is a diff against the fork's RAM file, as the spawned
	// child's is (a VMM that did not map its base where the record says would take the full
	// path: every page of its guest into the state).
	var dirty []int64
	for _, k := range kids {
		sn, err := h.agent.SnapshotSandbox(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		dirty = append(dirty, sn.DirtyBytes)
		h.agent.DeleteSnapshot(sn.ID)
	}
	t.Logf("copied by a snapshot of the prepared child %d MiB, of the spawned one %d MiB", dirty[0]>>20, dirty[1]>>20)
	if dirty[0] > 2*dirty[1]+(16<<20) {
		t.Errorf("snapshot of the prepared child copied %d bytes, of the spawned one %d: not a diff", dirty[0], dirty[1])
	}
	if _, err := h.agent.Hibernate(ctx, kids[0].ID); err != nil {
		t.Fatalf("hibernate the prepared child: %v", err)
	}
	if _, err := h.agent.Wake(ctx, kids[0].ID); err != nil {
		t.Fatalf("wake the prepared child: %v", err)
	}
	if got := read(kids[0].ID); got != "second\nsecond\n" {
		t.Errorf("the prepared child after a wake reads %q", got)
	}

	// Killing the parent ends the VMM prepared for its next fork; nothing of it is left.
	name, pid := forkVMM()
	if err := h.agent.Kill(parent.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.agent.PreparedVMMs()[name]; ok {
		t.Errorf("the VMM prepared for the fork of a killed sandbox is still listed")
	}
	if syscall.Kill(pid, 0) == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(st), "qemu") {
			t.Errorf("the VMM prepared for the fork of a killed sandbox (pid %d) still runs", pid)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(h.agent.sandboxesDir(), name)); len(left) > 0 {
		t.Errorf("files of the killed parent's prepared fork VMM left: %v", left)
	}
	dirs, _ := os.ReadDir(h.agent.snapshotsDir())
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(h.agent.snapshotsDir(), d.Name(), "snapshot.json")); err != nil {
			t.Errorf("a snapshot directory without its record is left: %s", d.Name())
		}
	}
}

// TestPreparedWake: a hibernated sandbox gets a VMM prepared for its next wake (jailed, mapping
// the hibernation's RAM file), and the wake takes it: the woken VMM is the prepared one and the
// guest has the memory and files of the hibernation; its next hibernation (a diff against that
// RAM file) and wake do the same. With one sandbox kept prepared, a second hibernation ends the
// first one's VMM, whose wake then spawns its own; killing a hibernated sandbox ends its
// prepared VMM.
func TestPreparedWake(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.PreparedTemplates = 1 })
	if !h.agent.confined {
		t.Skip("an unconfined agent prepares no VMM (confinement needs root)")
	}
	ctx := context.Background()
	write := func(id, what string) {
		t.Helper()
		if r := h.exec(id, map[string]any{"cmd": "echo " + what + " > /dev/shm/mem; echo " + what + " > /root/disk", "user": "root"}); r.ExitCode != 0 {
			t.Fatalf("write in %s: %+v", id, r)
		}
	}
	read := func(id string) string {
		t.Helper()
		return h.exec(id, map[string]any{"cmd": "cat /dev/shm/mem /root/disk", "user": "root"}).Stdout
	}
	hibernate := func(id string) (name string, pid int) {
		t.Helper()
		if _, err := h.agent.Hibernate(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := h.agent.WaitWakePrepared(ctx, id); err != nil {
			t.Fatal(err)
		}
		name, pid, ok := h.agent.sandboxes.WakePrepared(id)
		if !ok {
			t.Fatalf("no VMM prepared for the wake of %s: %v", id, h.agent.PreparedVMMs())
		}
		return name, pid
	}
	gone := func(name string, pid int, what string) {
		t.Helper()
		if _, ok := h.agent.PreparedVMMs()[name]; ok {
			t.Errorf("%s: the prepared VMM %s is still listed", what, name)
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(st), "qemu") {
			t.Errorf("%s: the prepared VMM (pid %d) still runs", what, pid)
		}
	}

	a := h.create()
	for _, what := range []string{"first", "second"} {
		write(a.ID, what)
		_, pid := hibernate(a.ID)
		if !jail.IsJailed(pid) {
			t.Errorf("the VMM prepared for a wake (pid %d) is not jailed", pid)
		}
		woken, err := h.agent.Wake(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if woken.PID != pid {
			t.Errorf("woken VMM pid %d, want the prepared %d", woken.PID, pid)
		}
		if got := read(a.ID); got != what+"\n"+what+"\n" {
			t.Errorf("after wake %s reads %q, want %s twice", a.ID, got, what)
		}
	}

	// One sandbox kept prepared: b's hibernation ends a's prepared VMM; a's wake spawns.
	nameA, pidA := hibernate(a.ID)
	b := h.create()
	write(b.ID, "b")
	nameB, pidB := hibernate(b.ID)
	gone(nameA, pidA, "a hibernated before the last one")
	woken, err := h.agent.Wake(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(a.ID); woken.PID == pidA || got != "second\nsecond\n" {
		t.Errorf("a woken with a spawned VMM: pid %d (the ended prepared one was %d), reads %q", woken.PID, pidA, got)
	}
	if err := h.agent.Kill(b.ID); err != nil {
		t.Fatal(err)
	}
	gone(nameB, pidB, "a killed hibernated sandbox")
}
