package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/sandboxstate"
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
	// Published names the blob-store publication of the current hibernation ("" while running:
	// a wake makes it stale).
	Published string `json:"published,omitempty"`
	// LazyMount: the memory the sandbox was adopted with is served lazily from this mount
	// (snapshot.Lazy) until the sandbox hibernates again or is killed.
	LazyMount string `json:"lazy_mount,omitempty"`
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
	op   sync.Mutex
	mu   sync.Mutex
	dial sync.Mutex // one connect to the guest agent at a time (guest)
	rec  record
	// lastUsed is when an API call last touched the sandbox and busy counts calls in flight
	// (for idle hibernation: a long exec is not idleness).
	lastUsed time.Time
	busy     int
	client   *guest.Client
	killed   bool
	dir      string
	slot     *network.Slot // while the VMM runs, if it has a NIC
	// usage is the guest's figures a metrics call last measured a CPU share to (usagePct), and
	// when they were read: the base of the next call's share.
	usage    guest.Usage
	usageAt  time.Time
	usagePct float64
	// procWatch: its process table is looked at for exits (exits.go); exitsSeen are the exits
	// in it already logged (or inherited).
	procWatch bool
	exitsSeen map[exitKey]bool
	// inheritBefore, until its first look, is when the restore of a copy (a fork's child, a
	// create from a snapshot) began, and inheritSeq the guest agent's last exit number at the
	// restore's handshake (guest.Ready.ExitSeq): the exits in its table numbered up to it are its
	// source's. Agents of older builds number no exits: then those that ended before
	// inheritBefore are taken as the source's (the guest's clock may run ahead: not exact).
	inheritBefore time.Time
	inheritSeq    uint64
	// watchGen counts watchProcs calls: a look that began before one does not turn procWatch off.
	watchGen uint64
	look     sync.Mutex // one look at a time, so each compares with the one before

}

func (sb *sandbox) info() hostapi.Sandbox {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	r := sb.rec
	info := hostapi.Sandbox{ID: r.ID, Template: r.Template, State: r.State, Error: r.Error, CreatedAt: hostapi.Time(r.CreatedAt),
		PID: r.VM.Pid, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB, ReadyMS: r.ReadyMs, SnapshotID: r.SnapshotID, ForkOf: r.ForkOf}
	if r.State != StateRunning {
		info.PID = 0
	}
	if r.State == StateHibernated {
		info.Hibernated = r.Published
	}
	info.Volumes = r.Volumes
	return info
}

func (sb *sandbox) persist() error {
	return layout.WriteJSON(filepath.Join(sb.dir, "sandbox.json"), sb.rec)
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

// adopt loads the sandboxes an earlier agent process left: live VMMs are taken over, dead ones are
// reported `error` with what their logs say.
func (m *Manager) adopt() {
	files, _ := filepath.Glob(filepath.Join(m.layout.Sandboxes(), "*", "sandbox.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sb := &sandbox{dir: filepath.Dir(f)}
		if err := json.Unmarshal(data, &sb.rec); err != nil || sb.rec.ID == "" {
			m.log.Warn("skipping unreadable sandbox record", "file", f, "err", err)
			continue
		}
		m.sandboxes[sb.rec.ID] = sb
		if sb.rec.Identity.IsZero() {
			// Written before identities were recorded: its VMM (or hibernation snapshot) is taken
			// as this host's, once.
			sb.rec.Identity = m.rt.Identity()
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
			m.uids[sb.rec.ID] = vm.UID
		}
		if m.rt.Alive(&vm) {
			m.log.Info("re-adopted running sandbox", "sandbox", sb.rec.ID, "pid", vm.Pid)
			// An agent killed while it held the VM paused (a hibernate's or snapshot's save)
			// left it so: running again, as its record says. A no-op for a running VM.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := m.rt.Resume(ctx, &vm); err != nil {
				m.log.Warn("could not resume a re-adopted sandbox", "sandbox", sb.rec.ID, "err", err)
			}
			cancel()
		}
		sb.procWatch = true // its processes' exits are looked at again
		m.dropUnrecordedMem(sb)
		m.adoptNetwork(sb)
		// For a VMM that died while no agent watched, this reports at once.
		m.watch(sb, &vm)
	}
}

// dropUnrecordedMem removes a sandbox's memory snapshots newer than its record's: a hibernate
// whose agent was killed after saving, before recording it.
func (m *Manager) dropUnrecordedMem(sb *sandbox) {
	dirs, _ := filepath.Glob(filepath.Join(sb.dir, "mem-*"))
	for _, d := range dirs {
		if gen, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "mem-")); err == nil && gen > sb.rec.MemGen {
			m.log.Info("removing a hibernation its agent did not record", "sandbox", sb.rec.ID, "dir", d)
			os.RemoveAll(d)
		}
	}
}

func (m *Manager) get(id string) (*sandbox, error) {
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	if sb == nil {
		return nil, errdefs.NotFoundf("sandbox %s not found", id)
	}
	return sb, nil
}

// Get returns one sandbox.
func (m *Manager) Get(id string) (hostapi.Sandbox, error) {
	sb, err := m.get(id)
	if err != nil {
		return hostapi.Sandbox{}, err
	}
	return sb.info(), nil
}

// List returns every sandbox on this host, oldest first.
func (m *Manager) List() []hostapi.Sandbox {
	type dated struct {
		at   time.Time
		info hostapi.Sandbox
	}
	m.mu.Lock()
	all := make([]dated, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		info := sb.info()
		sb.mu.Lock()
		all = append(all, dated{sb.rec.CreatedAt, info})
		sb.mu.Unlock()
	}
	m.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	out := make([]hostapi.Sandbox, len(all))
	for i, d := range all {
		out[i] = d.info
	}
	return out
}

// Kill ends the sandbox's VMM and frees its disk clone and memory snapshots. Killing an unknown
// sandbox is not an error.
func (m *Manager) Kill(id string) error {
	m.mu.Lock()
	sb := m.sandboxes[id]
	m.mu.Unlock()
	if sb == nil {
		return nil
	}
	m.DropForkPrepared(id)
	m.DropWakePrepared(id)
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	if sb.rec.State == StateCreating {
		sb.mu.Unlock()
		return errdefs.Conflictf("sandbox %s is still being created", id)
	}
	vm := sb.rec.VM
	c := sb.client
	look := sb.procWatch && c != nil && sb.rec.State == StateRunning
	sb.mu.Unlock()
	if look { // the exits since the last look, before the VM goes
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.lookExits(ctx, sb, c)
		cancel()
	}
	sb.mu.Lock()
	sb.killed = true
	c = sb.client
	sb.client = nil
	hasVolumes := len(sb.rec.Volumes) > 0 && sb.rec.State == StateRunning
	sb.mu.Unlock()
	if c == nil && hasVolumes && vm.Pid != 0 {
		c, _ = connect(context.Background(), vm.AgentSocket, 5*time.Second)
	}
	if c != nil {
		if hasVolumes {
			// What the guest wrote to its volumes reaches the volume files before the VMM goes.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := c.Sync(ctx); err != nil {
				m.log.Warn("sync before kill failed; the volume may miss the last writes", "sandbox", id, "err", err)
			}
			cancel()
		}
		c.Close()
	}
	if vm.Pid != 0 {
		if err := m.rt.Kill(&vm); err != nil {
			return err
		}
		os.RemoveAll(vm.RunDir)
	}
	m.releaseNetwork(sb)
	m.freeLazyMem(sb)
	if err := os.RemoveAll(sb.dir); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.sandboxes, id)
	delete(m.uids, id)
	m.mu.Unlock()
	m.snapshots.GC()
	return nil
}
