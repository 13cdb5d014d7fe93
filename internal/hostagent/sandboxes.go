package hostagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/sandboxstate"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Sandbox states as this host sees them (internal/sandboxstate's; a killed sandbox is gone here).
const (
	StateCreating   = string(sandboxstate.Creating)
	StateRunning    = string(sandboxstate.Running)
	StateHibernated = string(sandboxstate.Hibernated)
	StateError      = string(sandboxstate.Error)
)

// record is what the agent persists per sandbox (sandbox.json), enough to re-adopt its VMM.
type record struct {
	ID          string            `json:"id"`
	Template    string            `json:"template"`
	TemplateDir string            `json:"template_dir"`
	State       string            `json:"state"`
	Error       string            `json:"error,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	VCPUs       int               `json:"vcpus"`
	MemoryMiB   int               `json:"memory_mib"`
	ReadyMs     int64             `json:"ready_ms"`
	Env         map[string]string `json:"env,omitempty"`
	VM          runtime.VM        `json:"vm"`
	// BaseDir holds the ram and state files the VM was restored from: its template's, a
	// snapshot's, or (after a wake) the sandbox's own hibernation snapshot.
	BaseDir string `json:"base_dir"`
	MemGen  int    `json:"mem_gen,omitempty"` // generation of the sandbox's own memory snapshots
	// Identity is the VMM BaseDir was saved under, which is also the VMM the sandbox runs (or
	// last ran) under: a restore must match it, and its snapshots record it.
	Identity   runtime.Identity `json:"identity,omitzero"`
	SnapshotID string           `json:"snapshot_id,omitempty"`
	ForkOf     string           `json:"fork_of,omitempty"`
	// NIC: the VM has a network device (its snapshot was baked with one); it then gets a network
	// slot while it runs: Netns names it, GuestAddr is where the host reaches the guest's ports.
	NIC bool `json:"nic,omitempty"`
	// VolumeSlots is how many spare drives the machine has; Volumes are mounted in the first ones.
	VolumeSlots int                   `json:"volume_slots,omitempty"`
	Volumes     []hostapi.VolumeMount `json:"volumes,omitempty"`
	Egress      *network.Egress       `json:"egress,omitempty"`
	// EgressOpen are the private ranges the operator opened for all sandboxes (the control
	// plane's --egress-open) when this sandbox was made.
	EgressOpen []string `json:"egress_open,omitempty"`
	Netns      string   `json:"netns,omitempty"`
	GuestAddr  string   `json:"guest_addr,omitempty"`
}

// spec is the machine to restore; kernel and initrd always come from the template.
func (r *record) spec(disk string) runtime.Spec {
	return runtime.Spec{VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, Kernel: filepath.Join(r.TemplateDir, "vmlinuz"),
		Initrd: filepath.Join(r.TemplateDir, "initrd"), Disk: disk, NIC: r.NIC}
}

// snapIn names the memory snapshot files in dir.
func snapIn(dir string) runtime.Snapshot {
	return runtime.Snapshot{RAMFile: filepath.Join(dir, "ram"), StateFile: filepath.Join(dir, "state")}
}

type sandbox struct {
	// op serialises lifecycle changes (snapshot, hibernate, wake, kill) of one sandbox; mu guards
	// the fields and is never held across a slow call.
	op  sync.Mutex
	mu  sync.Mutex
	rec record
	// lastUsed is when an API call last touched the sandbox and busy counts calls in flight
	// (for idle hibernation: a long exec is not idleness).
	lastUsed time.Time
	busy     int
	client   *guest.Client
	killed   bool
	dir      string
	slot     *network.Slot // while the VMM runs, if it has a NIC
}

func (sb *sandbox) info() SandboxInfo {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	r := sb.rec
	info := SandboxInfo{ID: r.ID, Template: r.Template, State: r.State, Error: r.Error, CreatedAt: hostapi.Time(r.CreatedAt),
		PID: r.VM.Pid, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, ReadyMS: r.ReadyMs, SnapshotID: r.SnapshotID, ForkOf: r.ForkOf}
	if r.State != StateRunning {
		info.PID = 0
	}
	return info
}

func (sb *sandbox) persist() error {
	return writeJSONFile(filepath.Join(sb.dir, "sandbox.json"), sb.rec)
}

func (sb *sandbox) closeGuest() {
	sb.mu.Lock()
	c := sb.client
	sb.client = nil
	sb.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// source is what a new sandbox is restored from.
type source struct {
	rec     record // template fields, base dir, lineage
	diskSrc string // disk image the sandbox's disk is reflinked from
}

// Create restores a new sandbox from a template's snapshot (baking the template first if this
// host has not) or from a snapshot. It returns once the sandbox's guest agent answers.
func (a *Agent) Create(ctx context.Context, req CreateRequest) (SandboxInfo, error) {
	if req.ID == "" {
		req.ID = newID()
	} else if !idRE.MatchString(req.ID) {
		return SandboxInfo{}, errdefs.Invalidf("sandbox id %q: use sb_ followed by 1-60 lowercase letters or digits", req.ID)
	}
	var src source
	switch {
	case req.SnapshotID != "":
		snap, err := a.snapshots.Load(req.SnapshotID)
		if err != nil {
			return SandboxInfo{}, err
		}
		if req.Template != "" && req.Template != snap.Template {
			return SandboxInfo{}, errdefs.Invalidf("snapshot %s is of template %s, not %s", snap.ID, snap.Template, req.Template)
		}
		src = source{rec: record{Template: snap.Template, TemplateDir: snap.TemplateDir, VCPUs: snap.VCPUs,
			MemoryMiB: snap.MemoryMiB, BaseDir: snap.Dir, SnapshotID: snap.ID, NIC: snap.NIC, VolumeSlots: snap.VolumeSlots,
			Identity: snap.Identity}, diskSrc: snap.File("disk.img")}
	case req.Template != "":
		tmpl, err := a.templates.Ensure(ctx, req.Template, nil)
		if err != nil {
			return SandboxInfo{}, err
		}
		src = source{rec: record{Template: tmpl.Name, TemplateDir: tmpl.Dir, VCPUs: tmpl.VCPUs, MemoryMiB: tmpl.MemoryMiB,
			BaseDir: tmpl.Dir, NIC: tmpl.NIC, VolumeSlots: tmpl.VolumeSlots, Identity: tmpl.Identity}, diskSrc: filepath.Join(tmpl.Dir, "disk.img")}
		if len(tmpl.Env) > 0 { // the template's env, under the sandbox's own
			env := maps.Clone(tmpl.Env)
			maps.Copy(env, req.Env)
			req.Env = env
		}
	default:
		return SandboxInfo{}, errdefs.Invalidf("template (or snapshot_id) is required")
	}
	if _, err := a.egressPolicy(req.Egress, req.EgressOpen, false); err != nil {
		return SandboxInfo{}, errdefs.Invalidf("%v", err)
	}
	if err := a.checkSize("template "+src.rec.Template, src.rec.VCPUs, src.rec.MemoryMiB); err != nil {
		return SandboxInfo{}, err
	}
	if err := a.relieveForCreate(ctx, "sandbox "+req.ID); err != nil {
		return SandboxInfo{}, err
	}
	vols, err := a.volumes.ValidateMounts(req.Volumes, src.rec.VolumeSlots)
	if err != nil {
		return SandboxInfo{}, err
	}
	src.rec.Env, src.rec.Egress, src.rec.EgressOpen, src.rec.Volumes = req.Env, req.Egress, req.EgressOpen, vols
	return a.launch(ctx, req.ID, src)
}

// launch reflinks the disk, restores the VM and waits for its guest agent.
func (a *Agent) launch(ctx context.Context, id string, src source) (SandboxInfo, error) {
	start := time.Now()
	rec := src.rec
	rec.ID, rec.State, rec.CreatedAt = id, StateCreating, start.UTC()
	sb := &sandbox{dir: filepath.Join(a.sandboxesDir(), id), rec: rec, lastUsed: start}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return SandboxInfo{}, errdefs.Capacityf("host agent is shutting down")
	}
	if _, dup := a.sandboxes[id]; dup {
		a.mu.Unlock()
		return SandboxInfo{}, errdefs.Conflictf("sandbox %s already exists", id)
	}
	if err := a.checkAttachLocked(id, rec.Volumes); err != nil {
		a.mu.Unlock()
		return SandboxInfo{}, err
	}
	if err := a.admitLocked("sandbox "+id, rec.MemoryMiB); err != nil {
		a.mu.Unlock()
		return SandboxInfo{}, err
	}
	a.sandboxes[id] = sb
	a.mu.Unlock()

	runDir := a.runDir(id)
	fail := func(err error) (SandboxInfo, error) {
		a.mu.Lock()
		delete(a.sandboxes, id)
		a.mu.Unlock()
		os.RemoveAll(sb.dir)
		os.RemoveAll(runDir)
		a.releaseUID(id)
		return SandboxInfo{}, err
	}
	if err := os.MkdirAll(sb.dir, 0o700); err != nil {
		return fail(err)
	}
	disk := filepath.Join(sb.dir, "disk.img")
	if err := storage.Clone(src.diskSrc, disk); err != nil {
		return fail(err)
	}
	vm, client, slot, err := a.restoreVM(ctx, &rec, runDir, disk)
	if err != nil {
		return fail(err)
	}
	if err := a.volumes.Mount(ctx, a.rt, vm, client, rec.Volumes); err != nil {
		client.Close()
		a.rt.Kill(vm)
		if slot != nil {
			slot.Release()
		}
		return fail(err)
	}
	sb.mu.Lock()
	sb.setRunning(vm, client, slot)
	sb.rec.ReadyMs = time.Since(start).Milliseconds()
	err = sb.persist()
	sb.mu.Unlock()
	if err != nil {
		client.Close()
		a.rt.Kill(vm)
		a.releaseNetwork(sb)
		return fail(err)
	}
	a.watch(sb, vm)
	return sb.info(), nil
}

// restoreVM starts rec's VM from rec.BaseDir with disk (and its network slot, if it has a NIC),
// and connects to its guest agent.
func (a *Agent) restoreVM(ctx context.Context, rec *record, runDir, disk string) (*runtime.VM, *guest.Client, *network.Slot, error) {
	if err := a.checkIdentity("the memory of sandbox "+rec.ID, rec.Identity); err != nil {
		return nil, nil, nil, err
	}
	base := snapIn(rec.BaseDir)
	for _, f := range []string{base.RAMFile, base.StateFile, rec.spec(disk).Kernel} {
		if _, err := os.Stat(f); err != nil {
			return nil, nil, nil, fmt.Errorf("sandbox %s: snapshot files missing: %w", rec.ID, err)
		}
	}
	uid, err := a.uidFor(rec.ID)
	if err != nil {
		return nil, nil, nil, err
	}
	slot, tap, err := a.attachNetwork(ctx, rec)
	if err != nil {
		return nil, nil, nil, err
	}
	spec := rec.spec(disk)
	spec.Tap, spec.UID = tap, uid
	if spec.Drives, err = a.drives(rec, filepath.Dir(disk)); err != nil {
		if tap != nil {
			tap.Close()
		}
		if slot != nil {
			slot.Release()
		}
		return nil, nil, nil, err
	}
	vm, err := a.rt.Restore(ctx, runDir, spec, base)
	if tap != nil {
		tap.Close() // the VMM holds its own copy
	}
	if err != nil {
		if slot != nil {
			slot.Release()
		}
		return nil, nil, nil, fmt.Errorf("restore %s: %w", rec.ID, err)
	}
	client, err := guestConnect(ctx, vm.AgentSocket, 30*time.Second)
	if err != nil {
		a.rt.Kill(vm)
		if slot != nil {
			slot.Release()
		}
		return nil, nil, nil, fmt.Errorf("sandbox %s: guest agent did not answer after restore: %w", rec.ID, err)
	}
	return vm, client, slot, nil
}

// checkIdentity refuses to restore state saved under another VMM identity (runtime.Identity): a
// 409, since the request is sound and this host healthy — the state can restore on a host whose
// VMM matches, or be re-made here. Nothing is started, nothing changes.
func (a *Agent) checkIdentity(what string, saved runtime.Identity) error {
	cur := a.rt.Identity()
	if saved.CanRestore(cur) {
		return nil
	}
	return errdefs.WithCode(errdefs.Conflict, "vmm_mismatch", "%s was saved under %s; this host runs %s, and a snapshot restores only under the VMM, version, machine type, CPU model and accelerator that saved it",
		what, saved, cur)
}

// setRunning records a VM that just started for sb (call with sb.mu held).
func (sb *sandbox) setRunning(vm *runtime.VM, client *guest.Client, slot *network.Slot) {
	sb.client = client
	sb.rec.VM = *vm
	sb.rec.State = StateRunning
	sb.slot = slot
	sb.rec.Netns, sb.rec.GuestAddr = "", ""
	if slot != nil {
		sb.rec.Netns, sb.rec.GuestAddr = slot.Namespace, slot.SandboxAddr.String()
	}
}

// watch marks the sandbox `error` with the reason when its VMM ends without being killed.
func (a *Agent) watch(sb *sandbox, vm *runtime.VM) {
	exited := a.rt.Watch(vm)
	go func() {
		ex := <-exited
		sb.mu.Lock()
		if sb.killed || sb.rec.VM.Pid != vm.Pid || sb.rec.State != StateRunning {
			sb.mu.Unlock() // ended on purpose, or an older VMM of a woken sandbox
			return
		}
		sb.rec.State = StateError
		sb.rec.Error = ex.Reason
		sb.persist()
		c := sb.client
		sb.client = nil
		sb.mu.Unlock()
		if c != nil {
			c.Close()
		}
		a.releaseNetwork(sb)
		a.log.Warn("sandbox VMM ended", "sandbox", sb.rec.ID, "reason", ex.Reason)
	}()
}

// adopt loads the sandboxes an earlier agent process left: live VMMs are taken over, dead ones are
// reported `error` with what their logs say.
func (a *Agent) adopt() {
	files, _ := filepath.Glob(filepath.Join(a.sandboxesDir(), "*", "sandbox.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sb := &sandbox{dir: filepath.Dir(f)}
		if err := json.Unmarshal(data, &sb.rec); err != nil || sb.rec.ID == "" {
			a.log.Warn("skipping unreadable sandbox record", "file", f, "err", err)
			continue
		}
		a.sandboxes[sb.rec.ID] = sb
		if sb.rec.Identity.IsZero() {
			// Written before identities were recorded: its VMM (or hibernation snapshot) is taken
			// as this host's, once.
			sb.rec.Identity = a.rt.Identity()
			sb.persist()
		}
		if sb.rec.State == StateCreating {
			sb.rec.State, sb.rec.Error = StateError, "the host agent stopped while this sandbox was being created"
			sb.persist()
		}
		if sb.rec.State != StateRunning {
			continue
		}
		vm := sb.rec.VM
		if vm.UID != 0 {
			a.uids[sb.rec.ID] = vm.UID
		}
		if a.rt.Alive(&vm) {
			a.log.Info("re-adopted running sandbox", "sandbox", sb.rec.ID, "pid", vm.Pid)
		}
		a.adoptNetwork(sb)
		// For a VMM that died while no agent watched, this reports at once.
		a.watch(sb, &vm)
	}
}

func (a *Agent) get(id string) (*sandbox, error) {
	a.mu.Lock()
	sb := a.sandboxes[id]
	a.mu.Unlock()
	if sb == nil {
		return nil, errdefs.NotFoundf("sandbox %s not found", id)
	}
	return sb, nil
}

// Get returns one sandbox.
func (a *Agent) Get(id string) (SandboxInfo, error) {
	sb, err := a.get(id)
	if err != nil {
		return SandboxInfo{}, err
	}
	return sb.info(), nil
}

// List returns every sandbox on this host, oldest first.
func (a *Agent) List() []SandboxInfo {
	type dated struct {
		at   time.Time
		info SandboxInfo
	}
	a.mu.Lock()
	all := make([]dated, 0, len(a.sandboxes))
	for _, sb := range a.sandboxes {
		info := sb.info()
		sb.mu.Lock()
		all = append(all, dated{sb.rec.CreatedAt, info})
		sb.mu.Unlock()
	}
	a.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	out := make([]SandboxInfo, len(all))
	for i, d := range all {
		out[i] = d.info
	}
	return out
}

// Kill ends the sandbox's VMM and frees its disk clone and memory snapshots. Killing an unknown
// sandbox is not an error.
func (a *Agent) Kill(id string) error {
	a.mu.Lock()
	sb := a.sandboxes[id]
	a.mu.Unlock()
	if sb == nil {
		return nil
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	if sb.rec.State == StateCreating {
		sb.mu.Unlock()
		return errdefs.Conflictf("sandbox %s is still being created", id)
	}
	sb.killed = true
	vm := sb.rec.VM
	c := sb.client
	sb.client = nil
	hasVolumes := len(sb.rec.Volumes) > 0 && sb.rec.State == StateRunning
	sb.mu.Unlock()
	if c == nil && hasVolumes && vm.Pid != 0 {
		c, _ = guestConnect(context.Background(), vm.AgentSocket, 5*time.Second)
	}
	if c != nil {
		if hasVolumes {
			// What the guest wrote to its volumes reaches the volume files before the VMM goes.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := c.Sync(ctx); err != nil {
				a.log.Warn("sync before kill failed; the volume may miss the last writes", "sandbox", id, "err", err)
			}
			cancel()
		}
		c.Close()
	}
	if vm.Pid != 0 {
		if err := a.rt.Kill(&vm); err != nil {
			return err
		}
		os.RemoveAll(vm.RunDir)
	}
	a.releaseNetwork(sb)
	if err := os.RemoveAll(sb.dir); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.sandboxes, id)
	delete(a.uids, id)
	a.mu.Unlock()
	a.snapshots.GC()
	return nil
}

// guest returns a live guest agent client for a sandbox, waking it if it is hibernated and
// reconnecting when needed (after an agent restart the first call connects).
func (a *Agent) guest(ctx context.Context, id string) (*guest.Client, *sandbox, error) {
	sb, err := a.awake(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec.State != StateRunning {
		if sb.rec.State == StateError {
			return nil, nil, errdefs.Conflictf("sandbox %s is in state error: %s", id, sb.rec.Error)
		}
		return nil, nil, errdefs.Conflictf("sandbox %s is %s", id, sb.rec.State)
	}
	if sb.client == nil {
		c, err := guestConnect(ctx, sb.rec.VM.AgentSocket, 15*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, err // the caller went away
			}
			return nil, nil, errdefs.WithCode(errdefs.Unavailable, "guest_unreachable", "sandbox %s: guest agent unreachable: %v", id, err)
		}
		sb.client = c
	}
	return sb.client, sb, nil
}

// callErr explains a failed guest call: a VMM that died meanwhile is a conflict with its reason.
func (a *Agent) callErr(sb *sandbox, err error) error {
	var ge *guest.Error
	if errors.As(err, &ge) || sb == nil {
		return err
	}
	if !errors.Is(err, guest.ErrConnectionLost) && !errors.Is(err, guest.ErrClosed) {
		return err // e.g. the caller went away
	}
	sb.mu.Lock()
	vm := sb.rec.VM
	sb.mu.Unlock()
	// A lost connection usually means the VM is going away (a guest panic, a kill): give the VMM
	// a moment to exit so the caller learns why, instead of a bare connection error.
	for i := 0; i < 40 && a.rt.Alive(&vm); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !a.rt.Alive(&vm) {
		sb.mu.Lock()
		killed := sb.killed && sb.rec.State == StateRunning
		sb.mu.Unlock()
		if killed {
			return errdefs.Conflictf("sandbox %s was stopped (killed or hibernated) during the call", sb.rec.ID)
		}
		var reason string
		for i := 0; i < 20 && reason == ""; i++ { // the watcher records the reason
			sb.mu.Lock()
			reason = sb.rec.Error
			sb.mu.Unlock()
			if reason == "" {
				time.Sleep(50 * time.Millisecond)
			}
		}
		if reason == "" {
			reason = "VMM exited"
		}
		return errdefs.Conflictf("sandbox %s stopped: %s", sb.rec.ID, reason)
	}
	return errdefs.WithCode(errdefs.Unavailable, "guest_unreachable", "sandbox %s: lost the connection to its guest agent: %v", sb.rec.ID, err)
}

// Exec limits.
const (
	DefaultExecTimeout = 60 * time.Second
	MaxExecTimeout     = 24 * time.Hour
)

func validateExec(r *ExecRequest) error {
	switch {
	case r.Cmd == "" && len(r.Argv) == 0:
		return errdefs.Invalidf("exec needs cmd (a shell string) or argv")
	case r.Cmd != "" && len(r.Argv) > 0:
		return errdefs.Invalidf("exec takes cmd or argv, not both")
	case r.TimeoutSeconds != nil && (*r.TimeoutSeconds <= 0 || *r.TimeoutSeconds > MaxExecTimeout.Seconds()):
		return errdefs.Invalidf("timeout_seconds must be > 0 and <= %d", int(MaxExecTimeout.Seconds()))
	case len(r.Env) > 256:
		return errdefs.Invalidf("env has more than 256 entries")
	}
	for k := range r.Env {
		if k == "" || len(k) > 256 || containsAny(k, "=\x00") {
			return errdefs.Invalidf("env name %q is not valid", k)
		}
	}
	return nil
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, d := range s {
			if c == d {
				return true
			}
		}
	}
	return false
}

// Exec runs a command in the sandbox, streaming its output to stdout and stderr.
func (a *Agent) Exec(ctx context.Context, id string, req ExecRequest, stdout, stderr io.Writer) (guest.ExecResult, error) {
	if err := validateExec(&req); err != nil {
		return guest.ExecResult{}, err
	}
	c, sb, err := a.guest(ctx, id)
	if err != nil {
		return guest.ExecResult{}, err
	}
	env := map[string]string{}
	for k, v := range sb.rec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	timeout := DefaultExecTimeout
	if req.TimeoutSeconds != nil {
		timeout = time.Duration(*req.TimeoutSeconds * float64(time.Second))
	}
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = strings.NewReader(*req.Stdin)
	}
	res, err := c.Exec(ctx, guest.ExecRequest{Cmd: req.Cmd, Argv: req.Argv, Env: env, Cwd: req.Cwd, User: req.User, Timeout: timeout},
		stdin, stdout, stderr)
	if err != nil {
		return res, a.callErr(sb, err)
	}
	return res, nil
}
