package api

import (
	"net/http"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Durable volumes (docs/volumes.md): persistent disks that outlive sandboxes. A volume lives on
// the host that made it; a sandbox that mounts it is placed there. The host agent keeps the data;
// the control plane keeps the record (team, name, size, host) and the attachments, and enforces
// the attach rules: one read-write holder, or any number of read-only ones.

// Volume limits (docs/volumes.md).
const (
	MaxVolumeMiB         = 1 << 20 // 1 TiB
	MaxVolumesPerSandbox = agentclient.MaxVolumesPerSandbox
	MaxMountPathLen      = 256
	MaxVolumeNameLen     = sandboxes.MaxVolumeNameLen
)

// systemDirs may not be mount points, nor hold one.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var"}

// VolumeSpec is one entry of a create's `volumes`.
type VolumeSpec struct {
	VolumeID  *string `json:"volume_id"`
	MountPath *string `json:"mount_path"`
	ReadOnly  *bool   `json:"read_only"`
}

func validateSize(v *int64) error {
	if v == nil {
		return invalid("size_mib is required (1 to %d)", MaxVolumeMiB)
	}
	if *v < 1 || *v > MaxVolumeMiB {
		return invalid("size_mib must be between 1 and %d (1 TiB), got %d", MaxVolumeMiB, *v)
	}
	return nil
}

// validateMountPath checks one mount path: absolute, normalised, not / and not in or under a
// system directory, at most MaxMountPathLen bytes.
func validateMountPath(p string) error {
	switch {
	case p == "":
		return invalid("mount_path is required (an absolute path such as /data)")
	case len(p) > MaxMountPathLen:
		return invalid("mount_path is %d bytes; at most %d are allowed", len(p), MaxMountPathLen)
	case !utf8.ValidString(p) || hasControl(p):
		return invalid("mount_path %q must be valid UTF-8 without control characters", truncate(p))
	case !strings.HasPrefix(p, "/"):
		return invalid("mount_path %q must be absolute (start with /)", truncate(p))
	case p == "/":
		return invalid("mount_path must not be /")
	case path.Clean(p) != p:
		return invalid("mount_path %q is not normalised (use %q)", truncate(p), truncate(path.Clean(p)))
	}
	for _, d := range systemDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return invalid("mount_path %q is in the system directory %s (system directories are %s)", truncate(p), d, strings.Join(systemDirs, " "))
		}
	}
	return nil
}

// validateVolumeSpecs checks the shape of a create's volumes (not whether they exist).
func validateVolumeSpecs(specs []VolumeSpec) ([]store.VolumeAttachment, error) {
	if len(specs) > MaxVolumesPerSandbox {
		return nil, invalid("volumes has %d entries; at most %d are allowed per sandbox", len(specs), MaxVolumesPerSandbox)
	}
	out := make([]store.VolumeAttachment, 0, len(specs))
	paths, ids := map[string]bool{}, map[string]bool{}
	for i, sp := range specs {
		if sp.VolumeID == nil || *sp.VolumeID == "" {
			return nil, invalid("volumes[%d].volume_id is required (see GET /v1/volumes)", i)
		}
		if sp.MountPath == nil {
			return nil, invalid("volumes[%d].mount_path is required (an absolute path such as /data)", i)
		}
		if err := validateMountPath(*sp.MountPath); err != nil {
			e := err.(*errdefs.Error)
			e.Message = "volumes[" + strconv.Itoa(i) + "]." + e.Message
			return nil, e
		}
		id, p := *sp.VolumeID, *sp.MountPath
		if paths[p] {
			return nil, invalid("volumes[%d].mount_path %q is used by another volume of this sandbox", i, truncate(p))
		}
		if ids[id] {
			return nil, invalid("volumes[%d]: volume %s is listed twice", i, truncate(id))
		}
		paths[p], ids[id] = true, true
		out = append(out, store.VolumeAttachment{VolumeID: id, MountPath: p, ReadOnly: sp.ReadOnly != nil && *sp.ReadOnly})
	}
	return out, nil
}

// volume loads the caller's volume named in the path; another team's is 404 like a missing one.
func (s *Server) volume(r *http.Request) (store.Volume, error) {
	return owned(r, "volume", s.store.GetTeamVolume)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	var req struct {
		SizeMiB *int64  `json:"size_mib"`
		Name    *string `json:"name"`
	}
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = validateSize(req.SizeMiB)
	}
	name := ""
	if err == nil && req.Name != nil {
		name = *req.Name
		switch {
		case len(name) > MaxVolumeNameLen:
			err = invalid("name is %d bytes; at most %d are allowed", len(name), MaxVolumeNameLen)
		case !utf8.ValidString(name) || hasControl(name):
			err = invalid("name must be valid UTF-8 without control characters")
		}
	}
	release := func() {}
	if err == nil {
		release, err = s.holdQuota(r.Context(), id.TeamID, Quota{Volumes: 1, VolumeMiB: *req.SizeMiB})
	}
	var v store.Volume
	if err == nil {
		v, err = s.svc.CreateVolume(r.Context(), id.TeamID, name, *req.SizeMiB)
	}
	release()
	s.reply(w, r, http.StatusCreated, volumeViewOf(v), err)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	for key := range r.URL.Query() {
		s.writeError(w, r, invalid("unknown query parameter %q (volume lists take none)", truncate(key)))
		return
	}
	vols, err := s.store.ListVolumes(r.Context(), id.TeamID)
	s.reply(w, r, http.StatusOK, v1.Volumes{Volumes: list(vols, volumeViewOf)}, err)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.volume(r)
	s.reply(w, r, http.StatusOK, volumeViewOf(v), err)
}

// resizeVolume grows a volume that no sandbox holds.
func (s *Server) resizeVolume(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SizeMiB *int64 `json:"size_mib"`
	}
	err := decodeJSON(w, r, &req, false)
	if err == nil {
		err = validateSize(req.SizeMiB)
	}
	var v store.Volume
	if err == nil {
		v, err = s.volume(r)
	}
	release := func() {}
	if err == nil {
		release, err = s.holdQuota(r.Context(), v.TeamID, Quota{VolumeMiB: *req.SizeMiB - v.SizeMiB})
	}
	if err == nil {
		v, err = s.svc.ResizeVolume(r.Context(), v, *req.SizeMiB)
	}
	release()
	s.reply(w, r, http.StatusOK, volumeViewOf(v), err)
}

// deleteVolume deletes a volume that no sandbox holds, and its data.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	id, _ := auth.FromContext(r.Context())
	s.reply(w, r, http.StatusNoContent, nil, s.svc.DeleteVolume(r.Context(), id.TeamID, r.PathValue("id")))
}
