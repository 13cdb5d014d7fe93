package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/timing"
)

// Where a sandbox is restored: every VM of a sandbox starts here, from its template's memory (a
// create), a snapshot's (a create from a snapshot, a fork) or its own (a wake).

// restoreVM starts rec's VM from rec.BaseDir with disk (and its network slot, if it has a NIC),
// and connects to its guest agent. pre, when set, is a prepared VMM already made rec's
// (usePrepared): only its state is loaded.
func (m *Manager) restoreVM(ctx context.Context, rec *record, runDir, disk string, pre *preparedVMM) (*runtime.VM, *guest.Client, *network.Slot, error) {
	base := snapIn(rec.BaseDir)
	vm, slot, err := m.startVM(ctx, rec, runDir, disk, pre, base)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := connect(ctx, vm.AgentSocket, 30*time.Second)
	if err != nil {
		m.rt.Kill(vm)
		if slot != nil {
			slot.Release()
		}
		return nil, nil, nil, fmt.Errorf("sandbox %s: guest agent did not answer after restore: %w", rec.ID, err)
	}
	return vm, client, slot, nil
}

// startVM is restoreVM up to the VM running: a new VMM restored from base, or the state loaded
// into pre. On an error nothing of it is left (pre ended, the slot released).
func (m *Manager) startVM(ctx context.Context, rec *record, runDir, disk string, pre *preparedVMM, base runtime.Snapshot) (_ *runtime.VM, slot *network.Slot, err error) {
	if pre != nil {
		slot = pre.slot
	}
	defer func() {
		if err != nil && slot != nil {
			slot.Release()
		}
	}()
	if pre != nil {
		err := m.checkIdentity("the memory of sandbox "+rec.ID, rec.Identity)
		if err == nil {
			err = m.rt.Incoming(ctx, pre.vm, runDir, base)
		}
		if err != nil {
			m.rt.Kill(pre.vm) // ended already if Incoming failed
			os.RemoveAll(pre.vm.RunDir)
			return nil, slot, fmt.Errorf("restore %s: %w", rec.ID, err)
		}
		return pre.vm, slot, nil
	}
	if err := m.checkIdentity("the memory of sandbox "+rec.ID, rec.Identity); err != nil {
		return nil, nil, err
	}
	for _, f := range []string{base.RAMFile, base.StateFile, rec.spec(disk).Kernel} {
		if _, err := os.Stat(f); err != nil {
			return nil, nil, fmt.Errorf("sandbox %s: snapshot files missing: %w", rec.ID, err)
		}
	}
	uid, err := m.uidFor(rec.ID)
	if err != nil {
		return nil, nil, err
	}
	timing.Mark(ctx, StepPrepare)
	slot, tap, err := m.attachNetwork(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	if tap != nil {
		defer tap.Close() // the VMM holds its own copy
	}
	timing.Mark(ctx, StepSlot)
	spec := rec.spec(disk)
	spec.Tap, spec.UID = tap, uid
	if spec.Drives, err = m.drives(rec, filepath.Dir(disk)); err != nil {
		return nil, slot, err
	}
	timing.Mark(ctx, StepDrives)
	vm, err := m.rt.Restore(ctx, runDir, spec, base)
	if err != nil {
		return nil, slot, fmt.Errorf("restore %s: %w", rec.ID, err)
	}
	return vm, slot, nil
}

// The steps of a create, fork or wake (timing marks; the runtime and the guest client mark theirs:
// runtime.Step*, guest.Step*), exposed per step in the host agent's /metrics.
const (
	StepResolve     = "resolve"     // template or snapshot looked up, request checked, pressure relieved
	StepAdmit       = "admit"       // memory and volumes admitted, the sandbox in the map
	StepDiskClone   = "disk_clone"  // the disk reflinked
	StepPrepare     = "prepare"     // snapshot files checked, the VMM's uid taken
	StepSlot        = "slot"        // network slot attached (nothing without a NIC)
	StepDrives      = "drives"      // volume drives and spare-slot placeholders
	StepVolumes     = "volumes"     // volumes mounted in the guest
	StepBookkeeping = "bookkeeping" // the record persisted, the VMM watched

	// The steps of a fork's snapshot of its parent (op fork_snapshot; each child is then a fork).
	StepSaveLock   = "save_lock"   // the parent awake and its lifecycle lock taken
	StepSaveSync   = "save_sync"   // room admitted, the guest's buffers written (guest sync)
	StepSave       = "save"        // what the runtime does not mark of its save (runtime.StepSave*)
	StepSaveCommit = "save_commit" // the snapshot's record committed
	StepPublish    = "publish"     // the snapshot pushed to the host's blob store
	StepPull       = "pull"        // a snapshot published by another host pulled from the blob store
)

// checkIdentity refuses to restore state saved under another VMM identity (runtime.Identity): a
// 409, since the request is sound and this host healthy — the state can restore on a host whose
// VMM matches, or be re-made here. Nothing is started, nothing changes.
func (m *Manager) checkIdentity(what string, saved runtime.Identity) error {
	cur := m.rt.Identity()
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
