package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/client"
	"github.com/pandastack/pandastack/internal/faultpoint"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds cmd/pandastack once per test process and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		dir, err := os.MkdirTemp("", "pandastack-faults-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "pandastack")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/pandastack")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("building pandastack: %v", binErr)
	}
	return binPath
}

// proc is a child process with its output kept.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  testenv.SyncBuffer
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor waits until the process has written text, failing if it exits first or within limit.
func (p *proc) waitFor(t *testing.T, text string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.out.String(), text) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not write %q (exited %v):\n%s", p.name, text, p.exited(), tail(p.out.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to stop (SIGTERM), and kills it if it has not within a minute.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.kill()
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// cluster is one server and one host agent, each a child process of the test, on loopback.
type cluster struct {
	t                           *testing.T
	bin, dir, agentDir, db      string
	serverAddr, agentAddr       string
	key, clusterToken, agentTok string
	prefix, cidr                string
	server, agent               *proc
	c                           *client.Client
	ac                          *agentclient.Client
	hostID                      string
	acked, volumes              []string // sandboxes acknowledged, volumes made (each must outlive every fault)
	builds                      int
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// newCluster starts a server and an agent; cleanup kills what is left and tears the host down.
func newCluster(t *testing.T) *cluster {
	testenv.NeedVMs(t)
	nettest.NeedRoot(t)
	dir, err := os.MkdirTemp("", "pf-") // short: the VMMs' socket paths must fit
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, bin: binary(t), dir: dir, agentDir: filepath.Join(dir, "agent"), db: filepath.Join(dir, "server", "state.db"),
		serverAddr: freeAddr(t), agentAddr: freeAddr(t),
		clusterToken: "fault-cluster-token", agentTok: "fault-agent-token", prefix: nettest.NewPrefix(), cidr: nettest.FreeCIDR(t, 24).String()}
	if c.key, err = auth.NewKey(); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(c.db), 0o700)
	c.c = client.New("http://"+c.serverAddr, c.key)
	c.ac = agentclient.New("http://"+c.agentAddr, c.agentTok)
	t.Cleanup(c.teardown)
	c.startServer()
	c.startAgent()
	return c
}

// run starts the binary with args; env adds to the test's environment (the doctor's age
// threshold is 0: the suite asks it only once nothing is in flight).
func (c *cluster) run(name string, args []string, env ...string) *proc {
	p := &proc{name: name, cmd: exec.Command(c.bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), faultpoint.MinAgeEnv+"=0"), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	return p
}

func (c *cluster) startServer(env ...string) {
	c.server = c.run("server", []string{"server", "--addr", c.serverAddr, "--database-url", c.db, "--cluster-token", c.clusterToken,
		"--db-addr", "", "--log-level", "info"}, append([]string{"PANDASTACK_API_KEY=" + c.key}, env...)...)
	c.waitHealthy(c.server, "http://"+c.serverAddr+"/healthz")
}

func (c *cluster) startAgent(env ...string) {
	c.agent = c.run("agent", []string{"agent", "--data-dir", c.agentDir, "--addr", c.agentAddr, "--token", c.agentTok,
		"--guest-agent", testenv.GuestAgent(c.t), "--image-cache", testenv.ImageCache(), "--server", "http://" + c.serverAddr,
		"--server-token", c.clusterToken, "--network-cidr", c.cidr, "--network-prefix", c.prefix, "--network-ready", "1",
		"--pool-gib", "10", "--disk-reserve-mib", "64", "--prepared-templates", "0"}, env...)
	c.waitHealthy(c.agent, "http://"+c.agentAddr+"/healthz")
	c.waitHostUp()
}

// waitHealthy waits for url to answer 200 while p runs.
func (c *cluster) waitHealthy(p *proc, url string) {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return
			}
		}
		if p.exited() || time.Now().After(deadline) {
			c.t.Fatalf("%s did not come up (exited %v):\n%s", p.name, p.exited(), tail(p.out.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHostUp waits until the server lists the agent up.
func (c *cluster) waitHostUp() {
	c.t.Helper()
	c.eventually("the host registered and up", time.Minute, func() error {
		hosts, err := c.c.ListHosts(context.Background())
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.State == "up" {
				c.hostID = h.ID
				return nil
			}
		}
		return fmt.Errorf("hosts %+v", hosts)
	})
}

// eventually retries check until it passes or limit has gone by (then it fails the test with the
// last error): convergence is asynchronous, its end is what is checked, not its speed.
func (c *cluster) eventually(what string, limit time.Duration, check func() error) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %v\n%s", what, err, c.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logs is the end of both processes' output.
func (c *cluster) logs() string {
	return "server:\n" + tail(c.server.out.String(), 3000) + "\nagent:\n" + tail(c.agent.out.String(), 3000)
}

// restart stops p's process gracefully and starts it again with env (a pause point).
func (c *cluster) restart(which string, env ...string) {
	if which == "server" {
		c.server.stop()
		c.startServer(env...)
		return
	}
	c.agent.stop()
	c.startAgent(env...)
}

func (c *cluster) proc(which string) *proc {
	if which == "server" {
		return c.server
	}
	return c.agent
}

// teardown kills every sandbox, stops both processes and removes what the host holds: the pool's
// mount and loop device, the agent's cgroups and namespaces, any VMM still in its run directory.
func (c *cluster) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.agent != nil && !c.agent.exited() {
		if list, err := c.ac.ListSandboxes(ctx); err == nil {
			for _, sb := range list {
				c.ac.KillSandbox(ctx, sb.ID)
			}
		}
		c.agent.stop()
	}
	if c.server != nil && !c.server.exited() {
		c.server.stop()
	}
	for _, pid := range c.vmms() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	pool := filepath.Join(c.agentDir, "pool")
	syscall.Unmount(pool, syscall.MNT_DETACH)
	for _, dev := range loopsOf(pool + ".xfs") {
		exec.Command("losetup", "-d", dev).Run()
	}
	cgs := testenv.AgentCgroups(c.agentDir)
	for i := len(cgs) - 1; i >= 0; i-- {
		subs, _ := os.ReadDir(cgs[i])
		for _, s := range subs {
			if s.IsDir() {
				syscall.Rmdir(filepath.Join(cgs[i], s.Name()))
			}
		}
		syscall.Rmdir(cgs[i])
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], c.prefix) {
				exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	os.RemoveAll(c.dir)
}

// vmms lists the QEMU processes working in the agent's run directories (sandboxes' and bakes'),
// as "<run dir name> pid <pid>" → pid.
func (c *cluster) vmms() map[string]int {
	out := map[string]int{}
	for pid, dir := range hostagent.VMMsIn(filepath.Join(c.agentDir, "run")) {
		out[dir+" pid "+strconv.Itoa(pid)] = pid
	}
	return out
}

// loopsOf lists the loop devices backed by file.
func loopsOf(file string) []string {
	out, _ := exec.Command("losetup", "-n", "-O", "NAME", "-j", file).Output()
	return strings.Fields(string(out))
}
