package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/faultpoint"
	"github.com/pandastack/pandastack/internal/testenv"
)

// op is an operation a case interrupts: prep (run before the fault, on a healthy system) returns
// the call to interrupt; that call returns the sandboxes it acknowledged (a 201).
type op struct {
	name string
	prep func(ctx context.Context, c *cluster) func(ctx context.Context) ([]string, error)
	// points: where the server and the agent are killed (none: not a case for that process).
	server, agent string
}

// ops are the operations of the suite, each killed in the server and in the agent.
var ops = []op{
	{name: "create", server: "server.create.started", agent: "agent.launch.create",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			return func(ctx context.Context) ([]string, error) {
				return c.create(ctx, client.CreateRequest{Template: "base"})
			}
		}},
	{name: "fork", server: "server.fork.started", agent: "agent.launch.fork",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			parent := c.mustCreate(ctx, client.CreateRequest{Template: "base"})
			return func(ctx context.Context) ([]string, error) {
				kids, err := c.c.Fork(ctx, parent, 2)
				return ids(kids), err
			}
		}},
	{name: "snapshot", server: "server.snapshot.taken", agent: "agent.snapshot.written",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			sb := c.mustCreate(ctx, client.CreateRequest{Template: "base"})
			return func(ctx context.Context) ([]string, error) {
				_, err := c.c.CreateSnapshot(ctx, sb)
				return nil, err
			}
		}},
	{name: "volume attach", server: "server.create.started", agent: "agent.launch.create",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			v, err := c.c.CreateVolume(ctx, 64, "")
			if err != nil {
				c.t.Fatal(err)
			}
			c.volumes = append(c.volumes, v.ID)
			return func(ctx context.Context) ([]string, error) {
				return c.create(ctx, client.CreateRequest{Template: "base", Volumes: []client.VolumeMount{{VolumeID: v.ID, MountPath: "/mnt/v"}}})
			}
		}},
	{name: "template build", server: "server.template.built", agent: "agent.bake.booted",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			c.builds++
			spec := fmt.Sprintf(`{"name": "fault%d", "from": "base", "env": {"FAULT": "%d"}}`, c.builds, c.builds)
			return func(ctx context.Context) ([]string, error) {
				_, err := c.c.BuildTemplate(ctx, []byte(spec), nil)
				return nil, err
			}
		}},
	{name: "hibernate", agent: "agent.hibernate.saved",
		prep: func(ctx context.Context, c *cluster) func(context.Context) ([]string, error) {
			sb := c.mustCreate(ctx, client.CreateRequest{Template: "base"})
			return func(ctx context.Context) ([]string, error) {
				_, err := c.c.Hibernate(ctx, sb)
				return nil, err
			}
		}},
}

func ids(sbs []client.Sandbox) []string {
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func (c *cluster) create(ctx context.Context, req client.CreateRequest) ([]string, error) {
	req.TTLSeconds = 3600
	sb, err := c.c.CreateSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	return []string{sb.ID}, nil
}

// mustCreate creates a sandbox the test acknowledges (it must survive every later fault).
func (c *cluster) mustCreate(ctx context.Context, req client.CreateRequest) string {
	c.t.Helper()
	got, err := c.create(ctx, req)
	if err != nil {
		c.t.Fatalf("create: %v", err)
	}
	c.acked = append(c.acked, got...)
	return got[0]
}

// TestFaults SIGKILLs the server, then the host agent, in the middle of each operation, restarts
// it and checks the system converges; then fills the host's disk during a snapshot. One cluster
// (one bake of base) runs the cases one after another: each kill would disturb a neighbour's.
func TestFaults(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c.mustCreate(ctx, client.CreateRequest{Template: "base"}) // bakes base once for every case
	c.converge(ctx, "start")
	costs := map[string][]string{}
	for _, which := range []string{"server", "agent"} {
		for _, o := range ops {
			point := o.server
			if which == "agent" {
				point = o.agent
			}
			if point == "" {
				continue
			}
			name := which + " killed during " + o.name
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
				c.t = t
				defer func() { c.t = nil }()
				call := o.prep(ctx, c)
				c.restart(which, faultpoint.PauseEnv+"="+point)
				type result struct {
					ids []string
					err error
				}
				done := make(chan result, 1)
				go func() {
					got, err := call(ctx)
					done <- result{got, err}
				}()
				victim := c.proc(which)
				deadline := time.After(10 * time.Minute)
				for !strings.Contains(victim.out.String(), faultpoint.Paused+point) {
					select {
					case r := <-done:
						t.Fatalf("%s: the call ended (%v) before %s reached %s:\n%s", name, r.err, which, point, c.logs())
					case <-victim.done:
						t.Fatalf("%s: %s exited before %s:\n%s", name, which, point, c.logs())
					case <-deadline:
						t.Fatalf("%s: %s did not reach %s:\n%s", name, which, point, c.logs())
					case <-time.After(50 * time.Millisecond):
					}
				}
				victim.kill()
				if which == "server" {
					c.startServer()
				} else {
					c.startAgent()
				}
				r := <-done
				if r.err == nil {
					c.acked = append(c.acked, r.ids...) // acknowledged: it must exist from now on
				}
				t.Logf("%s: the call answered %v (acknowledged %v)", name, r.err, r.ids)
				costs[name] = c.converge(ctx, name)
			})
		}
	}
	t.Run("disk_full_during_snapshot", func(t *testing.T) {
		c.t = t
		costs["disk full during a snapshot"] = c.diskFull(ctx)
	})
	var lines []string
	for name, found := range costs {
		lines = append(lines, fmt.Sprintf("%-40s %s", name, strings.Join(found, "; ")))
	}
	sort.Strings(lines)
	t.Logf("what each fault left for the doctor:\n%s", strings.Join(lines, "\n"))
}

// diskFull holds the agent's snapshot once its room is admitted, fills the pool, lets it go on:
// the snapshot fails with the disk full, and nothing of it is left; the sandbox keeps running and
// a snapshot works once there is room again.
func (c *cluster) diskFull(ctx context.Context) []string {
	t := c.t
	sb := c.mustCreate(ctx, client.CreateRequest{Template: "base"})
	release := filepath.Join(c.dir, "release")
	c.restart("agent", faultpoint.HoldEnv+"=agent.snapshot.admitted:"+release)
	done := make(chan error, 1)
	go func() {
		_, err := c.c.CreateSnapshot(ctx, sb)
		done <- err
	}()
	c.agent.waitFor(t, faultpoint.Held+"agent.snapshot.admitted", 5*time.Minute)
	pool := filepath.Join(c.agentDir, "pool")
	var fills []string
	// Allocated, not written: the pool fills, its sparse file on the host's disk does not grow.
	// Smaller and smaller files take what is left, to the last block.
	size := int64(1) << 40
	for i := 0; size >= 4096 && i < 200; i++ {
		var st syscall.Statfs_t
		if err := syscall.Statfs(pool, &st); err != nil {
			t.Fatal(err)
		}
		size = min(size, int64(st.Bavail)*st.Bsize)
		if size < 4096 {
			break
		}
		f := filepath.Join(pool, fmt.Sprintf("fill-%d", i))
		fh, err := os.Create(f)
		if err != nil {
			break
		}
		fills = append(fills, f)
		if err := syscall.Fallocate(int(fh.Fd()), 0, 0, size); err != nil {
			size /= 2
		}
		fh.Close()
	}
	var st syscall.Statfs_t
	syscall.Statfs(pool, &st)
	t.Logf("pool filled: %d bytes free", int64(st.Bavail)*st.Bsize)
	os.WriteFile(release, nil, 0o600)
	err := <-done
	t.Logf("snapshot on a full disk: %v", err)
	if err == nil || !strings.Contains(err.Error(), "no_space") {
		t.Errorf("a snapshot on a full disk: %v, want no_space", err)
	}
	for _, f := range fills {
		os.Remove(f)
	}
	found := c.converge(ctx, "disk full")
	if _, err := c.c.CreateSnapshot(ctx, sb); err != nil {
		t.Errorf("a snapshot once there is room again: %v", err)
	}
	return found
}

// converge waits for the system to settle after a fault and checks it did: no sandbox in a
// transitional state, every acknowledged sandbox there and answering, every record on the host
// and every host sandbox recorded (after the doctor's repair), the doctor reporting nothing once
// it repaired what it found, and none of the leaks the doctor might miss. It returns the doctor's
// findings (what the fault left).
func (c *cluster) converge(ctx context.Context, name string) []string {
	t := c.t
	t.Helper()
	// The records follow the host (its reconcile): nothing live in the store the host lacks.
	c.eventually(name+": records match the host", 2*time.Minute, func() error {
		recs, err := c.records(ctx)
		host, herr := c.hostSandboxes(ctx)
		if err := errors.Join(err, herr); err != nil {
			return err
		}
		for id, st := range recs {
			switch {
			case st == "creating":
				return fmt.Errorf("sandbox %s is creating in the store", id)
			case st == "lost" || st == "error":
				return fmt.Errorf("sandbox %s is %s", id, st)
			case st != "killed" && host[id] != st:
				return fmt.Errorf("sandbox %s is %s in the store, %q on its host", id, st, host[id])
			}
		}
		for id, st := range host {
			if st != "running" && st != "hibernated" {
				return fmt.Errorf("sandbox %s is %s on the host", id, st)
			}
		}
		return nil
	})
	// The doctor repairs what the fault left; then it finds nothing.
	rep, err := c.c.HostDoctor(ctx, c.hostID, true)
	if err != nil {
		t.Fatalf("%s: doctor repair: %v", name, err)
	}
	var found []string
	for _, f := range rep.Findings {
		found = append(found, f.Kind)
		if !f.Repaired || f.Error != "" {
			t.Errorf("%s: the doctor could not repair %+v", name, f)
		}
	}
	t.Logf("%s: the doctor repaired %v", name, rep.Findings)
	c.eventually(name+": the doctor finds nothing after its repair", time.Minute, func() error {
		rep, err := c.c.HostDoctor(ctx, c.hostID, false)
		if err != nil || len(rep.Findings) > 0 {
			return fmt.Errorf("%+v %v", rep.Findings, err)
		}
		return nil
	})
	c.eventually(name+": nothing leaked", time.Minute, func() error { return c.leaks(ctx) })
	// Nothing acknowledged is lost: each answers.
	for _, id := range c.acked {
		r, err := c.c.Exec(ctx, id, client.ExecRequest{Cmd: "true"})
		if err != nil || r.ExitCode != 0 {
			t.Errorf("%s: acknowledged sandbox %s does not answer: %+v %v", name, id, r, err)
		}
	}
	// What a fault left held is free again: each volume mounts.
	for _, v := range c.volumes {
		sb, err := c.c.CreateSandbox(ctx, client.CreateRequest{Template: "base", Volumes: []client.VolumeMount{{VolumeID: v, MountPath: "/mnt/v"}}})
		if err != nil {
			t.Errorf("%s: volume %s cannot be attached: %v", name, v, err)
			continue
		}
		c.c.KillSandbox(ctx, sb.ID)
	}
	sort.Strings(found)
	return slices.Compact(found)
}

// hostSandboxes is every sandbox the host has, with its state.
func (c *cluster) hostSandboxes(ctx context.Context) (map[string]string, error) {
	list, err := c.ac.ListSandboxes(ctx)
	out := map[string]string{}
	for _, sb := range list {
		out[sb.ID] = sb.State
	}
	return out, err
}

// records is every sandbox the store has, with its state.
func (c *cluster) records(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	cursor := ""
	for {
		page, next, err := c.c.ListSandboxes(ctx, client.ListOptions{State: "all", Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			out[sb.ID] = sb.State
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// leaks checks what the doctor might miss, straight on the host: every VMM, sandbox directory and
// VMM cgroup belongs to a sandbox the host runs; no bake or snapshot is half made; the pool is one
// loop device; every live snapshot record is on the host and every host snapshot recorded.
func (c *cluster) leaks(ctx context.Context) error {
	all, err := c.hostSandboxes(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for id, st := range all {
		running[id] = st == "running"
	}
	var problems []string
	for what := range c.vmms() {
		if id, _, _ := strings.Cut(what, " "); !running[id] {
			problems = append(problems, "VMM "+what+" of no running sandbox")
		}
	}
	pool := filepath.Join(c.agentDir, "pool")
	for _, dir := range []string{filepath.Join(pool, "sandboxes"), filepath.Join(c.agentDir, "run")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if _, ok := all[e.Name()]; strings.HasPrefix(e.Name(), "sb_") && !ok {
				problems = append(problems, "directory "+filepath.Join(dir, e.Name())+" of no sandbox")
			}
			if strings.HasPrefix(e.Name(), "bake-") {
				problems = append(problems, "bake directory "+filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, dir := range []string{filepath.Join(pool, "snapshots"), filepath.Join(pool, "templates")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") || strings.HasSuffix(e.Name(), ".baking") || strings.HasSuffix(e.Name(), ".pulling") {
				problems = append(problems, "half-made "+filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, cg := range testenv.AgentCgroups(c.agentDir) {
		ents, _ := os.ReadDir(cg)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "sb_") && !running[e.Name()] {
				problems = append(problems, "cgroup "+filepath.Join(cg, e.Name())+" of no running sandbox")
			}
		}
	}
	if loops := loopsOf(pool + ".xfs"); len(loops) != 1 {
		problems = append(problems, fmt.Sprintf("the pool is on loop devices %v", loops))
	}
	snaps, _, err := c.c.ListSnapshots(ctx, client.SnapshotListOptions{Limit: 100})
	if err != nil {
		return err
	}
	hostSnaps, err := c.ac.ListSnapshots(ctx)
	if err != nil {
		return err
	}
	recorded, have := map[string]bool{}, map[string]bool{}
	for _, sn := range snaps {
		recorded[sn.ID] = true
	}
	for _, sn := range hostSnaps {
		have[sn.ID] = true
	}
	for id := range recorded {
		if !have[id] {
			problems = append(problems, "snapshot record "+id+" the host does not have")
		}
	}
	for id := range have {
		if !recorded[id] {
			problems = append(problems, "snapshot "+id+" on the host the store does not know")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}
