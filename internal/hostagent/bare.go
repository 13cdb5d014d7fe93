package hostagent

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/pandastack/pandastack/internal/storage"
)

// BareRestore is the benchmarks' baseline: the VMM restore of a template's snapshot and the guest
// agent's first answer, with nothing of the agent around it (no HTTP, no record, no bookkeeping;
// the disk clone is made before the clock starts). It returns the milliseconds that took.
func (a *Agent) BareRestore(ctx context.Context, templateName string) (float64, error) {
	tmpl, err := a.templates.Ensure(ctx, templateName, nil)
	if err != nil {
		return 0, err
	}
	if err := a.checkIdentity("template "+tmpl.Name, tmpl.Identity); err != nil {
		return 0, err
	}
	id := "bare-" + newID()[3:]
	dir := filepath.Join(a.sandboxesDir(), id)
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
	if spec.Drives, err = a.drives(&record{TemplateDir: tmpl.Dir, VolumeSlots: tmpl.VolumeSlots}, dir); err != nil {
		return 0, err
	}
	runDir := a.runDir(id)
	defer os.RemoveAll(runDir)
	start := time.Now()
	vm, err := a.rt.Restore(ctx, runDir, spec, tmpl.Snapshot())
	if err != nil {
		return 0, err
	}
	defer a.rt.Kill(vm)
	c, err := guestConnect(ctx, vm.AgentSocket, 30*time.Second)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	c.Close()
	return float64(d.Microseconds()) / 1000, nil
}
