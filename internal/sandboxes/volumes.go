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

// ResizeVolume grows a volume that no sandbox holds, on its host first, then in the store.
// Volumes only grow (smaller is Invalid); the same size changes nothing. Its host must be up.
func (s *Service) ResizeVolume(ctx context.Context, v store.Volume, sizeMiB int64) (store.Volume, error) {
	switch {
	case sizeMiB < v.SizeMiB:
		return store.Volume{}, errdefs.Invalidf("size_mib %d is smaller than the volume's %d: volumes only grow", sizeMiB, v.SizeMiB)
	case sizeMiB == v.SizeMiB:
		return v, nil
	}
	const refused = "resizing is refused while attached"
	if err := InUse(s.store.CheckAttach(ctx, v.ID, false), refused); err != nil {
		return store.Volume{}, err
	}
	err := s.onHost(ctx, v.HostID, VolumeHostCallTimeout, func(ctx context.Context, c *agentclient.Client) error {
		_, err := c.ResizeVolume(ctx, v.ID, sizeMiB)
		return err
	})
	if errors.Is(err, store.ErrNotFound) || err == errHostDown {
		return store.Volume{}, errdefs.Capacityf("host %s of volume %s is down", v.HostID, v.ID)
	}
	if err != nil {
		return store.Volume{}, err
	}
	v, err = s.store.ResizeVolume(context.WithoutCancel(ctx), v.TeamID, v.ID, sizeMiB)
	if err != nil {
		return store.Volume{}, InUse(err, refused)
	}
	s.log.Info("volume resized", "volume", v.ID, "host", v.HostID, "size_mib", v.SizeMiB)
	return v, nil
}

// DeleteVolume deletes the team's volume that no sandbox holds: on its host, then in the store.
// A host that is down or does not answer does not block the delete: the volume is recorded
// deleted, and the host's next reconcile deletes it there; a host that refuses (a sandbox there
// still has it) does. Deleting it again is not an error; another team's is NotFound.
func (s *Service) DeleteVolume(ctx context.Context, teamID, id string) error {
	v, err := s.store.GetVolume(ctx, id)
	if err := ownedBy(err, teamID, v.TeamID, "volume", id); err != nil || v.Deleted {
		return err
	}
	const refused = "deleting is refused while attached"
	if err := InUse(s.store.CheckAttach(ctx, v.ID, false), refused); err != nil {
		return err
	}
	err = s.onHost(ctx, v.HostID, VolumeHostCallTimeout, func(ctx context.Context, c *agentclient.Client) error {
		return c.DeleteVolume(ctx, v.ID)
	})
	var ae *agentclient.Error
	switch {
	case err == nil, err == errHostDown, isAgentStatus(err, errdefs.NotFound):
	case errors.As(err, &ae):
		return err // the host refused: nothing was deleted
	default:
		s.log.Warn("deleting a volume on its host failed; recorded deleted, the host's reconcile will delete it", "volume", v.ID, "host", v.HostID, "err", err)
	}
	if err := s.store.DeleteVolume(context.WithoutCancel(ctx), teamID, v.ID); err != nil {
		return InUse(err, refused)
	}
	s.log.Info("volume deleted", "volume", v.ID, "host", v.HostID)
	return nil
}
