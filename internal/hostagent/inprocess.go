package hostagent

import (
	"context"

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
