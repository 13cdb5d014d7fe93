package api

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/testenv"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// procOut is what a reader of a process's output saw.
type procOut struct {
	stdout, stderr string
	next           int64
	end            client.ProcessEvent
}

// readProc reads a process's output from off; stop (if not nil) ends the read early (the client
// drops the stream) once it returns true.
func readProc(t *testing.T, ctx context.Context, c *client.Client, id string, pid int, off int64, follow bool, stop func(procOut) bool) (procOut, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := procOut{next: off}
	var gap error
	stopped := false
	end, err := c.ProcessOutput(ctx, id, pid, off, follow, func(ev client.ProcessEvent) {
		if ev.Offset == nil || *ev.Offset != out.next {
			gap = fmt.Errorf("chunk at offset %v, want %d", ev.Offset, out.next)
		}
		if ev.Stdout != nil {
			out.stdout += *ev.Stdout
		} else {
			out.stderr += *ev.Stderr
		}
		out.next = *ev.Next
		if stop != nil && !stopped && stop(out) {
			stopped = true
			cancel()
		}
	})
	if gap != nil {
		t.Fatal(gap)
	}
	out.end = end
	if stopped { // the reader went away on purpose
		err = context.Canceled
	}
	if err == nil && end.Next != nil && *end.Next != out.next {
		t.Fatalf("end line says next %d, chunks ended at %d", *end.Next, out.next)
	}
	return out, err
}

func lines(s string) int { return strings.Count(s, "\n") }

// guestPids answers which of pids still exist in the guest (ps, not counting zombies).
func guestPids(t *testing.T, ctx context.Context, c *client.Client, id string, pids []int) string {
	t.Helper()
	var list []string
	for _, p := range pids {
		list = append(list, strconv.Itoa(p))
	}
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: "ps -o pid=,stat= -p " + strings.Join(list, ",") + " | grep -v ' Z' || true"})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(r.Stdout)
}

// e2eSandbox is a parallel VM test's setup: a host, a control plane over it, an admin client and
// one base sandbox created with env.
func e2eSandbox(t *testing.T, env map[string]string) (context.Context, *e2eCP, *client.Client, client.Sandbox) {
	testenv.NeedVMs(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	host := startVMHost(t)
	cp := startCP(t, filepath.Join(t.TempDir(), "state.db"), scheduler.Config{}, Config{}, host)
	c := cp.client(cp.admin)
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "base", TTLSeconds: 1800, Env: env})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return ctx, cp, c, sb
}

// TestE2EProcesses: background processes through the public API on a real microVM.
func TestE2EProcesses(t *testing.T) {
	ctx, cp, c, sb := e2eSandbox(t, map[string]string{"WHO": "sandbox"})
	start := func(req client.StartProcessRequest) int {
		t.Helper()
		pid, err := c.StartProcess(ctx, sb.ID, req)
		if err != nil || pid <= 0 {
			t.Fatalf("start %+v: %d %v", req, pid, err)
		}
		return pid
	}

	// Exits arrive as "process.exited" events: the host agent's look, its report, the store.
	exited := make(chan v1.ProcessExit, 64)
	// Its own context, ended by a cleanup that runs before the control plane's: the server's
	// Close waits for the stream to end.
	evCtx, evCancel := context.WithCancel(ctx)
	t.Cleanup(evCancel)
	go c.Events(evCtx, func(ev v1.Event) (bool, error) {
		if ev.Type == "process.exited" && ev.Process != nil {
			exited <- *ev.Process
		}
		return false, nil
	})

	// A process printing over time: a reader that drops mid-way and reconnects from its last
	// offset gets every line once; the exit code is listed after.
	pid := start(client.StartProcessRequest{Cmd: `for i in $(seq 1 30); do echo "line $i $WHO"; sleep 0.05; done; echo done >&2; exit 7`})
	first, err := readProc(t, ctx, c, sb.ID, pid, 0, true, func(o procOut) bool { return lines(o.stdout) >= 5 })
	if !errors.Is(err, context.Canceled) || lines(first.stdout) < 5 {
		t.Fatalf("first reader: %+v %v", first, err)
	}
	rest, err := readProc(t, ctx, c, sb.ID, pid, first.next, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d sandbox\n", i)
	}
	if first.stdout+rest.stdout != want.String() || first.stderr+rest.stderr != "done\n" {
		t.Fatalf("output across a reconnect: %q + %q (stderr %q + %q)", first.stdout, rest.stdout, first.stderr, rest.stderr)
	}
	if rest.end.ExitCode == nil || *rest.end.ExitCode != 7 {
		t.Fatalf("end line %+v, want exit 7", rest.end)
	}
	ps, err := c.ListProcesses(ctx, sb.ID)
	if err != nil || len(ps) != 1 || ps[0].Pid != pid || ps[0].State != "exited" || ps[0].ExitCode == nil || *ps[0].ExitCode != 7 {
		t.Fatalf("list after exit: %+v %v", ps, err)
	}
	select {
	case e := <-exited:
		if e.SandboxID != sb.ID || e.Pid != pid || e.ExitCode != 7 || e.Signal != "" {
			t.Fatalf("process.exited %+v, want pid %d of %s, exit 7", e, pid, sb.ID)
		}
	case <-ctx.Done(): // a hang guard, not a measure
		t.Fatal("no process.exited event")
	}

	// A tree: DELETE kills the process, its group and a child that left it; no orphan stays.
	tree := start(client.StartProcessRequest{Cmd: `sleep 600 & echo $!; setsid sleep 601 & echo $!; wait`})
	o, _ := readProc(t, ctx, c, sb.ID, tree, 0, true, func(o procOut) bool { return lines(o.stdout) >= 2 })
	pids := []int{tree}
	for _, f := range strings.Fields(o.stdout) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	if got := guestPids(t, ctx, c, sb.ID, pids); len(strings.Fields(got)) != 6 {
		t.Fatalf("before the kill, ps shows %q for %v", got, pids)
	}
	killed, err := c.KillProcess(ctx, sb.ID, tree)
	if err != nil || killed.State != "exited" || killed.Signal != "SIGKILL" {
		t.Fatalf("kill: %+v %v", killed, err)
	}
	for i := 0; guestPids(t, ctx, c, sb.ID, pids) != ""; i++ { // init reaps the orphans
		if i == 50 {
			t.Fatalf("after the kill, ps still shows %q", guestPids(t, ctx, c, sb.ID, pids))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A signal reaches the whole group.
	grp := start(client.StartProcessRequest{Cmd: `sleep 600 & echo $!; wait`})
	o, _ = readProc(t, ctx, c, sb.ID, grp, 0, true, func(o procOut) bool { return lines(o.stdout) >= 1 })
	child, _ := strconv.Atoi(strings.TrimSpace(o.stdout))
	if err := c.SignalProcess(ctx, sb.ID, grp, "TERM"); err != nil {
		t.Fatal(err)
	}
	if o, err := readProc(t, ctx, c, sb.ID, grp, 0, true, nil); err != nil || o.end.Signal != "SIGTERM" {
		t.Fatalf("after TERM: %+v %v", o.end, err)
	}
	for i := 0; guestPids(t, ctx, c, sb.ID, []int{child}) != ""; i++ {
		if i == 50 {
			t.Fatalf("TERM did not reach the group's child %d", child)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// stdin round trip.
	cat := start(client.StartProcessRequest{Argv: []string{"cat"}, Stdin: true})
	if err := c.WriteStdin(ctx, sb.ID, cat, "ping\n", false); err != nil {
		t.Fatal(err)
	}
	if o, _ := readProc(t, ctx, c, sb.ID, cat, 0, true, func(o procOut) bool { return o.stdout == "ping\n" }); o.stdout != "ping\n" {
		t.Fatalf("cat echoed %q", o.stdout)
	}
	if err := c.WriteStdin(ctx, sb.ID, cat, "pong\n", true); err != nil {
		t.Fatal(err)
	}
	if o, err := readProc(t, ctx, c, sb.ID, cat, 0, true, nil); err != nil || o.stdout != "ping\npong\n" || *o.end.ExitCode != 0 {
		t.Fatalf("cat after eof: %+v %v", o, err)
	}

	// Bad input is a clear 4xx.
	_, kb, err := c.CreateTeam(ctx, "e2e-proc-beta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown signal", c.SignalProcess(ctx, sb.ID, cat, "SEGV"), "400 invalid_request"},
		{"pid not started here", c.SignalProcess(ctx, sb.ID, 1, "TERM"), "404 not_found"},
		{"signal to an exited process", c.SignalProcess(ctx, sb.ID, cat, "TERM"), "409 conflict"},
		{"oversize stdin", c.WriteStdin(ctx, sb.ID, cat, strings.Repeat("x", 1<<20+1), false), "413 payload_too_large"},
		{"another team", cp.client(kb.Key).SignalProcess(ctx, sb.ID, cat, "TERM"), "404 not_found"},
		{"no command", func() error { _, err := c.StartProcess(ctx, sb.ID, client.StartProcessRequest{}); return err }(), "400 invalid_request"},
	} {
		if got := apiCode(tc.err); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if resp, err := c.Do(ctx, "GET", "/v1/sandboxes/"+sb.ID+"/processes/abc/output", nil, nil, -1, "", ""); apiCode(err) != "400 invalid_request" {
		if resp != nil {
			resp.Body.Close()
		}
		t.Errorf("pid abc: %v", err)
	}
	if _, err := c.ProcessOutput(ctx, sb.ID, cat, 1<<40, false, func(client.ProcessEvent) {}); apiCode(err) != "400 invalid_request" {
		t.Errorf("offset past the end: %v", err)
	}

	// A long-running process survives hibernate/wake and is running in a fork's child too.
	ticker := start(client.StartProcessRequest{Cmd: `i=0; while true; do i=$((i+1)); echo $i; sleep 0.2; done`})
	before, _ := readProc(t, ctx, c, sb.ID, ticker, 0, true, func(o procOut) bool { return lines(o.stdout) >= 2 })
	if _, err := c.Hibernate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	ps, err = c.ListProcesses(ctx, sb.ID) // wakes it
	if err != nil {
		t.Fatal(err)
	}
	if p := findProcess(ps, ticker); p == nil || p.State != "running" {
		t.Fatalf("after hibernate and wake: %+v", ps)
	}
	after, err := readProc(t, ctx, c, sb.ID, ticker, before.next, true, func(o procOut) bool { return lines(o.stdout) >= 3 })
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(after.stdout, strconv.Itoa(lines(before.stdout)+1)+"\n") {
		t.Fatalf("after wake the ticker went on with %q (before: %q): %v", after.stdout, before.stdout, err)
	}
	kids, err := c.Fork(ctx, sb.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	kps, err := c.ListProcesses(ctx, kids[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := findProcess(kps, ticker); p == nil || p.State != "running" {
		t.Fatalf("the fork's child lists %+v", kps)
	}
	grew, err := readProc(t, ctx, c, kids[0].ID, ticker, after.next, true, func(o procOut) bool { return lines(o.stdout) >= 2 })
	if !errors.Is(err, context.Canceled) || lines(grew.stdout) < 2 {
		t.Fatalf("the child's copy of the ticker: %q %v", grew.stdout, err)
	}
	if _, err := c.KillProcess(ctx, kids[0].ID, ticker); err != nil {
		t.Fatal(err)
	}
	// Killing the child's copy leaves the parent's running.
	if p := findProcess(mustList(t, ctx, c, sb.ID), ticker); p == nil || p.State != "running" {
		t.Fatalf("the parent's ticker after the child's was killed: %+v", p)
	}
}

func findProcess(ps []client.Process, pid int) *client.Process {
	for i := range ps {
		if ps[i].Pid == pid {
			return &ps[i]
		}
	}
	return nil
}

func mustList(t *testing.T, ctx context.Context, c *client.Client, id string) []client.Process {
	t.Helper()
	ps, err := c.ListProcesses(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
