// Package sandbox is the host's sandbox manager: where a sandbox is created (restored from its
// template's or a snapshot's memory), forked, snapshotted, hibernated, woken, re-adopted after an
// agent restart and killed, and where exec and file calls reach its guest agent. It owns the
// host's memory policy (memory.go: commit limit, pressure, idle hibernation), each running VM's
// network slot and VMM uid.
//
// Files: create.go (Create: template or snapshot, admission, launch), restore.go (restoreVM: where
// every sandbox VM is restored — create, fork, wake), prepared.go (a VMM started per template
// before its next create, which then only loads its state), preparedfork.go (one per sandbox
// forked from last, for its next fork's first child), sandbox.go (records, states, adopt, get,
// list, kill), guest.go (exec and file calls, WithGuest, Reach), lifecycle.go (snapshot, fork,
// hibernate, wake, idle), memory.go, network.go, uids.go, volumes.go (which sandbox holds which
// volume), bare.go (the benchmarks' baseline restore).
//
// Invariants: a sandbox is in the manager's map from the moment its create is admitted until it
// is killed (so its memory and volumes count meanwhile); sandbox.json under layout.Sandboxes()
// is enough to re-adopt its VMM; a restore checks the VMM identity its memory was saved under.
package sandbox

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/host/disk"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/timing"
)

// Config is what the manager works with.
type Config struct {
	Limits
	Layout    layout.Layout
	Runtime   runtime.Runtime
	Net       *network.Pool // nil: networking off
	Disk      *disk.Admission
	Volumes   *volume.Store
	Snapshots *snapshot.Store
	Log       *slog.Logger
	// FullSnapshots streams all guest RAM for snapshots instead of the diff against the
	// sandbox's base.
	FullSnapshots bool
	// Cgroup, when set, is the VMMs' parent cgroup: VMMs are confined, each sandbox's with its
	// own uid in JailUIDBase+1 … JailUIDBase+JailUIDs-1.
	Cgroup                *cgroup.Manager
	JailUIDBase, JailUIDs int
	// PreparedTemplates is how many templates, those created from last, have a VMM prepared for
	// their next create (prepared.go; 0: none).
	PreparedTemplates int
	// PreparedIdle ends a prepared VMM no create took for this long (0: never).
	PreparedIdle time.Duration
}

// Manager is one host's sandboxes.
type Manager struct {
	cfg       Config
	log       *slog.Logger
	rt        runtime.Runtime
	net       *network.Pool
	layout    layout.Layout
	disk      *disk.Admission
	volumes   *volume.Store
	snapshots *snapshot.Store
	cg        *cgroup.Manager
	confined  bool
	steps     *timing.Steps
	// Templates resolves and bakes a create's template (set before use).
	Templates *bake.Templates

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	uids      map[string]int // sandbox id -> its VMMs' uid (confinement on)
	closed    bool
	// reservedMiB is the guest memory of VMs admitted that are not running sandboxes: bake and
	// build VMs, sandboxes being woken.
	reservedMiB int
	pressureMu  sync.Mutex // one pressure relief at a time
	exits       exitLog    // background processes' exits (exits.go)
	prep        *preparedPool
}

// New returns the manager of cfg and re-adopts the sandboxes an earlier agent process left.
func New(cfg Config) *Manager {
	m := &Manager{cfg: cfg, log: cfg.Log, rt: cfg.Runtime, net: cfg.Net, layout: cfg.Layout, disk: cfg.Disk,
		volumes: cfg.Volumes, snapshots: cfg.Snapshots, cg: cfg.Cgroup, confined: cfg.Cgroup != nil,
		steps:     timing.NewSteps("pandastack_host_sandbox_step_seconds", "Time of each step of a successful sandbox create, fork (each child) or wake on this host."),
		sandboxes: map[string]*sandbox{}, uids: map[string]int{}, prep: newPreparedPool(cfg.PreparedTemplates, cfg.PreparedIdle)}
	m.adopt()
	return m
}

// Start runs the background loops until ctx ends: looking for processes' exits (exits.go), idle
// hibernation (idle > 0) and memory pressure relief (with a watermark).
func (m *Manager) Start(ctx context.Context, idle time.Duration) {
	go m.exitLoop(ctx)
	if idle > 0 {
		go m.idleLoop(ctx, idle)
	}
	if m.cfg.MemoryWatermarkMiB > 0 {
		go m.pressureLoop(ctx)
	}
}

// Close stops taking creates, ends the prepared VMMs and closes the guest channels; sandboxes'
// VMs are left running (a new agent re-adopts them). It reports whether any VMM still runs.
func (m *Manager) Close() (running bool) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.closePrepared()
	m.mu.Lock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.Unlock()
	for _, sb := range sbs {
		sb.closeGuest()
		sb.mu.Lock()
		vm := sb.rec.VM
		sb.mu.Unlock()
		running = running || m.rt.Alive(&vm)
	}
	return running
}

// Committed is the guest memory of what runs or is being started.
func (m *Manager) Committed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.committedLocked()
}

// UsersOf counts the sandboxes of template name (bake.VMs).
func (m *Manager) UsersOf(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, sb := range m.sandboxes {
		if sb.rec.Template == name {
			n++
		}
	}
	return n
}

// Running is what runs for sandbox id: its VMM and network slot (for diagnostics and tests).
func (m *Manager) Running(id string) (runtime.VM, *network.Slot, error) {
	sb, err := m.get(id)
	if err != nil {
		return runtime.VM{}, nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.rec.VM, sb.slot, nil
}

// WriteMetrics writes the step histograms of creates, forks and wakes (Prometheus text).
func (m *Manager) WriteMetrics(w io.Writer) { m.steps.Write(w) }

// connect opens a VM's guest agent channel, bounded so a dead guest fails instead of hanging.
func connect(ctx context.Context, socket string, timeout time.Duration) (*guest.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return guest.Connect(ctx, socket)
}
