// Package qemu is the runtime driver for QEMU's microvm machine: KVM where a stock guest kernel
// runs under it, TCG (software CPU) otherwise. Snapshots keep guest RAM in a file
// (memory-backend-file + x-ignore-shared), so a snapshot is a small device-state stream and a
// restore maps the RAM file copy-on-write (share=off): restore time does not grow with RAM size.
package qemu

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/jail"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/timing"
	"golang.org/x/sys/unix"
)

// AgentPortName is the virtio-serial port the guest agent looks for.
const AgentPortName = "pandastack.agent"

// Driver runs microVMs with qemu-system-x86_64.
type Driver struct {
	Binary string // qemu-system-x86_64
	accel  string
	tscKHz int
	cpu    string
	// reliableTSC: the guest command line has tsc=reliable (WithReliableTSC).
	reliableTSC bool
	// coldSnapshots: a diff snapshot copies only the pages the guest wrote (WithColdSnapshots).
	coldSnapshots bool
	ident         runtime.Identity

	confine *Confinement // nil: VMMs run as this process's user, unjailed

	mu       sync.Mutex
	children map[int]chan runtime.Exit // VMMs this process started: reaped with Wait
	// reaped is closed once such a VMM is reaped and its cgroup removed. Kill waits for it: a late
	// removal would take the cgroup of the next VMM of the same sandbox (a wake right after a
	// hibernation), whose cgroup has the same name.
	reaped map[int]chan struct{}
	// runDirs is where each such VMM's run dir is now (Incoming may move it): its exit is
	// explained from the logs there.
	runDirs map[int]string
	// prepared holds the QMP connection of each prepared VMM (Prepare) until Incoming uses it.
	prepared map[int]*qmp
}

// Confinement is how VMMs are confined (docs/security.md): each in a jail (internal/jail) holding
// only its own files, as its own unprivileged uid, in its own cgroup with limits.
type Confinement struct {
	// GID is the group of every VMM; shared files (a template's kernel, a base RAM file) are
	// opened through it. A jail holds only its own files, so the group reaches nothing else.
	GID int
	// DefaultUID runs VMMs whose Spec names no UID (template bakes).
	DefaultUID int
	// JailRoot is an empty directory each jail mounts its root on, inside its own namespace.
	JailRoot string
	// Cgroups, when set, gives every VMM a cgroup limited to its vCPUs, its RAM plus
	// MemoryOverheadMiB, and PidsMax threads.
	Cgroups           *cgroup.Manager
	MemoryOverheadMiB int
	PidsMax           int64
}

// Confine turns confinement on for the VMMs started from now on (nil turns it off).
func (d *Driver) Confine(c *Confinement) { d.confine = c }

// limits are the cgroup limits of a VMM running spec.
func (c *Confinement) limits(spec runtime.Spec) cgroup.Limits {
	return cgroup.Limits{CPUs: float64(spec.VCPUs), MemoryBytes: int64(spec.MemoryMiB+c.MemoryOverheadMiB) << 20,
		Pids: c.PidsMax, IOWeight: 100}
}

// TCGCodeCacheMiB bounds QEMU's buffer of translated code under TCG. QEMU 7.2's default is 1 GiB
// (an eighth of the host's RAM at most), touched as code is translated and never given back until
// it fills and is flushed: code invalidated by the guest (every process it starts, a JIT) stays in
// it, so a busy VMM grew 430-650 MiB over its guest's RAM, past its cgroup's VMMOverheadMiB (512),
// and the cgroup killed it (a database replaying its WAL, a `next build`). A flush only costs
// translating the live code again.
const TCGCodeCacheMiB = 256

// accelArg is QEMU's -accel value: under TCG with the code cache bounded.
func (d *Driver) accelArg() string {
	if d.accel == "tcg" {
		return "tcg,tb-size=" + strconv.Itoa(TCGCodeCacheMiB)
	}
	return d.accel
}

// New returns a driver using accel ("kvm" or "tcg"; see ProbeAccel).
func New(accel string) (*Driver, error) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 not found (`make setup` installs qemu-system-x86): %w", err)
	}
	version, err := binaryVersion(bin)
	if err != nil {
		return nil, err
	}
	d := &Driver{Binary: bin, accel: accel, tscKHz: hostTSCKHz(), children: map[int]chan runtime.Exit{},
		reaped: map[int]chan struct{}{}, runDirs: map[int]string{}, prepared: map[int]*qmp{}}
	d.ident = runtime.Identity{VMM: "qemu", Version: version, Machine: machineType, Accel: accel, Devices: deviceRevision}
	d.UseCPU(DefaultCPU)
	return d, nil
}

// UseCPU sets the CPU model of the VMs started from now on (QEMU's -cpu; part of the Identity,
// so state saved under another model is not restored: templates re-bake).
func (d *Driver) UseCPU(model string) {
	d.cpu = model
	d.ident.CPU = model
	if d.accel == "kvm" && model == "max" {
		// Under KVM "max" is the host CPU passed through: the guest's features are the host's.
		d.ident.CPU += " (host " + hostCPUModel() + ")"
	}
}

// The machine type every VM gets and the default CPU model (args); part of the driver's Identity.
const (
	machineType = "microvm"
	DefaultCPU  = "max"
)

// deviceRevision names the device options of args (the Identity's Devices): raise it with any
// change a saved guest would notice, so older state is refused (and templates re-bake) instead
// of failing to load. "" (before revisions): as 2 but with the NIC's guest announce.
// 2: virtio-net without guest_announce.
const deviceRevision = "2"

func (d *Driver) Name() string               { return "qemu" }
func (d *Driver) Accel() string              { return d.accel }
func (d *Driver) Identity() runtime.Identity { return d.ident }

// binaryVersion reads the QEMU build once: "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)" from
// "QEMU emulator version 7.2.22 (Debian …)". The package revision is kept: distributions patch
// device models between releases.
func binaryVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	return parseVersion(string(out))
}

func parseVersion(out string) (string, error) {
	first, _, _ := strings.Cut(out, "\n")
	_, v, ok := strings.Cut(first, "version ")
	if !ok || strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("cannot read the QEMU version from %q", strings.TrimSpace(first))
	}
	return strings.TrimSpace(v), nil
}

// hostCPUModel is the host CPU's model name (/proc/cpuinfo).
func hostCPUModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// hostTSCKHz is the host CPU clock in kHz. Under TCG the guest TSC ticks at the host rate; passing
// it as tsc_early_khz skips PIT calibration, which hung ~1 in 12 boots on a loaded host.
func hostTSCKHz() int {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

func (d *Driver) cmdline(extra string) string {
	if d.reliableTSC {
		extra = strings.TrimSpace("tsc=reliable " + extra)
	}
	return cmdline(d.tscKHz, extra)
}

// Cmdline is the guest kernel command line of every VM this host boots (the bench's minimal
// restore boots the same).
func Cmdline() string { return cmdline(hostTSCKHz(), "") }

// WithReliableTSC boots guests with tsc=reliable. Under TCG the guest TSC is the host's, steady
// and monotonic, but the kernel's clocksource watchdog compares it with jiffies, which lose ticks
// on a loaded host, and marks it unstable: guests run on refined-jiffies (4 ms timer resolution,
// a periodic tick, no high-resolution timers). With tsc=reliable they keep the TSC and get
// high-resolution timers. Off by default: it did not make creates measurably faster here (bench
// suite tsc compares); for comparisons.
func (d *Driver) WithReliableTSC() { d.reliableTSC = true }

// WithColdSnapshots makes diff snapshots copy only the pages the guest wrote, not also those it
// read (diffRAM; for comparisons: a VM restored from such a snapshot reads its working set from
// disk).
func (d *Driver) WithColdSnapshots() { d.coldSnapshots = true }

func cmdline(tscKHz int, extra string) string {
	// panic=-1 reboots at once on a guest panic and -no-reboot turns that into QEMU's exit.
	// reboot=t: the reset is a triple fault, which QEMU always sees. The default (ACPI, then the
	// keyboard controller, then a jump to the firmware) sometimes ended in a guest hung in the
	// firmware under load, with the VMM still running.
	c := "console=ttyS0 panic=-1 reboot=t quiet loglevel=3"
	if tscKHz > 0 {
		c += " tsc_early_khz=" + strconv.Itoa(tscKHz)
	}
	if extra != "" {
		c += " " + extra
	}
	return c
}

// args builds the QEMU command line. Bake and restore must produce the same machine: only the RAM
// mapping (share) and -incoming differ.
func (d *Driver) args(runDir string, spec runtime.Spec, ramFile string, share bool, incoming bool) []string {
	shareArg := "off"
	if share {
		shareArg = "on"
	}
	rootCache, volCache := "cache=unsafe", "cache=writeback"
	if d.confine != nil {
		// Confined VMMs write with O_DIRECT: buffered writes would pile up as dirty host page
		// cache charged to the VMM's cgroup, which (on cgroup v1 above all) cannot throttle them
		// and OOM-kills the VMM instead. The guest sees the same write-back disk either way.
		rootCache, volCache = "cache.direct=on,cache.no-flush=on", "cache.direct=on"
	}
	a := []string{
		"-M", machineType + ",memory-backend=mem",
		"-accel", d.accelArg(),
		"-cpu", d.cpu,
		"-smp", strconv.Itoa(spec.VCPUs),
		"-m", strconv.Itoa(spec.MemoryMiB) + "M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// QEMU's seccomp filter: no obsolete syscalls, no privilege changes, no fork/exec, no
		// scheduler or memory-policy control. (Migrations go through descriptors: passFD.)
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		// append=on: the agent may truncate the log from outside without QEMU writing at a stale offset.
		"-chardev", "file,id=con0,path=" + filepath.Join(runDir, "console.log") + ",append=on",
		"-serial", "chardev:con0",
		"-kernel", spec.Kernel,
		"-initrd", spec.Initrd,
		"-append", d.cmdline(""),
		// The QMP socket arrives bound and listening as fd 3 (start): the host connects at once
		// and reads QMP's greeting the moment QEMU is ready, with no polling for the socket.
		"-chardev", "socket,id=qmp0,fd=3,server=on,wait=off", "-mon", "chardev=qmp0,mode=control",
		"-object", fmt.Sprintf("memory-backend-file,id=mem,size=%dM,mem-path=%s,share=%s", spec.MemoryMiB, ramFile, shareArg),
		"-chardev", "socket,id=agent0,path=" + filepath.Join(runDir, "agent.sock") + ",server=on,wait=off",
		"-device", "virtio-serial-device",
		"-device", "virtserialport,chardev=agent0,name=" + AgentPortName,
		// cache=unsafe: a sandbox disk is a throw-away clone; guest flushes need not reach the
		// platter, only the host page cache (which a reflink snapshot reads).
		"-drive", "id=root,file=" + spec.Disk + ",format=raw,if=none," + rootCache,
		"-device", "virtio-blk-device,drive=root",
	}
	for _, d := range spec.Drives {
		drive := "id=" + d.Serial + ",file=" + d.File + ",format=raw,if=none," + volCache + ",discard=unmap"
		if d.ReadOnly {
			drive += ",snapshot=on" // writes go to a temporary overlay, never to File
		}
		a = append(a, "-drive", drive, "-device", "virtio-blk-device,drive="+d.Serial+",serial="+d.Serial)
	}
	if spec.NIC {
		// The tap arrives as fd 4 (ExtraFiles[1]); the MAC is the one every slot expects.
		// guest_announce=off: otherwise QEMU asks every restored guest to announce itself, and
		// the guest's gratuitous ARP and IPv6 announcements ran its network stack cold (TCG
		// translates it anew in each VMM) beside the first HELLO: ~20 ms of a NIC create (bench
		// suite network, create with NIC / without 1.26-1.39 -> 0.99-1.18). Nothing here needs the
		// announcement: the slot's side resolves the guest's address when it first sends to it.
		a = append(a, "-netdev", "tap,id=n0,fd=4",
			"-device", "virtio-net-device,netdev=n0,guest_announce=off,mac="+network.GuestMAC.String())
	}
	if incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// start launches a VMM for spec: a cold boot (RAM file shared, for a bake) or a restore waiting
// for its incoming state.
func (d *Driver) start(ctx context.Context, runDir string, spec runtime.Spec, ramFile string, bake bool) (*runtime.VM, error) {
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []string{"qmp.sock", "agent.sock", "console.log", "devstate"} {
		os.Remove(filepath.Join(runDir, f))
	}
	if d.confine != nil {
		// A jail binds files at their real paths: the VMM must be given those.
		if bake {
			if f, err := os.OpenFile(ramFile, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
				f.Close() // the bind needs the file to exist; QEMU sizes it
			}
		}
		var err error
		if spec, ramFile, runDir, err = realPaths(spec, ramFile, runDir); err != nil {
			return nil, err
		}
	}
	args := d.args(runDir, spec, ramFile, bake, !bake)
	qmpLn, err := listenQMP(filepath.Join(runDir, "qmp.sock"))
	if err != nil {
		return nil, err
	}
	defer qmpLn.Close() // the VMM holds its own copy; once it exits, a waiting client fails
	logf, err := os.OpenFile(filepath.Join(runDir, "vmm.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	vm := &runtime.VM{RunDir: runDir, AgentSocket: filepath.Join(runDir, "agent.sock")}
	var cmd *exec.Cmd
	if c := d.confine; c == nil {
		cmd = exec.Command(d.Binary, args...)
		cmd.Dir = runDir
		// Own session: the VMM outlives a restart (or crash) of the agent, which re-adopts it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		vm.UID = spec.UID
		if vm.UID == 0 {
			vm.UID = c.DefaultUID
		}
		if c.Cgroups != nil {
			if vm.Cgroups, err = c.Cgroups.Create(filepath.Base(runDir), c.limits(spec)); err != nil {
				return nil, err
			}
		}
		js := jail.Spec{Root: c.JailRoot, UID: vm.UID, GID: c.GID, Cgroups: vm.Cgroups, KeepFDs: 4, Dir: runDir,
			Env: []string{"TMPDIR=" + runDir}, // snapshot=on overlays of read-only volumes
			Mounts: []jail.Mount{{Path: runDir, Write: true, Own: true}, {Path: spec.Kernel}, {Path: spec.Initrd},
				{Path: spec.Disk, Write: true, Own: true}, {Path: ramFile, Write: true}}}
		for _, dr := range spec.Drives {
			js.Mounts = append(js.Mounts, jail.Mount{Path: dr.File, Write: !dr.ReadOnly})
		}
		if spec.Tap != nil {
			js.KeepFDs = 5
		}
		if cmd, err = jail.Command(js, d.Binary, args...); err != nil {
			cgroup.Remove(vm.Cgroups)
			return nil, err
		}
	}
	timing.Mark(ctx, runtime.StepConfine)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{qmpLn} // fd 3: the QMP chardev
	if spec.Tap != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, spec.Tap) // fd 4: -netdev tap,fd=4
	}
	if err := cmd.Start(); err != nil {
		cgroup.Remove(vm.Cgroups)
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	timing.Mark(ctx, runtime.StepSpawn)
	vm.Pid = cmd.Process.Pid
	vm.StartTicks, _ = startTicks(vm.Pid)
	ch, reaped := make(chan runtime.Exit, 1), make(chan struct{})
	d.mu.Lock()
	d.children[vm.Pid], d.reaped[vm.Pid], d.runDirs[vm.Pid] = ch, reaped, runDir
	d.mu.Unlock()
	pid, cgroups := vm.Pid, vm.Cgroups
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		dir := cmp.Or(d.runDirs[pid], runDir) // read before Kill may forget it
		d.mu.Unlock()
		cgroup.Remove(cgroups)
		close(reaped)
		reason := "VMM exited"
		if err != nil {
			reason = "VMM " + err.Error()
		}
		ch <- runtime.Exit{At: time.Now(), Reason: explainExit(dir, reason)}
	}()
	return vm, nil
}

// listenQMP binds and listens on path (a VMM's QMP socket) and returns the listening socket as a
// file to hand to QEMU; closing the file leaves the socket file in place.
func listenQMP(path string) (*os.File, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	return ln.File() // a duplicate, blocking descriptor
}

// realPaths resolves the symlinks in every path a VMM opens.
func realPaths(spec runtime.Spec, ramFile, runDir string) (runtime.Spec, string, string, error) {
	var err error
	for _, p := range []*string{&spec.Kernel, &spec.Initrd, &spec.Disk, &ramFile, &runDir} {
		if *p, err = filepath.EvalSymlinks(*p); err != nil {
			return spec, "", "", err
		}
	}
	spec.Drives = append([]runtime.Drive(nil), spec.Drives...)
	for i := range spec.Drives {
		if spec.Drives[i].File, err = filepath.EvalSymlinks(spec.Drives[i].File); err != nil {
			return spec, "", "", err
		}
	}
	return spec, ramFile, runDir, nil
}

// Boot cold-boots spec with its RAM in ramFile (shared, so a snapshot need not copy it).
func (d *Driver) Boot(ctx context.Context, runDir string, spec runtime.Spec, ramFile string) (*runtime.VM, error) {
	if spec.NIC != (spec.Tap != nil) {
		return nil, fmt.Errorf("qemu: a NIC needs a tap and a tap needs a NIC")
	}
	return d.start(ctx, runDir, spec, ramFile, true)
}

// SaveSnapshot migrates device state to stateFile. RAM is skipped (x-ignore-shared) because it
// already lives in the RAM file. The source was not stopped first, so the saved run state is
// "running" and a restored clone resumes by itself.
func (d *Driver) SaveSnapshot(ctx context.Context, vm *runtime.VM, stateFile string) error {
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return err
	}
	defer q.close()
	if err := q.ignoreShared(ctx); err != nil {
		return err
	}
	return migrateToFile(ctx, q, stateFile)
}

// migrateToFile streams the VM's migration into path through a descriptor the agent opened.
func migrateToFile(ctx context.Context, q *qmp, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := q.passFD(ctx, "migout", f); err != nil {
		return err
	}
	if err := q.run(ctx, "migrate", map[string]any{"uri": "fd:migout"}, nil); err != nil {
		return err
	}
	if err := waitMigration(ctx, q); err != nil {
		return err
	}
	return f.Close()
}

// Restore starts a clone of snap: a new VMM waiting for an incoming migration, the RAM file mapped
// share=off (MAP_PRIVATE: pages are shared until the guest writes them), then the device state.
func (d *Driver) Restore(ctx context.Context, runDir string, spec runtime.Spec, snap runtime.Snapshot) (*runtime.VM, error) {
	vm, err := d.Prepare(ctx, runDir, spec, snap.RAMFile)
	if err != nil {
		return nil, err
	}
	if err := d.Incoming(ctx, vm, runDir, snap); err != nil {
		return nil, err
	}
	return vm, nil
}

// Prepare is the first half of a restore: the VMM started confined with -incoming defer, the RAM
// file mapped share=off but not a page of it read, its QMP connected (kept for Incoming) and
// x-ignore-shared on. It holds no guest memory and runs no guest.
func (d *Driver) Prepare(ctx context.Context, runDir string, spec runtime.Spec, ramFile string) (*runtime.VM, error) {
	if spec.NIC != (spec.Tap != nil) {
		return nil, fmt.Errorf("qemu: a NIC needs a tap and a tap needs a NIC")
	}
	vm, err := d.start(ctx, runDir, spec, ramFile, false)
	if err != nil {
		return nil, err
	}
	q, err := dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) })
	if err != nil {
		return nil, d.failed(vm, err)
	}
	timing.Mark(ctx, runtime.StepQMP)
	if err := q.ignoreShared(ctx); err != nil {
		q.close()
		return nil, d.failed(vm, err)
	}
	d.mu.Lock()
	d.prepared[vm.Pid] = q
	d.mu.Unlock()
	return vm, nil
}

// failed ends a VMM that failed to start or restore and adds the end of its log to err.
func (d *Driver) failed(vm *runtime.VM, err error) error {
	d.Kill(vm)
	if tail := tailFile(filepath.Join(vm.RunDir, "vmm.log"), 1000); tail != "" {
		err = fmt.Errorf("%w: %s", err, tail)
	}
	return err
}

// Incoming is the second half of a restore: a prepared VM's run dir moved to runDir (vm is
// updated), snap's device state loaded over QMP, the vCPUs running. A VM that fails is ended.
func (d *Driver) Incoming(ctx context.Context, vm *runtime.VM, runDir string, snap runtime.Snapshot) error {
	d.mu.Lock()
	q := d.prepared[vm.Pid]
	delete(d.prepared, vm.Pid)
	d.mu.Unlock()
	if q != nil {
		defer q.close()
	}
	if runDir != vm.RunDir {
		if err := os.Rename(vm.RunDir, runDir); err != nil {
			return d.failed(vm, err)
		}
		vm.RunDir, vm.AgentSocket = runDir, filepath.Join(runDir, filepath.Base(vm.AgentSocket))
		d.mu.Lock()
		if _, ok := d.runDirs[vm.Pid]; ok {
			d.runDirs[vm.Pid] = runDir
		}
		d.mu.Unlock()
	}
	if q == nil { // prepared by an earlier process: connect again
		var err error
		if q, err = dialQMP(ctx, filepath.Join(vm.RunDir, "qmp.sock"), func() bool { return d.Alive(vm) }); err != nil {
			return d.failed(vm, err)
		}
		defer q.close()
		if err := q.ignoreShared(ctx); err != nil {
			return d.failed(vm, err)
		}
	}
	state, err := os.Open(snap.StateFile)
	if err != nil {
		return d.failed(vm, err)
	}
	defer state.Close()
	if err := q.passFD(ctx, "migin", state); err != nil {
		return d.failed(vm, err)
	}
	if err := q.run(ctx, "migrate-incoming", map[string]any{"uri": "fd:migin"}, nil); err != nil {
		return d.failed(vm, err)
	}
	for {
		st, err := q.status(ctx)
		if err != nil {
			return d.failed(vm, err)
		}
		switch st {
		case "running":
			timing.Mark(ctx, runtime.StepMigrate)
			return nil
		case "inmigrate":
		case "paused", "postmigrate", "prelaunch":
			// The source had been stopped before it was saved: resume explicitly.
			timing.Mark(ctx, runtime.StepMigrate)
			if err := q.run(ctx, "cont", nil, nil); err != nil {
				return d.failed(vm, err)
			}
			timing.Mark(ctx, runtime.StepCont)
		default:
			return d.failed(vm, fmt.Errorf("restore ended in state %q", st))
		}
		select {
		case <-ctx.Done():
			return d.failed(vm, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Watch yields once when the VMM ends: through Wait for processes this driver started, through a
// pidfd for adopted ones (started by an earlier agent process).
func (d *Driver) Watch(vm *runtime.VM) <-chan runtime.Exit {
	d.mu.Lock()
	ch, ok := d.children[vm.Pid]
	d.mu.Unlock()
	if ok {
		return ch
	}
	out := make(chan runtime.Exit, 1)
	go func() {
		fd, err := unix.PidfdOpen(vm.Pid, 0)
		if err == nil {
			if d.Alive(vm) {
				waitPidfd(fd, -1)
			}
			unix.Close(fd)
		}
		cgroup.Remove(vm.Cgroups)
		out <- runtime.Exit{At: time.Now(), Reason: explainExit(vm.RunDir, "VMM exited")}
	}()
	return out
}

// Alive reports whether vm's process runs and is still the one we started.
func (d *Driver) Alive(vm *runtime.VM) bool {
	t, err := startTicks(vm.Pid)
	if err != nil || (vm.StartTicks != 0 && t != vm.StartTicks) {
		return false
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", vm.Pid))
	// A zombie has exited; only the reaping is left.
	if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
		return false
	}
	return true
}

// Kill ends the VMM with SIGKILL and waits until every thread of it is gone, so its files (RAM
// file, disk clone) are closed when Kill returns.
func (d *Driver) Kill(vm *runtime.VM) error {
	defer d.forget(vm)
	defer cgroup.Remove(vm.Cgroups)
	if !d.Alive(vm) {
		return nil
	}
	fd, err := unix.PidfdOpen(vm.Pid, 0)
	if err != nil {
		return nil // gone meanwhile
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
		return err
	}
	if !waitPidfd(fd, 10*time.Second) {
		return fmt.Errorf("VMM pid %d did not exit within 10 s of SIGKILL", vm.Pid)
	}
	d.mu.Lock()
	reaped := d.reaped[vm.Pid]
	d.mu.Unlock()
	if reaped != nil {
		select {
		case <-reaped:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("VMM pid %d was not reaped within 10 s of its exit", vm.Pid)
		}
	}
	return nil
}

// waitPidfd waits until the process behind fd has exited with all its threads (a zombie leader
// whose other threads still run is not enough: they hold the VM's files). timeout < 0 waits forever.
func waitPidfd(fd int, timeout time.Duration) bool {
	ms := -1
	if timeout >= 0 {
		ms = int(timeout.Milliseconds())
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

func (d *Driver) forget(vm *runtime.VM) {
	d.mu.Lock()
	q := d.prepared[vm.Pid]
	delete(d.children, vm.Pid)
	delete(d.reaped, vm.Pid)
	delete(d.runDirs, vm.Pid)
	delete(d.prepared, vm.Pid)
	d.mu.Unlock()
	if q != nil {
		q.close()
	}
}

// startTicks reads the process start time, field 22 of /proc/PID/stat.
func startTicks(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad stat for pid %d", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("bad stat for pid %d", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// explainExit turns a VMM exit into a reason a user can act on: a guest kernel panic (the guest
// reboots on panic and -no-reboot makes QEMU exit) or QEMU's own last words.
func explainExit(runDir, base string) string {
	console := tailFile(filepath.Join(runDir, "console.log"), 4000)
	if i := strings.LastIndex(console, "Kernel panic"); i >= 0 {
		line, _, _ := strings.Cut(console[i:], "\n")
		return "guest kernel panic: " + strings.TrimSpace(line)
	}
	if tail := tailFile(filepath.Join(runDir, "vmm.log"), 500); tail != "" {
		return base + ": " + tail
	}
	return base
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(-n, 2)
	}
	b := make([]byte, n)
	k, _ := f.Read(b)
	return strings.TrimSpace(string(b[:k]))
}
