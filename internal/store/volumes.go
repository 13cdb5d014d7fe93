package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Volume is the record of a durable volume: a persistent disk kept on the host that made it (a
// sandbox that mounts it is placed there). Attachments are the sandboxes that hold it now.
type Volume struct {
	ID        string
	TeamID    string
	Name      string
	SizeMiB   int64
	HostID    string
	CreatedAt time.Time
	Deleted   bool
	DeletedAt time.Time
	// Owner is the control-plane service whose resource the volume is part of (OwnerDatabase: a
	// managed database's data), "" for the team's own. Owned volumes are not the team's to see or
	// touch: they stay out of its list, its gets and its volume quota, and their service deletes
	// them with what owns them.
	Owner       string
	Attachments []VolumeAttachment
}

// OwnerDatabase owns the volumes of managed databases (internal/database): the copy of the
// postgres template's data volume a database's VM holds its cluster on.
const OwnerDatabase = "database"

// OwnerSandbox owns a sandbox's copy of an ephemeral template data volume (postgres-17's, for a
// plain sandbox), and the copies made of such a copy (forks, restores of its snapshots): the
// sandbox it is attached to holds it, and once no sandbox does, it is deleted
// (sandboxes.Service.DropSandboxVolumes at a kill, the sweeper for any other end).
const OwnerSandbox = "sandbox"

// VolumeAttachment is one volume of one sandbox, mounted at MountPath.
type VolumeAttachment struct {
	SandboxID string
	VolumeID  string
	MountPath string
	ReadOnly  bool
}

// HoldingStates are the sandbox states in which a sandbox holds its volumes: its host still has
// it. A killed sandbox has let go; a lost one's host is gone (or no longer has it) — should it
// come back, its state, and so its hold, comes back with it.
var HoldingStates = []string{StateRunning, StateHibernated, StateError}

// VolumeInUseError says a volume cannot be attached, resized or deleted because a sandbox holds
// it (Holder; the first one, when several do).
type VolumeInUseError struct {
	VolumeID string
	Holder   VolumeAttachment
}

func (e *VolumeInUseError) Error() string {
	mode := "read-write"
	if e.Holder.ReadOnly {
		mode = "read-only"
	}
	return fmt.Sprintf("volume %s is attached %s to sandbox %s", e.VolumeID, mode, e.Holder.SandboxID)
}

const volumeCols = `id, team_id, name, size_mib, host_id, created_at, deleted, deleted_at, owner`

var scanVolume = scanFields(func(v *Volume) []any {
	return []any{&v.ID, &v.TeamID, &v.Name, &v.SizeMiB, &v.HostID, timeCol(&v.CreatedAt), boolCol(&v.Deleted), timeCol(&v.DeletedAt), &v.Owner}
})

const attachmentCols = `sandbox_id, volume_id, mount_path, read_only`

var scanAttachment = scanFields(func(a *VolumeAttachment) []any {
	return []any{&a.SandboxID, &a.VolumeID, &a.MountPath, boolCol(&a.ReadOnly)}
})

// attachments returns the holding attachments of the given volumes, by volume id, oldest
// sandbox first.
func (s *Store) attachments(ctx context.Context, q querier, volumeIDs ...string) (map[string][]VolumeAttachment, error) {
	out := map[string][]VolumeAttachment{}
	if len(volumeIDs) == 0 {
		return out, nil
	}
	holding, args := inList(HoldingStates)
	volumes, volumeArgs := inList(volumeIDs)
	query := `SELECT ` + prefixCols("a.", attachmentCols) + ` FROM sandbox_volumes a JOIN sandboxes s ON s.id = a.sandbox_id
		WHERE s.state IN ` + holding + ` AND a.volume_id IN ` + volumes + `
		ORDER BY s.created_at, s.id`
	args = append(args, volumeArgs...)
	all, err := queryAll(ctx, s, q, query, scanAttachment, args...)
	if err != nil {
		return nil, err
	}
	for _, a := range all {
		out[a.VolumeID] = append(out[a.VolumeID], a)
	}
	return out, nil
}

func (s *Store) withAttachments(ctx context.Context, vols []Volume) ([]Volume, error) {
	ids := make([]string, len(vols))
	for i, v := range vols {
		ids[i] = v.ID
	}
	att, err := s.attachments(ctx, s.db, ids...)
	if err != nil {
		return nil, err
	}
	for i := range vols {
		vols[i].Attachments = att[vols[i].ID]
	}
	return vols, nil
}

// CreateVolume records a volume a host has made. A duplicate id is ErrConflict.
func (s *Store) CreateVolume(ctx context.Context, v Volume) (Volume, error) {
	if v.CreatedAt.IsZero() {
		v.CreatedAt = s.now().UTC()
	}
	v.CreatedAt = fromMicros(micros(v.CreatedAt))
	v.Deleted, v.DeletedAt, v.Attachments = false, time.Time{}, nil
	if err := s.insertVolume(ctx, s.db, v); err != nil {
		return Volume{}, conflictOr(err)
	}
	return v, nil
}

func (s *Store) insertVolume(ctx context.Context, q querier, v Volume) error {
	_, err := s.exec(ctx, q, `INSERT INTO volumes (`+volumeCols+`, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)`,
		v.ID, v.TeamID, v.Name, v.SizeMiB, v.HostID, micros(v.CreatedAt), v.Owner, micros(v.CreatedAt))
	return err
}

// GetVolume returns a volume of any team, deleted or not, with its attachments (internal
// callers).
func (s *Store) GetVolume(ctx context.Context, id string) (Volume, error) {
	return s.getVolume(ctx, `SELECT `+volumeCols+` FROM volumes WHERE id = ?`, id)
}

// GetTeamVolume returns a volume with its attachments only if it belongs to teamID, is the
// team's own (no Owner) and is not deleted: another team's volume, a service's (a database's) or
// a deleted one is ErrNotFound exactly like a missing one.
func (s *Store) GetTeamVolume(ctx context.Context, teamID, id string) (Volume, error) {
	return s.getVolume(ctx, `SELECT `+volumeCols+` FROM volumes WHERE id = ? AND team_id = ? AND deleted = 0 AND owner = ''`, id, teamID)
}

// DeletedVolumes returns which of ids are recorded deleted (a host's reconcile deletes those it
// still holds).
func (s *Store) DeletedVolumes(ctx context.Context, ids []string) (map[string]bool, error) {
	return s.deletedIn(ctx, "volumes", ids)
}

// VolumesGoneFrom returns which of ids, volumes host hostID keeps, it should not keep: recorded
// deleted, or live on another host (a hibernated sandbox woken on another host took its volumes
// there, made from the copies its hibernation carried). A host's reconcile deletes those.
func (s *Store) VolumesGoneFrom(ctx context.Context, hostID string, ids []string) (map[string]bool, error) {
	return s.idsWhere(ctx, "volumes", "deleted = 1 OR host_id <> ?", ids, hostID)
}

// CountVolumes returns how many volumes are not deleted (for /metrics).
func (s *Store) CountVolumes(ctx context.Context) (int64, error) {
	return s.countLive(ctx, "volumes")
}

func (s *Store) getVolume(ctx context.Context, q string, args ...any) (Volume, error) {
	v, err := scanVolume(s.queryRow(ctx, s.db, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, ErrNotFound
	}
	if err != nil {
		return Volume{}, err
	}
	vs, err := s.withAttachments(ctx, []Volume{v})
	if err != nil {
		return Volume{}, err
	}
	return vs[0], nil
}

// ListVolumes returns a team's own volumes (no Owner) that are not deleted, newest first, with
// their attachments.
func (s *Store) ListVolumes(ctx context.Context, teamID string) ([]Volume, error) {
	out, err := queryAll(ctx, s, s.db, `SELECT `+volumeCols+` FROM volumes WHERE team_id = ? AND deleted = 0 AND owner = '' ORDER BY created_at DESC, id DESC`,
		scanVolume, teamID)
	if err != nil {
		return nil, err
	}
	return s.withAttachments(ctx, out)
}

// lockVolume takes the team's live volume for the rest of tx (a row write: PostgreSQL locks the
// row until the end of tx; SQLite's transactions hold the database's write lock anyway), so that
// attaches, resizes and deletes of one volume happen one at a time. Missing, deleted or another
// team's volume is ErrNotFound ("" teamID: any team).
func (s *Store) lockVolume(ctx context.Context, tx *sql.Tx, teamID, id string) error {
	q := `UPDATE volumes SET updated_at = ? WHERE id = ? AND deleted = 0`
	args := []any{micros(s.now()), id}
	if teamID != "" {
		q += ` AND team_id = ?`
		args = append(args, teamID)
	}
	res, err := s.exec(ctx, tx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// checkFree returns a *VolumeInUseError when a sandbox holds the volume in a way that forbids
// what is asked: any holder when exclusive (a read-write attach, a resize, a delete), a
// read-write holder for a read-only attach.
func (s *Store) checkFree(ctx context.Context, q querier, id string, exclusive bool) error {
	att, err := s.attachments(ctx, q, id)
	if err != nil {
		return err
	}
	for _, a := range att[id] {
		if exclusive || !a.ReadOnly {
			return &VolumeInUseError{VolumeID: id, Holder: a}
		}
	}
	return nil
}

// CheckAttach reports whether a sandbox could attach the volume now (read-only or not): nil, or
// a *VolumeInUseError naming the sandbox in the way. CreateSandboxWithVolumes checks again.
func (s *Store) CheckAttach(ctx context.Context, volumeID string, readOnly bool) error {
	return s.checkFree(ctx, s.db, volumeID, !readOnly)
}

// ResizeVolume records a team's volume's new size. A volume a sandbox holds is a
// *VolumeInUseError; missing, deleted or another team's is ErrNotFound.
func (s *Store) ResizeVolume(ctx context.Context, teamID, id string, sizeMiB int64) (Volume, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.lockVolume(ctx, tx, teamID, id); err != nil {
			return err
		}
		if err := s.checkFree(ctx, tx, id, true); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, `UPDATE volumes SET size_mib = ? WHERE id = ?`, sizeMiB, id)
		return err
	})
	if err != nil {
		return Volume{}, err
	}
	return s.GetTeamVolume(ctx, teamID, id)
}

// DeleteVolume marks a team's volume deleted. A volume a sandbox holds is a *VolumeInUseError;
// deleting a deleted one again is fine; another team's (or a missing) one is ErrNotFound.
func (s *Store) DeleteVolume(ctx context.Context, teamID, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.lockVolume(ctx, tx, teamID, id); err != nil {
			return err
		}
		if err := s.checkFree(ctx, tx, id, true); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, `UPDATE volumes SET deleted = 1, deleted_at = ? WHERE id = ?`, micros(s.now()), id)
		return err
	})
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	return s.ownedRow(ctx, "volumes", teamID, id)
}

// CreateSandboxWithVolumes records a new sandbox and its volumes in one transaction, checking
// again, with each volume locked, that it may attach them: a volume that is gone is ErrNotFound,
// one held in the way is a *VolumeInUseError, and then nothing is recorded.
func (s *Store) CreateSandboxWithVolumes(ctx context.Context, sb Sandbox, vols []VolumeAttachment) (Sandbox, error) {
	for i := range vols {
		vols[i].SandboxID = sb.ID
	}
	out, err := s.CreateSandboxesWithVolumes(ctx, []Sandbox{sb}, nil, vols)
	if err != nil {
		return Sandbox{}, err
	}
	return out[0], nil
}

// CreateSandboxesWithVolumes records new sandboxes of one team, the volumes their host made for
// them (newVols: copies of a snapshot's or a fork parent's), and their attachments (by
// SandboxID), all in one transaction: each attached volume is locked and checked free as in
// CreateSandboxWithVolumes. Nothing is recorded unless all is.
func (s *Store) CreateSandboxesWithVolumes(ctx context.Context, sbs []Sandbox, newVols []Volume, atts []VolumeAttachment) ([]Sandbox, error) {
	var out []Sandbox
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now().UTC()
		for _, v := range newVols {
			if v.CreatedAt.IsZero() {
				v.CreatedAt = now
			}
			if err := s.insertVolume(ctx, tx, v); err != nil {
				return err
			}
		}
		for _, v := range atts {
			if err := s.lockVolume(ctx, tx, sbs[0].TeamID, v.VolumeID); err != nil {
				return fmt.Errorf("volume %s: %w", v.VolumeID, err)
			}
			if err := s.checkFree(ctx, tx, v.VolumeID, !v.ReadOnly); err != nil {
				return err
			}
		}
		var err error
		if out, err = s.insertSandboxes(ctx, tx, sbs); err != nil {
			return err
		}
		for _, v := range atts {
			if _, err := s.exec(ctx, tx, `INSERT INTO sandbox_volumes (sandbox_id, volume_id, mount_path, read_only) VALUES (?, ?, ?, ?)`,
				v.SandboxID, v.VolumeID, v.MountPath, boolInt(v.ReadOnly)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, conflictOr(err)
	}
	return out, nil
}

// SandboxVolumes returns the volumes a sandbox was created with (whatever its state), in mount
// path order.
func (s *Store) SandboxVolumes(ctx context.Context, sandboxID string) ([]VolumeAttachment, error) {
	return queryAll(ctx, s, s.db, `SELECT `+attachmentCols+` FROM sandbox_volumes WHERE sandbox_id = ? ORDER BY mount_path`,
		scanAttachment, sandboxID)
}

// ReleaseSandboxVolumes marks deleted, and returns, the sandbox-owned volumes (OwnerSandbox) no
// sandbox holds any more: those of the given sandboxes (just killed), or, with none given, any
// team's, at most limit of them (the sweeper's pass). A volume is held by every sandbox it is
// attached to that is not killed (a lost one may come back with its host), and a pruned
// sandbox's attachments are gone with it. Nothing can attach such a volume again (it is not the
// team's), so a volume released here stays released; its host deletes it (the caller asks; the
// host's reconcile deletes what is recorded deleted anyway).
func (s *Store) ReleaseSandboxVolumes(ctx context.Context, sandboxIDs []string, limit int) ([]Volume, error) {
	query := `SELECT ` + prefixCols("v.", volumeCols) + ` FROM volumes v WHERE v.deleted = 0 AND v.owner = ?`
	args := []any{OwnerSandbox}
	if len(sandboxIDs) > 0 {
		ids, idArgs := inList(sandboxIDs)
		query += ` AND v.id IN (SELECT volume_id FROM sandbox_volumes WHERE sandbox_id IN ` + ids + `)`
		args = append(args, idArgs...)
	}
	query += ` AND NOT EXISTS (SELECT 1 FROM sandbox_volumes a JOIN sandboxes s ON s.id = a.sandbox_id
			WHERE a.volume_id = v.id AND s.state <> ?) ORDER BY v.created_at, v.id LIMIT ?`
	args = append(args, StateKilled, limit)
	vols, err := queryAll(ctx, s, s.db, query, scanVolume, args...)
	if err != nil || len(vols) == 0 {
		return nil, err
	}
	ids := make([]string, len(vols))
	for i, v := range vols {
		ids[i] = v.ID
	}
	in, inArgs := inList(ids)
	if _, err := s.exec(ctx, s.db, `UPDATE volumes SET deleted = 1, deleted_at = ? WHERE deleted = 0 AND id IN `+in,
		append([]any{micros(s.now())}, inArgs...)...); err != nil {
		return nil, err
	}
	return vols, nil
}

// volumesSchema is the volumes tables' part of each migration.
var volumesSchema = []schemaStep{
	{3, []string{
		// On the host that made it (host_id); deleted softly (see deletedIn). updated_at is
		// also touched by every attach, which serialises attaches of one volume.
		`CREATE TABLE volumes (
			id         TEXT PRIMARY KEY,
			team_id    TEXT NOT NULL REFERENCES teams(id),
			name       TEXT NOT NULL DEFAULT '',
			size_mib   BIGINT NOT NULL,
			host_id    TEXT NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			deleted    INTEGER NOT NULL DEFAULT 0,
			deleted_at BIGINT
		)`,
		`CREATE INDEX volumes_team_created ON volumes (team_id, deleted, created_at, id)`,
		// The volumes a sandbox was created with. A row holds its volume while the sandbox is
		// running, hibernated or in error (its host still has it); a killed or lost sandbox's
		// rows are history and hold nothing.
		`CREATE TABLE sandbox_volumes (
			sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
			volume_id  TEXT NOT NULL REFERENCES volumes(id),
			mount_path TEXT NOT NULL,
			read_only  INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (sandbox_id, volume_id)
		)`,
		`CREATE INDEX sandbox_volumes_volume ON sandbox_volumes (volume_id)`,
	}},
	{29, []string{
		// The control-plane service whose resource the volume is part of ('' : the team's own).
		`ALTER TABLE volumes ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
	}},
	{30, []string{
		// The live volumes a service owns (the sandbox-owned ones' sweeper reads them): few
		// beside the teams' own, so the index stays small.
		`CREATE INDEX volumes_owned_live ON volumes (owner, created_at) WHERE deleted = 0 AND owner <> ''`,
	}},
}
