// Package runtime is the VMM-neutral view of a microVM: boot one cold for a bake, snapshot it,
// restore clones from the snapshot, watch and stop them. Drivers live in subpackages (qemu).
package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/pandastack/pandastack/internal/storage"
)

// Spec is the machine a template fixes at bake time. A restore must use the same Spec as the
// bake it restores (the snapshot holds the device set and guest RAM size).
type Spec struct {
	VCPUs     int
	MemoryMiB int
	Kernel    string
	Initrd    string
	// Disk is the raw root disk image the guest sees as /dev/vda.
	Disk string
	// NIC gives the machine a virtio-net device. It is part of the machine's shape: a snapshot
	// baked with a NIC restores only with one.
	NIC bool
	// Drives are extra virtio-blk devices after the root disk (volume slots), in order. Their
	// number is part of the machine's shape; the files behind them may change between a bake and
	// a restore.
	Drives []Drive `json:"-"`
	// Tap is the open tap device backing the NIC (the network slot's tap0). The VMM gets its own
	// copy; the caller closes this one once Boot or Restore returns.
	Tap *os.File `json:"-"`
	// UID is the unprivileged user the VMM runs as when the driver confines VMMs (0: the
	// driver's default, used for template bakes). One per sandbox: VMMs cannot signal or trace
	// each other.
	UID int `json:"-"`
}

// Drive is one extra disk. The guest finds it by Serial (/sys/block/vd*/serial).
type Drive struct {
	Serial string
	File   string
	// ReadOnly: the guest cannot change File — its writes go to a throw-away overlay, so a
	// filesystem on File can still be mounted (journal replay included) without touching it.
	ReadOnly bool
}

// Snapshot is a baked machine state: guest RAM in a file plus the VMM's device state.
type Snapshot struct {
	RAMFile   string
	StateFile string
}

// VM is a running VMM process. It is plain data so the host agent can persist it and re-adopt
// the process after a restart.
type VM struct {
	Pid int `json:"pid"`
	// StartTicks is the process start time (/proc/PID/stat field 22); with Pid it tells our VMM
	// from an unrelated process that got the same pid later.
	StartTicks uint64 `json:"start_ticks"`
	// RunDir holds the VMM's sockets and logs.
	RunDir string `json:"run_dir"`
	// AgentSocket is the unix socket of the guest agent's channel.
	AgentSocket string `json:"agent_socket"`
	// UID the VMM runs as (0: not confined) and the cgroup directories it was put in (removed
	// when it ends, also by an agent that re-adopted it).
	UID     int      `json:"uid,omitempty"`
	Cgroups []string `json:"cgroups,omitempty"`
}

// SnapshotOptions tune one snapshot.
type SnapshotOptions struct {
	// WhilePaused runs with the guest stopped (to copy its disk consistently with memory).
	WhilePaused func() error
	// KeepPaused leaves the VM stopped afterwards (it is about to be ended: hibernate).
	KeepPaused bool
	// Full streams all guest RAM instead of the diff against base (the fallback path).
	Full bool
	// NoSync skips flushing the device state file (no fsync): for a snapshot that does not
	// outlive the VMMs restored from it (a fork's), which a host crash ends anyway, or whose
	// durable copy is elsewhere (one published to a blob store). The RAM file is never flushed.
	NoSync bool
}

// SnapshotStats describes one snapshot.
type SnapshotStats struct {
	Pause      time.Duration // guest stopped for this long
	DirtyBytes int64         // guest memory copied (what the VM wrote since its base)
	// Read are the runs of the new RAM file that the VM had read from its base (its working
	// set): read into the RAM file's page cache (storage.ReadRuns), a VM restored from it does
	// not fault them in from disk. Empty when the driver does not know them.
	Read []storage.Run
	// Written are the runs of the new RAM file the diff wrote; the rest of it is the base RAM
	// file's blocks (a reflink). A publish names the chunks outside them from the base's digests
	// without reading or mapping them (artifact.Derived). Nil on the full path.
	Written []storage.Run
	Full    bool // the full-RAM path was used
}

// Exit says how a VMM ended.
type Exit struct {
	At     time.Time
	Reason string // human-readable: exit status, guest panic, VMM error
}

// Identity is what a VMM's saved state depends on: which VMM and build wrote it, the machine
// type and the CPU model the guest saw, and the accelerator. A snapshot holds device state in the
// VMM's own migration format and CPU state for one CPU model, so it restores only under the same
// identity. Every snapshot's metadata records it; every restore checks it (docs/hostagent-api.md).
type Identity struct {
	VMM string `json:"vmm"`
	// Version is the VMM build, package revision included (distributions patch device models).
	Version string `json:"version"`
	// Machine is the machine type (QEMU's -M), CPU the CPU model the guest sees (QEMU's -cpu,
	// with the host CPU's model when that passes the host's features through).
	Machine string `json:"machine"`
	CPU     string `json:"cpu"`
	Accel   string `json:"accel"`
	// Devices is the revision of the devices the driver gives every VM (their options change the
	// state a guest negotiated at boot); empty for state saved before revisions were recorded.
	Devices string `json:"devices,omitempty"`
}

func (i Identity) String() string {
	s := fmt.Sprintf("%s %s, machine %s, cpu %s, accel %s", i.VMM, i.Version, i.Machine, i.CPU, i.Accel)
	if i.Devices != "" {
		s += ", devices " + i.Devices
	}
	return s
}

// IsZero: no identity recorded (a record written before identities were).
func (i Identity) IsZero() bool { return i == Identity{} }

// CanRestore reports whether state saved under i can be restored under cur. Every field must
// match exactly: QEMU promises migration compatibility across versions only for versioned
// machine types, which microvm is not; the device-state stream of one build is not guaranteed
// to load in another; guest CPU state and the features the guest kernel chose at boot belong to
// the CPU model; and a TCG CPU state does not load into KVM (nor back). An exact match is the
// only rule that cannot resume a guest into subtly wrong hardware. The same holds for the device
// options the driver sets (Devices).
func (i Identity) CanRestore(cur Identity) bool { return i == cur }

// Runtime is one VMM driver.
type Runtime interface {
	Name() string
	// Identity is what this driver's snapshots depend on (see Identity); fixed for its lifetime.
	Identity() Identity
	// Accel is the CPU accelerator in use ("kvm" or "tcg").
	Accel() string
	// Boot cold-boots spec with guest RAM in ramFile (created, shared), for a bake.
	Boot(ctx context.Context, runDir string, spec Spec, ramFile string) (*VM, error)
	// SaveSnapshot writes the device state of a booted VM to stateFile (RAM stays in its file) and
	// leaves the VM paused.
	SaveSnapshot(ctx context.Context, vm *VM, stateFile string) error
	// Restore starts a new VMM from snap with the RAM file mapped private (copy on write), running.
	// It marks its steps (Step*) in ctx's timing trace.
	Restore(ctx context.Context, runDir string, spec Spec, snap Snapshot) (*VM, error)
	// Prepare and Incoming are Restore in two halves, so the first can run before a restore is
	// asked for. Prepare starts spec's VMM, confined, waiting for its state, with ramFile mapped
	// private but unread: it holds no guest memory and runs no guest. Incoming moves its run dir
	// to runDir (updating vm), loads snap's device state and runs it (marking StepMigrate,
	// StepCont); a VM whose Incoming fails is ended.
	Prepare(ctx context.Context, runDir string, spec Spec, ramFile string) (*VM, error)
	Incoming(ctx context.Context, vm *VM, runDir string, snap Snapshot) error
	// Snapshot saves a VM restored from base into out, pausing it meanwhile.
	Snapshot(ctx context.Context, vm *VM, base, out Snapshot, opts SnapshotOptions) (SnapshotStats, error)
	// Pause and Resume stop and restart a VM's vCPUs.
	Pause(ctx context.Context, vm *VM) error
	Resume(ctx context.Context, vm *VM) error
	// RefreshDrive makes the guest re-read the size of the drive with serial (after a restore
	// pointed it at a file of another size than the bake's).
	RefreshDrive(ctx context.Context, vm *VM, serial string) error
	// Watch returns a channel that yields once when the VMM process ends.
	Watch(vm *VM) <-chan Exit
	// Alive reports whether vm's process still runs (and is the same process).
	Alive(vm *VM) bool
	// Kill ends the VMM process and waits for it to go.
	Kill(vm *VM) error
}

// ErrVMMExited is returned when a VMM dies while being started.
var ErrVMMExited = errors.New("VMM exited")

// The steps of a restore a driver marks in the ctx's timing trace (internal/timing).
const (
	StepConfine = "vmm_confine"      // the VMM's cgroup and jail prepared
	StepSpawn   = "vmm_spawn"        // the VMM process started
	StepQMP     = "vmm_qmp"          // the VMM answers on its control socket
	StepMigrate = "migrate_incoming" // the device state loaded
	StepCont    = "cont"             // the vCPUs resumed (when the state was saved paused)

	// The steps of a diff snapshot (Snapshot).
	StepSaveStop    = "save_stop"    // QMP connected, the vCPUs stopped
	StepSaveMemory  = "save_memory"  // the RAM file cloned and the pages copied into it
	StepSaveDevices = "save_devices" // the device state written
	StepSavePaused  = "save_paused"  // the caller's work while paused (the disk's reflink), vCPUs resumed
	StepSaveStream  = "save_stream"  // the restorable stream spliced
)
