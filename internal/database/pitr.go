package database

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/store"
)

// Point-in-time restore (docs/databases.md). The template's postgres archives every completed
// WAL segment (archive_mode on, archive_timeout 60 s) into a spool directory in the guest, when
// that directory exists; the control plane drains the spool through the host agent's files API
// into the blob store and deletes what it drained (the VM has no way to the store itself). Base
// backups for it are pg_basebackup tars (with the WAL they need), taken with each backup (at
// creation, daily, on demand) and streamed out of the VM in pieces (walBase). A restore to an instant is a
// new database from the template whose cluster is replaced by the newest base that ended at or
// before that instant, replaying the archived WAL up to it (recovery_target_time, then promote).
//
// Blob store layout: databases/<id>/base/<end>-<start WAL file>.tar and databases/<id>/wal/<file>.

// Paths in the guest, and the archiver's pace.
const (
	pitrDir    = "/var/lib/postgresql/pitr"
	walSpool   = pitrDir + "/wal"     // archive_command copies segments here (if it exists)
	baseDir    = pitrDir + "/base"    // the pieces of a base backup on their way out (one at a time)
	restoreDir = pitrDir + "/restore" // restore_command's source during a restore
	dataDir    = "/var/lib/postgresql/17/main"
	// ArchiveInterval is how often the spools are drained: with archive_timeout it bounds what a
	// host loss can lose (docs/databases.md).
	ArchiveInterval = 10 * time.Second
	maxSegment      = 64 << 20 // a WAL segment is 16 MiB; larger files in the spool are not ours
	stampLayout     = "20060102T150405.000000000Z"
	promoteTimeout  = 600.0
	// baseHeadroomMiB is the room a base backup leaves on the database's volume for postgres
	// meanwhile (new WAL while it runs).
	baseHeadroomMiB = 256
)

var walName = regexp.MustCompile(`^([0-9A-F]{24}|[0-9A-F]{8}\.history)$`)

func prefix(id string) string { return "databases/" + id + "/" }

// archiving says whether WAL is archived (the service has a blob store).
func (s *Service) archiving() bool { return s.cfg.Blob != nil }

// walBase takes a pg_basebackup of d in its VM (turning the WAL spool on first) and puts it in
// the blob store as a tar named by the instant it ended and the WAL file it starts from.
//
// The backup is streamed out of the VM, not copied beside the cluster first: pg_basebackup writes
// its tar (-D - -Ft -X fetch: the WAL it needs inside) into split, which cuts it into pieces of
// basePieceMiB in a directory of the database's volume, one at a time — each piece waits there
// until the server has fetched and deleted it, and split, and pg_basebackup behind the pipe, wait
// meanwhile. So the volume needs room for one piece (and postgres's new WAL while it runs), not
// for a copy of the cluster, and the tar is pg_basebackup's own, the format restores lay down.
func (s *Service) walBase(ctx context.Context, d store.Database) error {
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil {
		return err
	}
	unlock := lockOf(&s.bases, d.ID) // one base backup of a database at a time
	defer unlock()
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return err
	}
	files := c.FilesAs("root")
	// Through a temporary file: a base is as large as the cluster, and the store reads from a seeker.
	tmp, err := os.CreateTemp("", "pandastack-db-base-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	dir := fmt.Sprintf("%s/%d", baseDir, time.Now().UnixNano()) // a failed earlier run's pieces are not this one's
	script := baseScript(dir)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.guest(bctx, sb, "bash -s", &script, baseTimeout)
		done <- result{out, err}
	}()
	last, pieces := "", 0 // the last piece taken (split names them in order), how many
	for {
		took, err := takePieces(ctx, files, sb.ID, dir, &last, tmp)
		if err != nil {
			return fmt.Errorf("database: taking the base backup out of the VM: %w", err)
		}
		if pieces += took; took > 0 {
			continue
		}
		select {
		case r := <-done:
			// The script ends only once its last piece was taken (each waits to be deleted).
			if r.err != nil {
				return r.err
			}
			return s.storeBase(ctx, d, tmp, strings.TrimSpace(r.out), pieces)
		case <-time.After(basePoll):
		}
	}
}

// Base backups' pace: the pieces they are cut into, how often the server looks for the next one,
// and how long the whole backup may take.
const (
	basePieceMiB = 16
	basePoll     = 100 * time.Millisecond
	baseTimeout  = 1800.0
)

// baseScript is the bash script that streams a base backup into pieces in dir (walBase). Each
// piece is written as part-<n>.tmp, renamed part-<n> when whole, and waited on until the server
// deleted it (at most 10 minutes: then the backup fails, and pg_basebackup with it). It prints
// the instant the backup ended on the database's clock.
func baseScript(dir string) string {
	return `set -eo pipefail
install -d -o postgres -g postgres -m 700 ` + pitrDir + ` ` + walSpool + ` ` + baseDir + `
rm -rf ` + baseDir + `/*
install -d -m 700 ` + dir + `
free=$(df -m --output=avail ` + baseDir + ` | tail -n 1 | tr -d ' ')
if [ "$free" -lt ` + strconv.Itoa(basePieceMiB+baseHeadroomMiB) + ` ]; then
  echo "no room on the database's volume for a base backup: it needs ` + strconv.Itoa(basePieceMiB+baseHeadroomMiB) + ` MiB free, $free MiB are" >&2
  exit 1
fi
cd ` + dir + `
runuser -u postgres -- pg_basebackup -D - -Ft -X fetch -c fast -l pandastack |
  split -a 6 -b ` + strconv.Itoa(basePieceMiB) + `M --filter='cat > "$FILE.tmp" && mv "$FILE.tmp" "$FILE" && for i in $(seq 6000); do [ -e "$FILE" ] || exit 0; sleep 0.1; done; exit 1' - part-
cd / && rmdir ` + dir + `
date -u +%Y%m%dT%H%M%S.%NZ
`
}

// takePieces appends the whole pieces of a base backup waiting in dir (part-<n>, in order, each
// after *last) to w and deletes them in the VM. It returns how many it took.
func takePieces(ctx context.Context, files agentclient.Files, sandboxID, dir string, last *string, w io.Writer) (int, error) {
	entries, err := files.List(ctx, sandboxID, dir, 1)
	if notFound(err) {
		return 0, nil // not made yet
	}
	if err != nil {
		return 0, err
	}
	var names []string
	for _, e := range entries {
		if e.Type == "file" && basePiece.MatchString(e.Name) {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if n <= *last {
			return 0, fmt.Errorf("piece %s came after %s", n, *last)
		}
		p := path.Join(dir, n)
		resp, err := files.Read(ctx, sandboxID, p)
		if err != nil {
			return 0, err
		}
		size, err := io.Copy(w, io.LimitReader(resp.Body, basePieceMiB<<20+1))
		resp.Body.Close()
		if err == nil && size > basePieceMiB<<20 {
			err = fmt.Errorf("piece %s is over %d MiB", n, basePieceMiB)
		}
		if err != nil {
			return 0, err
		}
		if err := files.Remove(ctx, sandboxID, p, false); err != nil {
			return 0, err
		}
		*last = n
	}
	return len(names), nil
}

var basePiece = regexp.MustCompile(`^part-[a-z]{6}$`)

// storeBase puts the base backup in tmp (pg_basebackup's tar, ended at stamp) in the blob store,
// named by its end and the WAL file it starts from (its backup_label's).
func (s *Service) storeBase(ctx context.Context, d store.Database, tmp *os.File, stamp string, pieces int) error {
	end, perr := time.Parse(stampLayout, stamp)
	start, err := baseStart(tmp)
	if err != nil || perr != nil {
		return fmt.Errorf("database: the base backup's start WAL file (%v) and end %q (%v)", err, trunc(stamp), perr)
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	key := prefix(d.ID) + "base/" + end.Format(stampLayout) + "-" + start + ".tar"
	if err := s.cfg.Blob.Put(ctx, key, tmp); err != nil {
		return err
	}
	s.log.Info("database WAL base backup", "database", d.ID, "bytes", size, "pieces", pieces, "start_wal", start)
	return nil
}

// baseStart reads the WAL file a base backup starts from out of the backup_label in its tar.
func baseStart(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", errors.New("no backup_label in the base backup")
		}
		if err != nil {
			return "", err
		}
		if path.Clean(h.Name) != "backup_label" {
			continue
		}
		label, err := io.ReadAll(io.LimitReader(tr, 64<<10))
		if err != nil {
			return "", err
		}
		m := startWAL.FindSubmatch(label)
		if m == nil {
			return "", fmt.Errorf("backup_label without a start WAL file: %q", trunc(string(label)))
		}
		return string(m[1]), nil
	}
}

var startWAL = regexp.MustCompile(`(?m)^START WAL LOCATION: .*\(file ([0-9A-F]{24})\)$`)

// lockOf locks the *sync.Mutex of id in locks (made on first use); the returned func unlocks.
func lockOf(locks *sync.Map, id string) func() {
	m, _ := locks.LoadOrStore(id, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// Draining: one replica at a time drains a database (a lease in the store, held while it drains;
// within a replica, a mutex per database), and a drain moves up to drainSegments segments at once.
const (
	drainLease     = time.Minute
	drainDatabases = 4 // databases one replica drains at once
	drainSegments  = 4 // segments of one database moved at once
	// drainWait bounds how long a drain that must happen (before a restore or a suspension) waits
	// for another replica's drain of the same database to end.
	drainWait = 2 * time.Minute
)

// DrainWAL moves every running database's archived WAL segments from its VM to the blob store
// and returns how many it moved. A database another replica is draining is left to it; suspended
// databases are left asleep (they drained on suspend).
func (s *Service) DrainWAL(ctx context.Context) (int, error) {
	if !s.archiving() {
		return 0, nil
	}
	list, err := s.cfg.Store.ListAllDatabases(ctx)
	if err != nil {
		return 0, err
	}
	var n atomic.Int64
	g := new(errgroup.Group)
	g.SetLimit(drainDatabases)
	for _, d := range list {
		sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
		if err != nil || sb.State != store.StateRunning {
			continue
		}
		g.Go(func() error {
			m, err := s.drain(ctx, d, sb, false)
			n.Add(int64(m))
			if err != nil {
				s.log.Warn("database: draining archived WAL failed", "database", d.ID, "err", err)
			}
			return nil
		})
	}
	g.Wait()
	return int(n.Load()), nil
}

// drain moves d's spooled WAL files to the blob store (gzipped), each deleted in the VM once
// stored, holding d's drain lease meanwhile. When another replica holds it, drain leaves the work
// to it (must false: 0, nil) or waits for it to end and drains what is left (must: the caller
// needs the spool empty).
func (s *Service) drain(ctx context.Context, d store.Database, sb store.Sandbox, must bool) (int, error) {
	unlock := lockOf(&s.drains, d.ID) // this replica's drains of d, one at a time
	defer unlock()
	holder := s.act.replica
	for waited := time.Now(); ; {
		now := s.cfg.Store.Clock(ctx)
		ok, err := s.cfg.Store.ClaimDatabaseDrain(ctx, d.ID, holder, now, now.Add(drainLease))
		if err != nil {
			return 0, err
		}
		if ok {
			break
		}
		if !must {
			return 0, nil
		}
		if time.Since(waited) > drainWait {
			return 0, fmt.Errorf("database: another replica has been draining %s's WAL for over %s", d.ID, drainWait)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	stop := make(chan struct{})
	go s.cfg.Store.HoldLease(stop, drainLease, func(ctx context.Context, until time.Time) error {
		return s.cfg.Store.RenewDatabaseDrain(ctx, d.ID, holder, until)
	}, func(err error) {
		s.log.Warn("database: renewing the WAL drain lease failed", "database", d.ID, "err", err)
	})
	defer func() {
		close(stop)
		if err := s.cfg.Store.ReleaseDatabaseDrain(context.WithoutCancel(ctx), d.ID, holder); err != nil {
			s.log.Warn("database: releasing the WAL drain lease failed", "database", d.ID, "err", err)
		}
	}()

	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return 0, err
	}
	files := c.FilesAs("root")
	entries, err := files.List(ctx, sb.ID, walSpool, 1)
	if notFound(err) {
		return 0, nil // no spool yet: no base backup yet, nothing archived
	}
	if err != nil {
		return 0, err
	}
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(drainSegments)
	for _, e := range entries {
		if e.Type != "file" || !walName.MatchString(e.Name) || e.Size > maxSegment {
			continue // a copy in progress (.name.tmp) or not ours
		}
		g.Go(func() error {
			moved, err := s.moveSegment(gctx, files, d.ID, sb.ID, e.Name)
			if moved {
				n.Add(1)
			}
			return err
		})
	}
	err = g.Wait()
	return int(n.Load()), err
}

// moveSegment gzips the spooled WAL file name of d's VM into the blob store and deletes it in the
// VM; false when it was gone already.
func (s *Service) moveSegment(ctx context.Context, files agentclient.Files, id, sandboxID, name string) (bool, error) {
	p := path.Join(walSpool, name)
	resp, err := files.Read(ctx, sandboxID, p)
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	size, err := io.Copy(zw, io.LimitReader(resp.Body, maxSegment+1))
	resp.Body.Close()
	if err == nil {
		err = zw.Close()
	}
	if err == nil && size > maxSegment {
		err = fmt.Errorf("database: WAL file %s is over %d bytes", name, maxSegment)
	}
	if err != nil {
		return false, err
	}
	if err := s.cfg.Blob.Put(ctx, prefix(id)+"wal/"+name+gzSuffix, bytes.NewReader(gz.Bytes())); err != nil {
		return false, err
	}
	if err := files.Remove(ctx, sandboxID, p, false); err != nil && !notFound(err) {
		return false, err
	}
	return true, nil
}

// gzSuffix ends the keys of gzipped WAL segments in the blob store; segments archived before
// compression have none (a restore reads both).
const gzSuffix = ".gz"

// walFile is the WAL file name an archive key names (without .gz), or "" when it names none.
func walFile(key string) string {
	n := strings.TrimSuffix(path.Base(key), gzSuffix)
	if !walName.MatchString(n) {
		return ""
	}
	return n
}

// notFound says whether err is the host agent's 404.
func notFound(err error) bool {
	var ae *agentclient.Error
	return errors.As(err, &ae) && ae.Status == errdefs.NotFound.Status()
}

// RunArchiver drains the WAL spools every ArchiveInterval until ctx ends.
func (s *Service) RunArchiver(ctx context.Context) {
	if s.archiving() {
		s.every(ctx, ArchiveInterval, "draining archived WAL", s.DrainWAL)
	}
}

// flushWAL makes the source's WAL up to now archived and drained: it switches to a new segment,
// waits for the archiver to have copied the finished one and drains the spool. A database whose
// VM is not running is left as it is (its WAL was drained when it was suspended).
func (s *Service) flushWAL(ctx context.Context, d store.Database) error {
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil || sb.State != store.StateRunning {
		return nil
	}
	if _, err := s.guest(ctx, sb, `q() { runuser -u postgres -- psql -XAtc "$1"; }
[ -d `+walSpool+` ] || exit 0
q "select pg_current_xact_id()" >/dev/null || exit 1 # a commit stamped now: replay to an earlier instant stops there
seg=$(q "select pg_walfile_name(pg_switch_wal())") || exit 1
for i in $(seq 1200); do
  last=$(q "select coalesce(last_archived_wal, '') from pg_stat_archiver")
  if [ -n "$last" ] && { [ "$last" = "$seg" ] || [ "$last" \> "$seg" ]; }; then exit 0; fi
  sleep 0.1
done
echo "the archiver did not archive $seg" >&2; exit 1`, nil, promoteTimeout); err != nil {
		return err
	}
	_, err = s.drain(ctx, d, sb, true)
	return err
}

// walBaseAt names a base backup in the blob store: the instant it ended and its first WAL file.
type walBaseAt struct {
	key, start string
	end        time.Time
}

// walBases lists d's base backups, oldest first.
func (s *Service) walBases(ctx context.Context, id string) ([]walBaseAt, error) {
	var out []walBaseAt
	p := prefix(id) + "base/"
	err := s.cfg.Blob.List(ctx, p, func(in blob.Info) error {
		stamp, start, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(in.Key, p), ".tar"), "-")
		if t, err := time.Parse(stampLayout, stamp); err == nil && ok && len(start) == 24 {
			out = append(out, walBaseAt{key: in.Key, start: start, end: t})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].end.Before(out[j].end) })
	return out, err
}

// walSince lists id's archived WAL a replay from a base starting at WAL file start needs: the
// segments from start on and the timeline histories, each once (a segment stored both gzipped and
// plain, as by a drain before and one after compression came, is the gzipped one).
func (s *Service) walSince(ctx context.Context, id, start string) ([]blob.Info, error) {
	var wal []blob.Info
	at := map[string]int{}
	err := s.cfg.Blob.List(ctx, prefix(id)+"wal/", func(in blob.Info) error {
		n := walFile(in.Key)
		if n == "" || !(strings.HasSuffix(n, ".history") || n[8:] >= start[8:]) {
			return nil
		}
		if i, dup := at[n]; dup {
			if strings.HasSuffix(in.Key, gzSuffix) {
				wal[i] = in
			}
			return nil
		}
		at[n] = len(wal)
		wal = append(wal, in)
		return nil
	})
	return wal, err
}

// restoreToTime makes a new database called name recovered to instant to from p's base backups
// and archived WAL. ok is false when p has no base backup that ended at or before to (the caller
// then falls back to the VM snapshots).
func (s *Service) restoreToTime(ctx context.Context, p store.Database, name string, to time.Time) (d store.Database, ok bool, err error) {
	if err := s.flushWAL(ctx, p); err != nil {
		s.log.Warn("database: could not archive the newest WAL before a restore; restoring from what is archived", "database", p.ID, "err", err)
	}
	bases, err := s.walBases(ctx, p.ID)
	if err != nil {
		return d, true, err
	}
	var base *walBaseAt
	for i := range bases {
		if !bases[i].end.After(to) {
			base = &bases[i]
		}
	}
	switch {
	case len(bases) == 0:
		return d, false, nil // archived since before WAL archiving: the snapshots
	case base == nil:
		return d, true, errdefs.Invalidf("database %s can be restored to instants from %s on (its first base backup); for an earlier state restore a backup by backup_id",
			p.ID, bases[0].end.Format(time.RFC3339Nano))
	}
	wal, err := s.walSince(ctx, p.ID, base.start)
	if err != nil {
		return d, true, err
	}

	recorded, agentName, host, err := s.cfg.Templates.Resolve(ctx, p.TeamID, s.cfg.Template)
	if err != nil {
		return d, true, err
	}
	sb, err := s.cfg.Sandboxes.Create(ctx, p.TeamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName, TemplateHost: host,
		Metadata: map[string]string{"pandastack.database": "restore of " + p.ID}, VolumeOwner: store.OwnerDatabase})
	if err != nil {
		return d, true, err
	}
	_, err = s.cfg.Store.SetSandboxExpiry(ctx, sb.ID, farFuture, 0) // a long replay must not outlive its VM
	if err == nil {
		err = s.recover(ctx, sb, base.key, wal, to)
	}
	if err != nil {
		s.dropVM(ctx, sb, "database restore failed")
		return d, true, err
	}
	d = p
	d.ID, d.Name, d.SandboxID, d.ParentID, d.State = auth.NewID("db_"), name, sb.ID, p.ID, StateReady
	d, err = s.record(ctx, sb, d, "database restored to an instant", "to_time", to, "base", base.key, "wal_files", len(wal))
	return d, true, err
}

// recover replaces the cluster in sb's VM (restored from the template, postgres running) with the
// base backup under baseKey and replays the wal files up to instant to, then promotes it.
func (s *Service) recover(ctx context.Context, sb store.Sandbox, baseKey string, wal []blob.Info, to time.Time) error {
	if _, err := s.guest(ctx, sb, `set -e
pg_ctlcluster -m fast 17 main stop
rm -rf `+dataDir+` `+pitrDir+`
install -d -o postgres -g postgres -m 700 `+dataDir+` `+pitrDir+` `+restoreDir, nil, setupTimeout); err != nil {
		return err
	}
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return err
	}
	files := c.FilesAs("postgres")
	put := func(key, dst string, archive bool) error {
		info, err := s.cfg.Blob.Stat(ctx, key)
		if err != nil {
			return err
		}
		r, err := s.cfg.Blob.Get(ctx, key)
		if err != nil {
			return err
		}
		defer r.Close()
		if archive {
			_, err = files.ArchivePut(ctx, sb.ID, dst, r, info.Size)
		} else {
			_, err = files.Write(ctx, sb.ID, dst, r, info.Size)
		}
		return err
	}
	if err := put(baseKey, dataDir, true); err != nil {
		return fmt.Errorf("database: laying down the base backup: %w", err)
	}
	for _, w := range wal {
		if err := put(w.Key, path.Join(restoreDir, path.Base(w.Key)), false); err != nil {
			return fmt.Errorf("database: placing archived WAL: %w", err)
		}
	}
	// Segments are gzipped in the archive (older ones are not): restore_command reads either.
	conf := "restore_command = 'if [ -f " + restoreDir + "/%f" + gzSuffix + " ]; then gzip -dc " + restoreDir + "/%f" + gzSuffix +
		" > \"%p\"; else cp " + restoreDir + "/%f \"%p\"; fi'\n" +
		"recovery_target_time = '" + to.UTC().Format("2006-01-02 15:04:05.999999") + "+00'\n" +
		"recovery_target_action = 'promote'\n"
	// Recovery that reaches the end of the archive before any commit after to (nothing was
	// committed since: an idle database, a source whose last minutes were lost with its host)
	// stops with "recovery ended before configured recovery target was reached"; it then goes on
	// to the end of the archive without the target, which is the same instant's data.
	_, err = s.guest(ctx, sb, `conf=/etc/postgresql/17/main/conf.d/zz-recovery.conf
log=/var/log/postgresql/postgresql-17-main.log
cat > $conf || exit 1
runuser -u postgres -- touch `+dataDir+`/recovery.signal || exit 1
: > $log
pg_ctlcluster 17 main start >/dev/null 2>&1
for i in $(seq 3000); do
  if [ "$(runuser -u postgres -- psql -XAtc 'select pg_is_in_recovery()' 2>/dev/null)" = f ]; then
    rm -f $conf `+restoreDir+`/*
    runuser -u postgres -- psql -XAtc 'select pg_reload_conf()' >/dev/null
    exit 0
  fi
  if ! pg_ctlcluster 17 main status >/dev/null 2>&1; then
    if grep -q 'before configured recovery target' $log && grep -q recovery_target_time $conf; then
      sed -i '/recovery_target_time/d' $conf
      pg_ctlcluster 17 main start >/dev/null 2>&1
    elif [ $i -gt 50 ]; then
      break
    fi
  fi
  sleep 0.2
done
tail -n 30 $log >&2
exit 1`, &conf, promoteTimeout)
	return err
}

// deleteArchive deletes d's base backups and archived WAL from the blob store.
func (s *Service) deleteArchive(ctx context.Context, id string) error {
	if !s.archiving() {
		return nil
	}
	var keys []string
	if err := s.cfg.Blob.List(ctx, prefix(id), func(in blob.Info) error { keys = append(keys, in.Key); return nil }); err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.cfg.Blob.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// pruneArchive deletes d's base backups older than BackupRetention (never the newest) and the
// archived WAL older than the oldest base kept: what no restore can use any more.
func (s *Service) pruneArchive(ctx context.Context, id string, now time.Time) error {
	bases, err := s.walBases(ctx, id)
	if err != nil || len(bases) == 0 {
		return err
	}
	keep := 0
	for keep < len(bases)-1 && now.Sub(bases[keep].end) > BackupRetention {
		if err := s.cfg.Blob.Delete(ctx, bases[keep].key); err != nil {
			return err
		}
		keep++
	}
	var old []string
	if err := s.cfg.Blob.List(ctx, prefix(id)+"wal/", func(in blob.Info) error {
		if n := walFile(in.Key); len(n) == 24 && n[8:] < bases[keep].start[8:] {
			old = append(old, in.Key)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range old {
		if err := s.cfg.Blob.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}
