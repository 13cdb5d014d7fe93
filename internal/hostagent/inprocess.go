package hostagent

import (
	"context"

	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// In-process entry points: what the benchmarks (bench/) and the tests call on an Agent without
// HTTP. Each is the call the API makes for the route named.

// Create restores a new sandbox (POST /v1/sandboxes).
func (a *Agent) Create(ctx context.Context, req hostapi.CreateRequest) (hostapi.Sandbox, error) {
	return a.sandboxes.Create(ctx, req)
}

// Get returns one sandbox (GET /v1/sandboxes/{id}).
func (a *Agent) Get(id string) (hostapi.Sandbox, error) { return a.sandboxes.Get(id) }

// List returns every sandbox on this host, oldest first (GET /v1/sandboxes).
func (a *Agent) List() []hostapi.Sandbox { return a.sandboxes.List() }

// Kill ends a sandbox (DELETE /v1/sandboxes/{id}).
func (a *Agent) Kill(id string) error { return a.sandboxes.Kill(id) }

// Fork makes count children of a running sandbox (POST /v1/sandboxes/{id}/fork).
func (a *Agent) Fork(ctx context.Context, id string, count int) ([]hostapi.Sandbox, error) {
	return a.sandboxes.Fork(ctx, id, count)
}

// Hibernate saves a sandbox's memory and ends its VMM (POST /v1/sandboxes/{id}/hibernate).
func (a *Agent) Hibernate(ctx context.Context, id string) (hostapi.Sandbox, error) {
	return a.sandboxes.Hibernate(ctx, id)
}

// Wake restores a hibernated sandbox (POST /v1/sandboxes/{id}/wake).
func (a *Agent) Wake(ctx context.Context, id string) (hostapi.Sandbox, error) {
	return a.sandboxes.Wake(ctx, id)
}

// SnapshotSandbox saves a running sandbox as a snapshot object (POST /v1/sandboxes/{id}/snapshots).
func (a *Agent) SnapshotSandbox(ctx context.Context, id string) (hostapi.Snapshot, error) {
	return a.sandboxes.SnapshotSandbox(ctx, id)
}

// SnapshotForFork is SnapshotSandbox for a fork onto another host: no guest sync
// (POST /v1/sandboxes/{id}/snapshots?for=fork).
func (a *Agent) SnapshotForFork(ctx context.Context, id string) (hostapi.Snapshot, error) {
	return a.sandboxes.SnapshotForFork(ctx, id)
}

// SnapshotSandboxFull is SnapshotSandbox on the full-RAM path (for comparisons; no route).
func (a *Agent) SnapshotSandboxFull(ctx context.Context, id string) (hostapi.Snapshot, error) {
	return a.sandboxes.SnapshotSandboxFull(ctx, id)
}

// DeleteSnapshot removes a snapshot (DELETE /v1/snapshots/{id}).
func (a *Agent) DeleteSnapshot(id string) error { return a.snapshots.Delete(id) }

// CreateVolume makes an empty volume (POST /v1/volumes).
func (a *Agent) CreateVolume(ctx context.Context, id string, sizeMiB int64) (hostapi.Volume, error) {
	return a.volumes.Create(ctx, id, sizeMiB)
}

// DeleteVolume removes a detached volume (DELETE /v1/volumes/{id}).
func (a *Agent) DeleteVolume(id string) error { return a.volumes.Delete(id) }

// EnsureTemplate returns the baked template, baking it first if this host has not
// (POST /v1/templates/{name}/bake).
func (a *Agent) EnsureTemplate(ctx context.Context, name string, progress func(string)) (*bake.Template, error) {
	return a.templates.Ensure(ctx, name, progress)
}

// BareRestore is the benchmarks' baseline restore of a template (no route).
func (a *Agent) BareRestore(ctx context.Context, templateName string) (float64, error) {
	return a.sandboxes.BareRestore(ctx, templateName)
}

// Accel reports the CPU accelerator in use.
func (a *Agent) Accel() string { return a.rt.Accel() }

// ImageSpec is what the image builder makes on the host for a recipe (bake.ImageSpec).
func ImageSpec(r template.Recipe) image.RootfsSpec { return bake.ImageSpec(r) }
