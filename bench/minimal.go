package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/runtime/qemu"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
)

// minimal is the bench's floor for a create: the least a QEMU restore takes on this machine with
// the template's own kernel, initrd and rootfs, and nothing of PandaStack's restore path (the
// measurement of ../shared/experiments/qemu-restore/q6b_debian_restore.py, in Go). A plain,
// unconfined QEMU with QEMU's default CPU model and only the devices the guest needs (its RAM in
// a file, the root disk, virtio-serial), started with -incoming defer; the clock runs from the
// spawn to the first answer of a tiny in-guest responder: a Python loop that polls a second
// virtio-serial port every 2 ms and echoes lines. The disk clone is made before the clock starts.
type minimal struct {
	dir            string
	kernel, initrd string
	memMiB         int
}

const (
	minimalPort = "bench.echo"
	// minimalResponder echoes every line on the port named minimalPort; a read of 0 bytes means no
	// host is connected (virtio-serial), so it sleeps 2 ms and tries again.
	minimalResponder = `import glob, os, time
d = [p for p in glob.glob("/sys/class/virtio-ports/*") if open(p + "/name").read().strip() == "` + minimalPort + `"][0]
fd = os.open("/dev/" + os.path.basename(d), os.O_RDWR)
while True:
    b = os.read(fd, 4096)
    if not b:
        time.sleep(0.002)
        continue
    os.write(fd, b)
`
)

// newMinimal cold-boots tmpl's kernel and rootfs in a minimal QEMU, starts the responder and
// snapshots the VM into dir (RAM file + device state), once per bench run.
func newMinimal(ctx context.Context, tmpl *bake.Template, dir string) (*minimal, error) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	mn := &minimal{dir: dir, kernel: filepath.Join(tmpl.Dir, "vmlinuz"), initrd: filepath.Join(tmpl.Dir, "initrd"), memMiB: tmpl.MemoryMiB}
	if err := storage.Clone(filepath.Join(tmpl.Dir, "disk.img"), mn.path("disk.img")); err != nil {
		return nil, err
	}
	vm, err := mn.spawn(mn.path("disk.img"), true)
	if err != nil {
		return nil, err
	}
	defer vm.kill()
	bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := guest.Connect(bctx, mn.path("agent.sock"))
	if err != nil {
		return nil, fmt.Errorf("minimal VM: guest agent: %w (console: %s)", err, mn.path("console.log"))
	}
	// Under load the first call after a cold boot can lose its session (as in a template's build
	// VM, bake.retryLost): a no-op takes it.
	noop := func() error {
		_, err := c.Exec(bctx, guest.ExecRequest{User: "root", Timeout: time.Minute, Cmd: "true"}, nil, io.Discard, io.Discard)
		return err
	}
	if err := noop(); errors.Is(err, guest.ErrConnectionLost) {
		noop()
	}
	var out strings.Builder
	res, err := c.Exec(bctx, guest.ExecRequest{User: "root", Timeout: time.Minute,
		Cmd: "echo " + base64.StdEncoding.EncodeToString([]byte(minimalResponder)) + " | base64 -d > /run/echo.py && " +
			"setsid python3 /run/echo.py </dev/null >/dev/null 2>&1 &"}, nil, &out, &out)
	if err != nil || res.ExitCode != 0 {
		c.Close()
		return nil, fmt.Errorf("minimal VM: start the responder: %v, exit %d: %s", err, res.ExitCode, out.String())
	}
	if _, err := mn.ask(bctx, time.Now().Add(time.Minute)); err != nil {
		out.Reset()
		c.Exec(bctx, guest.ExecRequest{User: "root", Cmd: "ps ax | grep [e]cho.py; timeout 3 python3 /run/echo.py; echo rc=$?"}, nil, &out, &out)
		c.Close()
		return nil, fmt.Errorf("minimal VM: responder: %w; in the guest: %s", err, out.String())
	}
	c.Close()
	time.Sleep(500 * time.Millisecond) // both guest loops see their hosts gone, as after a bake
	q, err := dialQMPRetry(bctx, mn.path("qmp.sock"), time.Now().Add(10*time.Second))
	if err != nil {
		return nil, err
	}
	defer q.Close()
	state := mn.path("state")
	for _, cmd := range []string{
		`{"execute":"migrate-set-capabilities","arguments":{"capabilities":[{"capability":"x-ignore-shared","state":true}]}}`,
		`{"execute":"migrate","arguments":{"uri":"exec:cat > ` + state + `"}}`,
	} {
		if _, err := qmpDo(q, cmd); err != nil {
			return nil, err
		}
	}
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := qmpDo(q, `{"execute":"query-migrate"}`)
		if err != nil {
			return nil, err
		}
		if strings.Contains(st, `"completed"`) {
			break
		}
		if strings.Contains(st, `"failed"`) || time.Now().After(deadline) {
			return nil, fmt.Errorf("minimal VM: snapshot: %s", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return mn, nil
}

func (mn *minimal) path(name string) string { return filepath.Join(mn.dir, name) }

type minimalVM struct{ cmd *exec.Cmd }

func (v *minimalVM) kill() {
	v.cmd.Process.Kill()
	v.cmd.Wait()
}

// spawn starts QEMU on disk: a cold boot with the RAM file shared, or a restore (-incoming
// defer) mapping it private.
func (mn *minimal) spawn(disk string, boot bool) (*minimalVM, error) {
	for _, f := range []string{"qmp.sock", "agent.sock", "echo.sock"} {
		os.Remove(mn.path(f))
	}
	share := "off"
	if boot {
		share = "on"
	}
	args := []string{"-M", "microvm,memory-backend=mem", "-accel", "tcg,tb-size=" + fmt.Sprint(qemu.TCGCodeCacheMiB), "-m", fmt.Sprint(mn.memMiB, "M"),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:" + mn.path("console.log"), "-kernel", mn.kernel, "-initrd", mn.initrd, "-append", qemu.Cmdline(),
		"-qmp", "unix:" + mn.path("qmp.sock") + ",server=on,wait=off",
		"-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s", mn.memMiB, mn.path("ram"), share),
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=agent0,path=" + mn.path("agent.sock") + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent0,name=" + qemu.AgentPortName,
		"-chardev", "socket,id=echo0,path=" + mn.path("echo.sock") + ",server=on,wait=off",
		"-device", "virtserialport,chardev=echo0,name=" + minimalPort,
		"-drive", "id=root,file=" + disk + ",format=raw,if=none,cache=unsafe", "-device", "virtio-blk-device,drive=root"}
	if !boot {
		args = append(args, "-incoming", "defer")
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	log, err := os.Create(mn.path("qemu.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &minimalVM{cmd}, nil
}

// restore measures one minimal restore: spawn → QMP → migrate-incoming → the responder's echo.
func (mn *minimal) restore(ctx context.Context) (float64, error) {
	disk := mn.path("clone.img")
	os.Remove(disk)
	if err := storage.Clone(mn.path("disk.img"), disk); err != nil {
		return 0, err
	}
	defer os.Remove(disk)
	timing.Mark(ctx, "disk_clone")
	deadline := time.Now().Add(30 * time.Second)
	t := time.Now()
	vm, err := mn.spawn(disk, false)
	if err != nil {
		return 0, err
	}
	defer vm.kill()
	timing.Mark(ctx, runtime.StepSpawn)
	q, err := dialQMPRetry(ctx, mn.path("qmp.sock"), deadline)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	timing.Mark(ctx, runtime.StepQMP)
	for _, cmd := range []string{
		`{"execute":"migrate-set-capabilities","arguments":{"capabilities":[{"capability":"x-ignore-shared","state":true}]}}`,
		`{"execute":"migrate-incoming","arguments":{"uri":"exec:cat ` + mn.path("state") + `"}}`,
	} {
		if _, err := qmpDo(q, cmd); err != nil {
			return 0, err
		}
	}
	timing.Mark(ctx, runtime.StepMigrate) // sent; the answer waits for the state to load
	if _, err := mn.ask(ctx, deadline); err != nil {
		return 0, fmt.Errorf("minimal restore: %w (see %s)", err, mn.path("qemu.log"))
	}
	timing.Mark(ctx, "answer")
	return ms(time.Since(t)), nil
}

// ask sends the responder one line and waits for its echo.
func (mn *minimal) ask(ctx context.Context, deadline time.Time) (string, error) {
	conn, err := dialRetry(ctx, mn.path("echo.sock"), deadline)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	if line != "ping\n" {
		return "", fmt.Errorf("responder answered %q", line)
	}
	return line, nil
}

// dialRetry connects to a unix socket QEMU is still creating, polling every 2 ms.
func dialRetry(ctx context.Context, path string, deadline time.Time) (net.Conn, error) {
	for {
		conn, err := net.Dial("unix", path)
		if err == nil {
			return conn, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// qmpConn is a bare QMP connection: one command line, one answer line (events skipped).
type qmpConn struct {
	net.Conn
	r *bufio.Reader
}

func dialQMPRetry(ctx context.Context, path string, deadline time.Time) (*qmpConn, error) {
	conn, err := dialRetry(ctx, path, deadline)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(deadline)
	q := &qmpConn{conn, bufio.NewReader(conn)}
	if _, err := q.r.ReadString('\n'); err != nil { // greeting
		conn.Close()
		return nil, err
	}
	if _, err := qmpDo(q, `{"execute":"qmp_capabilities"}`); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// qmpDo sends one command (a JSON line) and returns its "return" value as JSON text.
func qmpDo(q *qmpConn, cmd string) (string, error) {
	if _, err := q.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	for {
		line, err := q.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		var a struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(line), &a) != nil || a.Event != "" {
			continue
		}
		if a.Error != nil {
			return "", fmt.Errorf("QMP %s: %s", cmd, a.Error)
		}
		return string(a.Return), nil
	}
}
