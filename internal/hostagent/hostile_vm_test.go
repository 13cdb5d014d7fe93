package hostagent

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TestHostileGuests is the hostile-guest suite (docs/security.md): from inside sandboxes, each
// attack must be contained — the host agent and a bystander sandbox keep answering, the offender
// is limited or marked `error`, nothing on the host is harmed. On the host, every VMM is seen
// confined: its own uid, seccomp, a mount view of its own files only, its own cgroup.
func TestHostileGuests(t *testing.T) {
	// A 2 MiB output cap: endless output must reach it well within its 5 s exec timeout even on
	// a loaded machine (`yes` made 6 MB in 5 s under TCG beside the other VM tests: the 16 MiB
	// default was not reached, a flake).
	h := newHarness(t, func(c *Config) { c.ExecOutputLimit = 2 << 20 })
	bystander := h.create()
	stillFine := func(t *testing.T) {
		t.Helper()
		r := h.exec(bystander.ID, map[string]any{"cmd": "echo ok"})
		if r.Stdout != "ok\n" {
			t.Fatalf("bystander sandbox: %+v", r)
		}
		var list struct {
			Sandboxes []hostapi.Sandbox `json:"sandboxes"`
		}
		if code := h.call("GET", "/v1/sandboxes", nil, &list); code != 200 || len(list.Sandboxes) == 0 {
			t.Fatalf("agent list: %d %+v", code, list)
		}
	}
	offender := h.create()
	vmOf := func(id string) (pid int, cgroups []string) {
		vm, _, err := h.agent.sandboxes.Running(id)
		if err != nil {
			t.Fatal(err)
		}
		return vm.Pid, vm.Cgroups
	}

	t.Run("vmm_confined", func(t *testing.T) {
		pid, cgs := vmOf(offender.ID)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		base := h.agent.cfg.JailUIDBase
		for _, k := range []string{"Uid", "Gid"} {
			ids := strings.Fields(fields[k])
			for _, s := range ids {
				n, _ := strconv.Atoi(s)
				if n < base || len(ids) != 4 {
					t.Errorf("VMM %s: %q, want every id >= %d", k, fields[k], base)
				}
			}
		}
		if uid, _ := strconv.Atoi(strings.Fields(fields["Uid"])[0]); uid == base {
			t.Errorf("sandbox VMM runs as the bake uid %d, not a uid of its own", uid)
		}
		if fields["Groups"] != "" {
			t.Errorf("VMM keeps supplementary groups %q", fields["Groups"])
		}
		if fields["Seccomp"] != "2" || fields["NoNewPrivs"] != "1" || fields["CapEff"] != "0000000000000000" {
			t.Errorf("VMM: Seccomp %q NoNewPrivs %q CapEff %q, want 2, 1, none", fields["Seccomp"], fields["NoNewPrivs"], fields["CapEff"])
		}
		// Two sandboxes never share a uid.
		other, _ := vmOf(bystander.ID)
		st2, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", other))
		if strings.Contains(string(st2), "\nUid:\t"+fields["Uid"]+"\n") {
			t.Errorf("two sandboxes' VMMs share uid %s", fields["Uid"])
		}

		// Its mount view: an own root, QEMU's system files, a few /dev nodes, and this sandbox's
		// files (its run dir, disk, slot disks, and its template's kernel, initrd and RAM).
		own := func(p string) bool {
			return strings.Contains(p, offender.ID) || strings.HasPrefix(p, realPath(h.agent.templatesDir())+"/")
		}
		system := map[string]bool{"/": true, "/etc/ld.so.cache": true, "/usr/bin/qemu-system-x86_64": true,
			"/usr/lib/x86_64-linux-gnu": true, "/usr/lib64": true, "/usr/share/qemu": true, "/usr/share/seabios": true,
			"/dev/null": true, "/dev/zero": true, "/dev/random": true, "/dev/urandom": true}
		f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			mp := strings.Fields(sc.Text())[4]
			n++
			if !system[mp] && !own(mp) {
				t.Errorf("VMM mount view holds %s, which is not its own", mp)
			}
		}
		if n < 5 {
			t.Errorf("VMM mount view has %d mounts: not jailed?", n)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/%s", pid, realPath(h.agent.sandboxesDir())+"/"+bystander.ID)); err == nil {
			t.Errorf("the bystander's sandbox dir is visible in the offender's jail")
		}
		// Its descriptors: sockets, pipes, anonymous inodes, /dev nodes and its own files only.
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if strings.HasPrefix(target, "/") && !own(target) && !strings.HasPrefix(target, "/dev/") {
				t.Errorf("VMM fd %s -> %s, not its own", fd.Name(), target)
			}
		}
		// Its cgroup(s) carry the limits.
		if len(cgs) == 0 {
			t.Fatal("VMM has no cgroup")
		}
		limit := int64(offender.MemoryMiB+h.agent.cfg.VMMOverheadMiB) << 20
		if v, err := cgroup.Read(cgs, "memory.limit_in_bytes"); err == nil {
			if got, _ := strconv.ParseInt(v, 10, 64); got != limit {
				t.Errorf("memory limit %d, want %d", got, limit)
			}
		} else if v, err := cgroup.Read(cgs, "memory.max"); err != nil || v != strconv.FormatInt(limit, 10) {
			t.Errorf("memory.max %q (%v), want %d", v, err, limit)
		}
		procs, _ := cgroup.Read(cgs, "cgroup.procs")
		if !strings.Contains("\n"+procs+"\n", "\n"+strconv.Itoa(pid)+"\n") {
			t.Errorf("VMM pid %d not in its cgroup (procs %q)", pid, procs)
		}
	})

	t.Run("endless_output", func(t *testing.T) {
		r := h.exec(offender.ID, map[string]any{"cmd": "yes", "timeout_seconds": 5})
		if !r.TimedOut || !r.StdoutTruncated || int64(len(r.Stdout)) != h.agent.cfg.ExecOutputLimit {
			t.Fatalf("endless output: timed_out=%v truncated=%v %d bytes", r.TimedOut, r.StdoutTruncated, len(r.Stdout))
		}
		stillFine(t)
	})

	t.Run("exec_flood", func(t *testing.T) {
		const n = 200
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var raw map[string]any
				codes[i] = h.call("POST", "/v1/sandboxes/"+offender.ID+"/exec", map[string]any{"cmd": "echo " + strconv.Itoa(i)}, &raw)
			}()
		}
		stillFine(t) // while the flood runs
		wg.Wait()
		ok := 0
		for _, c := range codes {
			if c == 200 {
				ok++
			} else if c < 400 {
				t.Errorf("flood call answered %d", c)
			}
		}
		t.Logf("exec flood: %d of %d calls ran", ok, n)
		stillFine(t)
		if r := h.exec(offender.ID, map[string]any{"cmd": "echo after"}); r.Stdout != "after\n" {
			t.Fatalf("offender after the flood: %+v", r)
		}
	})

	t.Run("channel_garbage", func(t *testing.T) {
		// Root in the guest writes random bytes at the agent's virtio port, by its node and
		// through the agent's own descriptor. The port admits one opener: the kernel refuses.
		r := h.exec(offender.ID, map[string]any{"user": "root", "cmd": `
			for n in /sys/class/virtio-ports/*; do
				[ "$(cat $n/name)" = pandastack.agent ] || continue
				dev=/dev/$(basename $n)
				head -c 1048576 /dev/urandom > $dev && echo "wrote $dev"
				for fd in /proc/*/fd/*; do
					[ "$(readlink $fd)" = "$dev" ] && head -c 1048576 /dev/urandom > $fd && echo "wrote $fd"
				done
			done; true`})
		t.Logf("garbage writes: %q %q", r.Stdout, r.Stderr)
		// Whatever got through, the host side survives: the offender answers, or fails cleanly.
		var raw map[string]any
		code := h.call("POST", "/v1/sandboxes/"+offender.ID+"/exec", map[string]any{"cmd": "echo alive", "timeout_seconds": 30}, &raw)
		t.Logf("offender after garbage: %d %v", code, raw)
		if code != 200 && code < 400 {
			t.Fatalf("offender after garbage: %d %v", code, raw)
		}
		stillFine(t)
	})

	t.Run("disk_filler", func(t *testing.T) {
		filler := h.create()
		disk := filepath.Join(h.agent.sandboxesDir(), filler.ID, "disk.img")
		before, err := os.Stat(disk)
		if err != nil {
			t.Fatal(err)
		}
		var r hostapi.ExecResult
		code := h.call("POST", "/v1/sandboxes/"+filler.ID+"/exec", map[string]any{"user": "root", "timeout_seconds": 600,
			"cmd": "dd if=/dev/zero of=/var/fill bs=1M 2>&1 | grep -E 'No space|copied'; sync; df -B1M / | tail -1"}, &r)
		var got hostapi.Sandbox
		h.call("GET", "/v1/sandboxes/"+filler.ID, nil, &got)
		switch {
		case code == 200 && strings.Contains(r.Stdout, "No space left"):
			t.Logf("guest saw ENOSPC: %s", r.Stdout)
		case got.State == sandbox.StateError && strings.Contains(got.Error, "killed"):
			// The VMM outgrew its cgroup's memory limit while the guest wrote: contained, not fine.
			t.Logf("filler's VMM was ended by its cgroup: %s", got.Error)
		default:
			t.Fatalf("disk filler: status %d %+v; sandbox %s %q", code, r, got.State, got.Error)
		}
		after, err := os.Stat(disk)
		if err != nil {
			t.Fatal(err)
		}
		if after.Size() != before.Size() || layout.Allocated(after) > before.Size() {
			t.Fatalf("disk clone grew: %d -> %d bytes (allocated %d)", before.Size(), after.Size(), layout.Allocated(after))
		}
		t.Logf("host clone: %d MiB, %d MiB allocated", before.Size()>>20, layout.Allocated(after)>>20)
		stillFine(t)
	})

	t.Run("memory_hog", func(t *testing.T) {
		pid, cgs := vmOf(offender.ID)
		var r map[string]any
		code := h.call("POST", "/v1/sandboxes/"+offender.ID+"/exec", map[string]any{"user": "root", "timeout_seconds": 300,
			"cmd": "python3 -c 'a=[]\nwhile True: a.append(bytearray(16<<20))'; echo exit=$?"}, &r)
		// The guest's OOM killer ends the hog (the call answers), or takes the call's process
		// with it (the call fails cleanly); the VMM stays within its cgroup either way.
		t.Logf("memory hog: %d %v", code, r)
		if code != 200 && code < 400 {
			t.Fatalf("memory hog call: %d", code)
		}
		limit := int64(offender.MemoryMiB+h.agent.cfg.VMMOverheadMiB) << 20
		peak, err := cgroup.Read(cgs, "memory.max_usage_in_bytes")
		if err != nil {
			peak, err = cgroup.Read(cgs, "memory.peak")
		}
		p, _ := strconv.ParseInt(peak, 10, 64)
		if err != nil || p == 0 || p > limit {
			t.Fatalf("VMM cgroup peak %q (%v), limit %d", peak, err, limit)
		}
		t.Logf("VMM memory peak %d MiB (limit %d MiB); RSS now %s", p>>20, limit>>20, rss(pid))
		// A VMM squeezed at its cgroup limit can leave the guest unable to answer for a while:
		// calls then fail in bounded time (guest_unreachable, guest.ReplyTimeout) until the guest
		// recovers or the sandbox turns error. It must do one or the other.
		start := time.Now()
		for {
			var after map[string]any
			code = h.call("POST", "/v1/sandboxes/"+offender.ID+"/exec", map[string]any{"cmd": "echo after", "timeout_seconds": 60}, &after)
			var got hostapi.Sandbox
			h.call("GET", "/v1/sandboxes/"+offender.ID, nil, &got)
			if code == 200 && after["stdout"] == "after\n" || got.State == sandbox.StateError {
				t.Logf("offender after the hog: %d, state %s, %v after the hog", code, got.State, time.Since(start).Round(time.Second))
				break
			}
			errCode, _ := after["error"].(map[string]any)
			if code != http.StatusBadGateway || errCode["code"] != "guest_unreachable" || time.Since(start) > 3*time.Minute {
				t.Fatalf("offender after the hog: %d %v, state %s", code, after, got.State)
			}
			t.Logf("offender not answering yet (%v): %v", time.Since(start).Round(time.Second), after["error"])
		}
		stillFine(t)
	})

	t.Run("fork_bomb", func(t *testing.T) {
		offender := h.create()
		_, cgs := vmOf(offender.ID)
		if r := h.exec(offender.ID, map[string]any{"cmd": "awk '/^Max processes/ {print $3}' /proc/self/limits"}); strings.TrimSpace(r.Stdout) != strconv.Itoa(guest.MaxUserProcs) {
			t.Fatalf("the sandbox user's process cap: %q, want %d", r.Stdout, guest.MaxUserProcs)
		}
		var raw map[string]any
		code := h.call("POST", "/v1/sandboxes/"+offender.ID+"/exec", map[string]any{"cmd": "b(){ b|b& }; b", "timeout_seconds": 20}, &raw)
		t.Logf("fork bomb: %d %v", code, raw)
		stillFine(t)
		// The bomb lives in the guest kernel; on the host the VMM's threads stay bounded.
		threads, _ := cgroup.Read(cgs, "pids.current")
		t.Logf("VMM tasks on the host: %s (pids.max %d)", threads, 256)
		if n, _ := strconv.Atoi(threads); n == 0 || n > 256 {
			t.Fatalf("VMM tasks %q", threads)
		}
		// The bomb stays inside the offender: its user's processes are capped in the guest
		// (guest.MaxUserProcs), but a 1-vCPU guest busy at the cap may not run anything else in
		// good time, so the offender is not required to recover — only to be limited and to die
		// when killed, freeing its VMM.
		pid, _ := vmOf(offender.ID)
		if code := h.call("DELETE", "/v1/sandboxes/"+offender.ID, nil, nil); code != 204 {
			t.Fatalf("kill the fork-bombed sandbox: %d", code)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Fatalf("the fork-bombed sandbox's VMM %d outlived its kill", pid)
		}
		stillFine(t)
	})

	t.Run("kernel_panic", func(t *testing.T) {
		victim := h.create()
		triggerPanic(t, h, victim.ID)
		got := waitState(t, h, victim.ID, sandbox.StateError)
		if !strings.Contains(got.Error, "panic") {
			t.Fatalf("panic reason: %q", got.Error)
		}
		stillFine(t)
	})
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func rss(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "?"
}
