package database

import (
	"context"
	"errors"
	"time"

	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
)

// Backups are snapshots of a database's VM (memory and disk at one instant, taken with the VM
// paused: consistent, postgres needs no recovery). A restore makes a NEW database from one, never
// overwriting the old. With a remote blob store the host publishes snapshots there, so they
// outlive the host. Backups are taken on demand and, by RunBackups, every BackupInterval; those
// older than BackupRetention are deleted.

// Backup schedule and retention.
const (
	BackupInterval  = 24 * time.Hour
	BackupRetention = 7 * 24 * time.Hour
	maxBackups      = 1000
)

// background runs job for d after the request that made d has been answered (a base backup must
// not delay a create); Wait waits for such jobs.
func (s *Service) background(d store.Database, job func(context.Context, store.Database) error) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), sandboxes.LifecycleTimeout)
		defer cancel()
		if err := job(ctx, d); err != nil {
			s.log.Warn("database: base backup failed; the scheduled backups take one within the hour", "database", d.ID, "err", err)
		}
	}()
}

// Wait waits for the base backups running in the background (tests, shutdown).
func (s *Service) Wait() { s.bg.Wait() }

// baseBackup is a new database's first backup, so that it is restorable from its creation on
// (the scheduled pass would take one within the hour).
func (s *Service) baseBackup(ctx context.Context, d store.Database) error {
	_, err := s.backup(ctx, d.TeamID, d.ID, TriggerCreation)
	return err
}

// What took a backup (a database.backed_up event's trigger).
const (
	TriggerCreation = "creation" // a new database's first backup
	TriggerSchedule = "schedule" // the daily backups
	TriggerRequest  = "request"  // POST …/backups
)

// Backup snapshots the team's database now and, when WAL is archived, takes a base backup for
// point-in-time restores as well (pitr.go).
func (s *Service) Backup(ctx context.Context, teamID, id string) (store.Snapshot, error) {
	return s.backup(ctx, teamID, id, TriggerRequest)
}

// backup is Backup for trigger, recorded as a database.backed_up event.
func (s *Service) backup(ctx context.Context, teamID, id, trigger string) (store.Snapshot, error) {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn, err := s.snapshot(ctx, d)
	if err != nil {
		return sn, err
	}
	if s.archiving() {
		if err := s.walBase(ctx, d); err != nil { // the snapshot is a backup all the same; restores to instants use an older base
			s.log.Warn("database: base backup for point-in-time restores failed", "database", id, "err", err)
		}
	}
	s.event(ctx, d, store.DatabaseEvent{Type: webhooks.DatabaseBackedUp, BackupID: sn.ID, Trigger: trigger})
	return sn, nil
}

// event records e of database d for the events stream and webhooks (a failure is logged).
func (s *Service) event(ctx context.Context, d store.Database, e store.DatabaseEvent) {
	e.ID, e.TeamID, e.DatabaseID, e.Name = auth.NewID("dbe_"), d.TeamID, d.ID, d.Name
	if _, err := s.cfg.Store.RecordDatabaseEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("database: could not record an event", "database", d.ID, "type", e.Type, "err", err)
	}
}

// snapshot snapshots database d now.
func (s *Service) snapshot(ctx context.Context, d store.Database) (store.Snapshot, error) {
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn, err := s.cfg.Sandboxes.Snapshot(ctx, sb)
	if err == nil {
		s.log.Info("database backed up", "database", d.ID, "snapshot", sn.ID)
	}
	return sn, err
}

// Backups lists the team's database's backups, newest first.
func (s *Service) Backups(ctx context.Context, teamID, id string) ([]store.Snapshot, error) {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	list, _, err := s.cfg.Store.ListSnapshots(ctx, store.SnapshotFilter{TeamID: teamID, SandboxID: d.SandboxID, Limit: maxBackups})
	return list, err
}

// Restore makes a new database called name from a backup of the team's database: backupID; or,
// with toTime and WAL archived, recovered to that instant (restoreToTime); else the newest backup
// taken at or before toTime (zero: now). The new database has the old one's owner,
// database name and password; the old one is not touched.
func (s *Service) Restore(ctx context.Context, teamID, id, name, backupID string, toTime time.Time) (store.Database, error) {
	if !namePattern.MatchString(name) {
		return store.Database{}, errdefs.Invalidf("name must be 1-50 of a-z, 0-9, _ and -, starting with a letter")
	}
	p, err := s.copySource(ctx, teamID, id, name)
	if err != nil {
		return p, err
	}
	if backupID == "" && !toTime.IsZero() && s.archiving() {
		// To any instant: a base backup and the archived WAL up to it.
		if d, ok, err := s.restoreToTime(context.WithoutCancel(ctx), p, name, toTime); ok {
			return d, err
		}
	}
	if toTime.IsZero() {
		toTime = time.Now()
	}
	backups, err := s.Backups(ctx, teamID, id)
	if err != nil {
		return store.Database{}, err
	}
	var pick *store.Snapshot
	for i, b := range backups { // newest first
		if backupID != "" && b.ID == backupID || backupID == "" && !b.CreatedAt.After(toTime) {
			pick = &backups[i]
			break
		}
	}
	switch {
	case pick == nil && backupID != "":
		return store.Database{}, errdefs.NotFoundf("database %s has no backup %s", p.ID, trunc(backupID))
	case pick == nil:
		return store.Database{}, errdefs.Invalidf("database %s has no backup taken at or before %s", p.ID, toTime.UTC().Format(time.RFC3339))
	}
	ctx = context.WithoutCancel(ctx)
	sb, err := s.cfg.Sandboxes.Create(ctx, teamID, sandboxes.CreateParams{Template: pick.Template, AgentTemplate: pick.Template, Snapshot: pick,
		Metadata: map[string]string{"pandastack.database": "restore of " + p.ID}, VolumeOwner: store.OwnerDatabase})
	if err != nil {
		return store.Database{}, err
	}
	d := p
	d.ID, d.Name, d.SandboxID, d.ParentID, d.State = auth.NewID("db_"), name, sb.ID, p.ID, StateReady
	return s.record(ctx, sb, d, "database restored", "backup", pick.ID)
}

// record stores a database made from sandbox sb (a branch, a restore), its VM made to live until
// the database is deleted; on failure the VM is killed and its volume deleted.
func (s *Service) record(ctx context.Context, sb store.Sandbox, d store.Database, what string, logKV ...any) (store.Database, error) {
	undo := func(err error) (store.Database, error) {
		s.dropVM(ctx, sb, what+": failed")
		return store.Database{}, err
	}
	if _, err := s.cfg.Store.SetSandboxExpiry(ctx, sb.ID, farFuture, 0); err != nil {
		return undo(err)
	}
	d, err := s.cfg.Store.CreateDatabase(ctx, d)
	if errors.Is(err, store.ErrConflict) {
		return undo(errdefs.Conflictf("the team already has a database named %s", d.Name))
	}
	if err != nil {
		return undo(err)
	}
	s.log.Info(what, append([]any{"database", d.ID, "from", d.ParentID, "sandbox", sb.ID}, logKV...)...)
	s.background(d, s.baseBackup)
	return d, nil
}

// BackupDue takes a backup of every database whose newest backup is older than BackupInterval
// (or that has none; a database suspended since its newest backup is left asleep) and deletes
// backups older than BackupRetention, never a database's newest (and so the WAL archive's base
// backups, and the WAL older than the oldest base kept); it returns how many backups it took.
func (s *Service) BackupDue(ctx context.Context) (int, error) {
	list, err := s.cfg.Store.ListAllDatabases(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	for _, d := range list {
		backups, err := s.Backups(ctx, d.TeamID, d.ID)
		if err != nil {
			continue
		}
		if len(backups) == 0 || now.Sub(backups[0].CreatedAt) >= BackupInterval && !s.unchangedSince(ctx, d, backups[0].CreatedAt) {
			if _, err := s.backup(ctx, d.TeamID, d.ID, TriggerSchedule); err != nil {
				s.log.Warn("database: scheduled backup failed", "database", d.ID, "err", err)
			} else {
				n++
			}
		}
		if s.archiving() {
			if err := s.pruneArchive(ctx, d.ID, now); err != nil {
				s.log.Warn("database: could not prune the WAL archive", "database", d.ID, "err", err)
			}
		}
		for i, b := range backups {
			if i > 0 && now.Sub(b.CreatedAt) > BackupRetention {
				if err := s.cfg.Sandboxes.DeleteSnapshot(ctx, d.TeamID, b.ID); err != nil {
					s.log.Warn("database: could not delete an expired backup", "database", d.ID, "snapshot", b.ID, "err", err)
				}
			}
		}
	}
	return n, nil
}

// unchangedSince says whether d has been suspended since before t (nothing can have changed since
// a backup taken at t: a new one would only wake it).
func (s *Service) unchangedSince(ctx context.Context, d store.Database, t time.Time) bool {
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	return err == nil && sb.State == store.StateHibernated && sb.UpdatedAt.Before(t)
}

// RunBackups runs BackupDue every hour until ctx ends.
func (s *Service) RunBackups(ctx context.Context) {
	s.every(ctx, time.Hour, "scheduled backups", s.BackupDue)
}
