package hostagent

import (
	"context"

	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// In-process entry points: what the benchmarks (bench/) call on an Agent without HTTP. Each is the
// same call the API makes.

// CreateVolume makes an empty volume (POST /v1/volumes).
func (a *Agent) CreateVolume(ctx context.Context, id string, sizeMiB int64) (hostapi.Volume, error) {
	return a.volumes.Create(ctx, id, sizeMiB)
}

// DeleteVolume removes a detached volume (DELETE /v1/volumes/{id}).
func (a *Agent) DeleteVolume(id string) error { return a.volumes.Delete(id) }

// DeleteSnapshot removes a snapshot (DELETE /v1/snapshots/{id}).
func (a *Agent) DeleteSnapshot(id string) error { return a.snapshots.Delete(id) }

// EnsureTemplate returns the baked template, baking it first if this host has not
// (POST /v1/templates/{name}/bake).
func (a *Agent) EnsureTemplate(ctx context.Context, name string, progress func(string)) (*bake.Template, error) {
	return a.templates.Ensure(ctx, name, progress)
}

// ImageSpec is what the image builder makes on the host for a recipe (bake.ImageSpec).
func ImageSpec(r template.Recipe) image.RootfsSpec { return bake.ImageSpec(r) }

// vms is the agent's side of bake.VMs.
type vms struct{ a *Agent }

func (v vms) CheckSize(what string, vcpus, memMiB int) error {
	return v.a.checkSize(what, vcpus, memMiB)
}
func (v vms) Reserve(what string, memMiB int) (func(), error) { return v.a.reserve(what, memMiB) }
func (v vms) RelieveForCreate(ctx context.Context, what string) error {
	return v.a.relieveForCreate(ctx, what)
}
func (v vms) UsersOf(name string) int {
	v.a.mu.Lock()
	defer v.a.mu.Unlock()
	n := 0
	for _, sb := range v.a.sandboxes {
		if sb.rec.Template == name {
			n++
		}
	}
	return n
}
