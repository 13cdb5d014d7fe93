package sandboxes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/artifact"
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
func (s *Service) resolveVolumes(ctx context.Context, teamID, owner string, atts []store.VolumeAttachment) (string, error) {
	host, first := "", ""
	for _, a := range atts {
		v, err := s.store.GetTeamVolume(ctx, teamID, a.VolumeID)
		if owner != "" { // a service's own volume, of the team's resource it serves
			if v, err = s.store.GetVolume(ctx, a.VolumeID); err == nil && (v.TeamID != teamID || v.Owner != owner || v.Deleted) {
				err = store.ErrNotFound
			}
		}
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

// VolumeCopy is a volume a new sandbox gets as a copy of another: a copy of a fork parent's
// volume at the fork, or of a snapshot's copy of its sandbox's volume. The host makes it (a
// reflink) in the slot of the one it copies, already mounted in the restored guest.
type VolumeCopy struct {
	SourceID, SourceName string // the volume copied (a snapshot's copy: the one it was taken of)
	MountPath            string
	ReadOnly             bool
	SizeMiB              int64
	// Ephemeral: the copy is the new sandbox's own (store.OwnerSandbox), deleted when it is
	// killed — a copy of an ephemeral template data volume, or of a volume that was such a copy.
	Ephemeral bool
}

// ownerOf is who owns copy c made for a sandbox whose caller asked owner ("": the team's): an
// ephemeral copy the caller does not claim is the sandbox's.
func ownerOf(c VolumeCopy, owner string) string {
	if owner == "" && c.Ephemeral {
		return store.OwnerSandbox
	}
	return owner
}

// CopiesNeed is what n sandboxes that each get copies hold of a team's volume quota: an
// ephemeral copy holds none (it is the sandbox's, whose own quota covers it).
func CopiesNeed(copies []VolumeCopy, n int) (count, sizeMiB int64) {
	for _, c := range copies {
		if c.Ephemeral {
			continue
		}
		count, sizeMiB = count+int64(n), sizeMiB+int64(n)*c.SizeMiB
	}
	return count, sizeMiB
}

// copyableVolumes returns sb's volumes, or a Conflict when one is attached read-only: its guest
// reads it through a throw-away overlay (an ext4 journal replay at mount goes there), which its
// host cannot copy with the guest's memory.
func (s *Service) copyableVolumes(ctx context.Context, sb store.Sandbox, what string) ([]store.VolumeAttachment, error) {
	atts, err := s.store.SandboxVolumes(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	for _, a := range atts {
		if a.ReadOnly {
			return nil, errdefs.Conflictf("sandbox %s has volume %s attached read-only at %s: %s of it are refused (its guest reads a read-only volume through an overlay that cannot be copied)", sb.ID, a.VolumeID, a.MountPath, what)
		}
	}
	return atts, nil
}

// ForkVolumes are the copies each child of a fork of parent gets: one of each of its volumes
// (attached, so at their recorded size: an attached volume is not resized). A parent with a
// read-only volume cannot be forked (Conflict).
func (s *Service) ForkVolumes(ctx context.Context, parent store.Sandbox) ([]VolumeCopy, error) {
	atts, err := s.copyableVolumes(ctx, parent, "forks")
	if err != nil {
		return nil, err
	}
	out := make([]VolumeCopy, len(atts))
	for i, a := range atts {
		v, err := s.store.GetVolume(ctx, a.VolumeID)
		if err != nil {
			return nil, err
		}
		out[i] = VolumeCopy{SourceID: v.ID, SourceName: v.Name, MountPath: a.MountPath, ReadOnly: a.ReadOnly, SizeMiB: v.SizeMiB,
			Ephemeral: v.Owner == store.OwnerSandbox}
	}
	return out, nil
}

// SnapshotVolumes are the copies a sandbox made from snapshot sn gets: one of each volume copy
// its host took with it. A snapshot's sandbox's volumes are fixed at its create, and its
// snapshots have copies of them all (snapshots of sandboxes with volumes were refused before
// they were copied), so only a snapshot of a sandbox with volumes asks its host; when that host
// is down, does not answer or no longer has it, a published snapshot's copies are read from its
// record in the blob store (where they travel with it), else the create waits for the host
// (Capacity).
func (s *Service) SnapshotVolumes(ctx context.Context, sn store.Snapshot) ([]VolumeCopy, error) {
	atts, err := s.store.SandboxVolumes(ctx, sn.SandboxID)
	if err != nil || len(atts) == 0 {
		return nil, err
	}
	var hs agentclient.Snapshot
	err = s.onHost(ctx, sn.HostID, RefreshTimeout, func(ctx context.Context, c *agentclient.Client) error {
		hs, err = c.GetSnapshot(ctx, sn.ID)
		return err
	})
	if err != nil && sn.Published && s.blob != nil {
		if pub, perr := s.publishedSnapshot(ctx, sn.ID); perr == nil {
			hs, err = pub, nil
		} else {
			s.log.Warn("a published snapshot's record is not readable from the blob store", "snapshot", sn.ID, "host_err", err, "err", perr)
		}
	}
	if errors.Is(err, store.ErrNotFound) || err == errHostDown || isAgentStatus(err, errdefs.NotFound) {
		return nil, errdefs.Capacityf("host %s of snapshot %s (which has volume copies) is down or no longer has it", sn.HostID, sn.ID)
	}
	if err != nil {
		return nil, err
	}
	out := make([]VolumeCopy, len(hs.Volumes))
	for i, c := range hs.Volumes {
		v, err := s.store.GetVolume(ctx, c.VolumeID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out[i] = VolumeCopy{SourceID: c.VolumeID, SourceName: v.Name, MountPath: c.MountPath, ReadOnly: c.ReadOnly, SizeMiB: c.SizeMiB,
			Ephemeral: v.Owner == store.OwnerSandbox}
	}
	return out, nil
}

// TemplateVolumes are the copies a sandbox of template (the name its host knows it by) gets: one
// of the data volume the template was baked with, if it has one, named after the template
// (recorded, the name the team sees).
func (s *Service) TemplateVolumes(template, recorded string) []VolumeCopy {
	var out []VolumeCopy
	for _, v := range s.sched.TemplateVolumes(template) {
		out = append(out, VolumeCopy{SourceName: recorded, MountPath: v.MountPath, SizeMiB: v.SizeMiB, Ephemeral: v.Ephemeral})
	}
	return out
}

// CopyName names the copy of a volume (named source, or unnamed: its id) made for sandbox
// sandboxID: "<source>-<the sandbox id's last 8 characters>", the source cut to fit
// MaxVolumeNameLen bytes.
func CopyName(source, sandboxID string) string {
	suffix := "-" + sandboxID[max(0, len(sandboxID)-8):]
	for len(source)+len(suffix) > MaxVolumeNameLen {
		_, n := utf8.DecodeLastRuneInString(source)
		source = source[:len(source)-n]
	}
	return source + suffix
}

// MaxVolumeNameLen bounds a volume's name, in bytes.
const MaxVolumeNameLen = 64

// copiedVolumes are the records of the volumes hostID made for sandboxes got (their Volumes,
// matched by mount path to copies), owned by owner ("": the team's), and their attachments; a
// sandbox without exactly its copies is an error (the host answered something else than asked).
func (s *Service) copiedVolumes(teamID, hostID string, got []agentclient.Sandbox, copies []VolumeCopy, owner string) ([]store.Volume, []store.VolumeAttachment, error) {
	if len(copies) == 0 {
		return nil, nil, nil
	}
	var vols []store.Volume
	var atts []store.VolumeAttachment
	now := s.clock()
	for _, sb := range got {
		if len(sb.Volumes) != len(copies) {
			return nil, nil, errors.New("host " + hostID + " made sandbox " + sb.ID + " with " + strconv.Itoa(len(sb.Volumes)) + " volumes, not its " + strconv.Itoa(len(copies)) + " copies")
		}
		for _, m := range sb.Volumes {
			i := slices.IndexFunc(copies, func(c VolumeCopy) bool { return c.MountPath == m.MountPath })
			if i < 0 {
				return nil, nil, errors.New("host " + hostID + " mounted a volume of sandbox " + sb.ID + " at " + m.MountPath + ", where no copy was")
			}
			c := copies[i]
			name := c.SourceName
			if name == "" {
				name = c.SourceID
			}
			vols = append(vols, store.Volume{ID: m.VolumeID, TeamID: teamID, Name: CopyName(name, sb.ID), SizeMiB: c.SizeMiB, HostID: hostID, CreatedAt: now, Owner: ownerOf(c, owner)})
			atts = append(atts, store.VolumeAttachment{SandboxID: sb.ID, VolumeID: m.VolumeID, MountPath: m.MountPath, ReadOnly: m.ReadOnly})
		}
	}
	return vols, atts, nil
}

// dropUnrecorded kills sandboxes a host made that the store will not know and deletes the
// volumes it made for them, their copies: all but those of attached (once the sandboxes are gone,
// nothing holds them).
func (s *Service) dropUnrecorded(ctx context.Context, c *agentclient.Client, hostID string, got []agentclient.Sandbox, attached []store.VolumeAttachment) {
	for _, sb := range got {
		if sb.ID == "" {
			continue
		}
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			s.log.Error("could not kill a sandbox that is not recorded", "sandbox", sb.ID, "host", hostID, "err", err)
			continue
		}
		for _, m := range withoutAttached(sb, attached).Volumes {
			if err := c.DeleteVolume(ctx, m.VolumeID); err != nil {
				s.log.Error("could not delete a volume copy that is not recorded", "volume", m.VolumeID, "host", hostID, "err", err)
			}
		}
	}
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
	err = s.deleteVolumeOnHost(ctx, v)
	var ae *agentclient.Error
	switch {
	case err == nil:
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

// deleteVolumeOnHost deletes volume v on its host. A host that is down or no longer has it is
// nil: the record's deletion is what counts, and a host's reconcile deletes what is recorded
// deleted.
func (s *Service) deleteVolumeOnHost(ctx context.Context, v store.Volume) error {
	err := s.onHost(ctx, v.HostID, VolumeHostCallTimeout, func(ctx context.Context, c *agentclient.Client) error {
		return c.DeleteVolume(ctx, v.ID)
	})
	if err == errHostDown || isAgentStatus(err, errdefs.NotFound) {
		return nil
	}
	return err
}

// publishedSnapshot reads snapshot id's record as its host published it to the blob store.
func (s *Service) publishedSnapshot(ctx context.Context, id string) (agentclient.Snapshot, error) {
	m, err := artifact.Get(ctx, s.blob, snapshotKind, id)
	if err != nil {
		return agentclient.Snapshot{}, err
	}
	var hs agentclient.Snapshot
	if err := json.Unmarshal(m.Record, &hs); err != nil || hs.ID != id {
		return agentclient.Snapshot{}, fmt.Errorf("published snapshot %s: its record is not valid", id)
	}
	return hs, nil
}
