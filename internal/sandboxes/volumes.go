package sandboxes

import (
	"context"
	"errors"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
)

// VolumeHostCallTimeout bounds one volume call on a host.
const VolumeHostCallTimeout = 2 * time.Minute

// InUse words a volume held by a sandbox as a Conflict saying what is refused; other errors pass.
func InUse(err error, what string) error {
	var iu *store.VolumeInUseError
	if !errors.As(err, &iu) {
		return err
	}
	mode := "read-write"
	if iu.Holder.ReadOnly {
		mode = "read-only"
	}
	return errdefs.Conflictf("volume %s is attached %s to sandbox %s at %s: %s (kill that sandbox first)", iu.VolumeID, mode, iu.Holder.SandboxID, iu.Holder.MountPath, what)
}

// resolveVolumes loads the team's volumes of a create, checks they are on one host and free for
// the asked mode, and returns that host. Another team's, a deleted or a missing volume is NotFound.
func (s *Service) resolveVolumes(ctx context.Context, teamID string, atts []store.VolumeAttachment) (string, error) {
	host, first := "", ""
	for _, a := range atts {
		v, err := s.store.GetTeamVolume(ctx, teamID, a.VolumeID)
		if errors.Is(err, store.ErrNotFound) {
			return "", errdefs.NotFoundf("volume %s not found", Truncate(a.VolumeID))
		}
		if err != nil {
			return "", err
		}
		if host == "" {
			host, first = v.HostID, v.ID
		} else if v.HostID != host {
			return "", errdefs.Conflictf("volumes of one sandbox must be on one host: %s is on %s, %s on %s", first, host, v.ID, v.HostID)
		}
		if err := s.store.CheckAttach(ctx, v.ID, a.ReadOnly); err != nil {
			return "", InUse(err, "it cannot also be attached "+map[bool]string{true: "read-only", false: "read-write"}[a.ReadOnly])
		}
	}
	return host, nil
}

// RefuseWithVolumes is the Conflict of a snapshot or fork (what) of a sandbox that has volumes.
func (s *Service) RefuseWithVolumes(ctx context.Context, sb store.Sandbox, what string) error {
	vols, err := s.store.SandboxVolumes(ctx, sb.ID)
	if err != nil {
		return err
	}
	if len(vols) > 0 {
		return errdefs.Conflictf("sandbox %s has volumes (%s at %s): %s of a sandbox with volumes are refused", sb.ID, vols[0].VolumeID, vols[0].MountPath, what)
	}
	return nil
}

// CreateVolume makes a volume on the best host (the next one when a host is unreachable, full or
// out of disk) and records it; if the store fails, the volume is deleted on the host again.
func (s *Service) CreateVolume(ctx context.Context, teamID, name string, sizeMiB int64) (store.Volume, error) {
	hosts, err := s.sched.PlaceVolume(ctx)
	if err != nil {
		return store.Volume{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), VolumeHostCallTimeout)
	defer cancel()
	volID := auth.NewID("vol_")
	var host store.Host
	size := sizeMiB
	err = s.tryHosts("a volume", hosts, []string{"capacity", "no_space"}, func(h store.Host) error {
		av, err := s.sched.Client(h).CreateVolume(ctx, agentclient.CreateVolumeRequest{ID: volID, SizeMiB: sizeMiB})
		if err != nil {
			return err
		}
		if av.SizeMiB > 0 {
			size = av.SizeMiB
		}
		host = h
		return nil
	})
	if err != nil {
		return store.Volume{}, err
	}
	rec, err := s.store.CreateVolume(ctx, store.Volume{ID: volID, TeamID: teamID, Name: name, SizeMiB: size, HostID: host.ID, CreatedAt: s.clock()})
	if err != nil {
		if derr := s.sched.Client(host).DeleteVolume(ctx, volID); derr != nil {
			s.log.Error("could not delete a volume the store failed to record", "volume", volID, "host", host.ID, "err", derr)
		}
		return store.Volume{}, err
	}
	s.log.Info("volume created", "volume", volID, "team", teamID, "host", host.ID, "size_mib", size)
	return rec, nil
}
