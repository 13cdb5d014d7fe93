package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/storage"
)

// BareRestore is the benchmarks' baseline: the VMM restore of a template's snapshot and the guest
// agent's first answer, with nothing of the agent around it (no HTTP, no record, no bookkeeping;
// the disk clone is made before the clock starts). It returns the milliseconds that took.
func (m *Manager) BareRestore(ctx context.Context, templateName string) (float64, error) {
	tmpl, err := m.Templates.Ensure(ctx, templateName, nil)
	if err != nil {
		return 0, err
	}
	if err := m.checkIdentity("template "+tmpl.Name, tmpl.Identity); err != nil {
		return 0, err
	}
	id := layout.NewID("bare-")
	dir := filepath.Join(m.layout.Sandboxes(), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	disk := filepath.Join(dir, "disk.img")
	if err := storage.Clone(filepath.Join(tmpl.Dir, "disk.img"), disk); err != nil {
		return 0, err
	}
	// The template's machine has spare volume drives: the restore must present the same ones.
	spec := tmpl.Spec(disk)
	if spec.Drives, err = m.volumes.Drives(tmpl.Dir, tmpl.VolumeSlots, nil, dir); err != nil {
		return 0, err
	}
	for _, c := range tmpl.Volumes { // a template's data volume: a private copy, as a create gets
		spec.Drives[c.Slot].File = filepath.Join(dir, volume.CopyFile(c.Slot))
		if err := storage.Clone(filepath.Join(tmpl.Dir, volume.CopyFile(c.Slot)), spec.Drives[c.Slot].File); err != nil {
			return 0, err
		}
	}
	runDir := m.layout.RunDir(id)
	defer os.RemoveAll(runDir)
	start := time.Now()
	vm, err := m.rt.Restore(ctx, runDir, spec, tmpl.Snapshot())
	if err != nil {
		return 0, err
	}
	defer m.rt.Kill(vm)
	c, err := connect(ctx, vm.AgentSocket, 30*time.Second)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	c.Close()
	return float64(d.Microseconds()) / 1000, nil
}
