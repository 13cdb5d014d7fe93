// Package database is managed PostgreSQL on the sandbox substrate (docs/databases.md): each
// database is a sandbox restored from the baked postgres template (postgres already running on
// a freshly initialised cluster), so a create is a restore plus a session over the database's own
// port (no exec in the guest) that renames the template's role and database to the owner's, sets
// the owner's password (a SCRAM verifier made here: the password itself never enters the VM),
// takes the template's passwords away and installs the asked extensions. No initdb, no cold boot. Clients reach it through the server's SNI router (internal/dbrouter)
// and the HTTP query broker (Query, SQL); both open a TCP tunnel to the VM's port 5432 through
// its host agent. It calls the sandbox service, never the HTTP handlers; hosts never learn what
// a database is.
package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/sealed"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Template is the template every database restores: PostgreSQL 17 running (templates/postgres-17.yaml).
const Template = "postgres-17"

// Port is where postgres listens in a database's VM, PoolerPort where PgBouncer does
// (transaction pooling).
const (
	Port       = 5432
	PoolerPort = 6432
)

// Limits and defaults of a create.
const (
	DefaultSuspendAfter = 300
	MaxSuspendAfter     = 7 * 86400
	MaxExtensions       = 32
	// setupTimeout bounds the create's psql session in the guest.
	setupTimeout = 120.0
)

// Extensions are those `extensions` on create may pre-install (all are in the template; any of
// them may also be created later with CREATE EXTENSION).
var Extensions = []string{"vector", "pg_cron", "pg_partman", "hypopg", "pg_repack", "pgaudit", "pg_trgm", "pgcrypto",
	"uuid-ossp", "pg_stat_statements", "citext", "hstore"}

// Database states.
const (
	StateReady = "ready"
)

// Config configures a Service.
type Config struct {
	sandboxes.ProductDeps
	// SecretsKey (32 bytes) seals owners' passwords at rest with AES-256-GCM (internal/sealed); empty:
	// stored unsealed (never answered or logged either way).
	SecretsKey []byte
	// Domain names databases <id>.db.<Domain> (default "localhost"); RouterPort is the SNI
	// router's public port in connection strings (default 5432).
	Domain     string
	RouterPort int
	// HTTPBase is the server's public base URL for http_url (e.g. http://localhost:8080); the
	// broker then answers at <id>.db.<domain> on that port. Empty: no http_url.
	HTTPBase string
	// Template is the template databases restore (default Template).
	Template string
	// Blob is where archived WAL and base backups for point-in-time restores go (pitr.go); nil:
	// WAL is not archived and restores are to backup (snapshot) instants only.
	Blob blob.Store
}

// Service creates databases and connects to them. Create with New.
type Service struct {
	cfg Config
	log *slog.Logger
	act activity
	bg  sync.WaitGroup // base backups running in the background (Wait)
	// bases and drains hold a *sync.Mutex per database: one base backup of it at a time, one
	// drain of its WAL at a time in this replica (pitr.go).
	bases, drains sync.Map
	heals         sync.Map // a *sync.Mutex per database: one heal of it at a time (heal.go)
	healRetries   sync.Map // a healRetry per database whose last heal failed (heal.go)
}

// New builds a service.
func New(cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Domain = cmp.Or(cfg.Domain, "localhost")
	if cfg.RouterPort == 0 {
		cfg.RouterPort = Port
	}
	cfg.Template = cmp.Or(cfg.Template, Template)
	return &Service{cfg: cfg, log: cfg.Logger, act: newActivity()}
}

// Domain is the suffix of database host names: db.<domain>.
func (s *Service) Domain() string { return "db." + s.cfg.Domain }

// SetRouterPort sets the public port in connection strings (the router's, once it listens).
func (s *Service) SetRouterPort(port int) { s.cfg.RouterPort = port }

var (
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,49}$`)
	// IDPattern is a database id (the first label of its host name).
	IDPattern = regexp.MustCompile(`^db_[a-z0-9]{1,60}$`)
)

// reservedNames cannot be a database's name: they are postgres's own databases.
var reservedNames = []string{"postgres", "template0", "template1"}

// validate checks a spec, fills its defaults and returns a note for the caller (an alias used).
func (s *Service) validate(ctx context.Context, sp *v1.DatabaseSpec) (string, error) {
	note := ""
	switch {
	case !namePattern.MatchString(sp.Name) || slices.Contains(reservedNames, sp.Name):
		return "", errdefs.Invalidf("name must be 1-50 of a-z, 0-9, _ and -, starting with a letter (not postgres, template0 or template1); it names the database inside postgres too (- becomes _)")
	}
	switch sp.Version {
	case "", "17":
		sp.Version = "17"
	case "16":
		sp.Version = "17"
		note = "PostgreSQL 16 is not packaged by Debian trixie: version \"16\" is an alias of 17 (its clients and dumps work with 17)"
	default:
		return "", errdefs.Invalidf("version must be \"17\" (\"16\" is accepted as an alias of 17)")
	}
	t, err := s.cfg.Templates.Catalog(ctx, s.cfg.Template)
	if err != nil {
		return "", errdefs.Capacityf("the databases' template %q is not available on any host yet", s.cfg.Template)
	}
	// The data is on the template's data volume (templates/postgres-17.yaml): a GiB of it is kept
	// for WAL and a base backup's headroom. A template without one keeps it on its disk.
	dataMiB := int64(t.DiskMiB)
	for _, v := range s.cfg.Sandboxes.TemplateVolumes(s.cfg.Template, s.cfg.Template) {
		dataMiB = v.SizeMiB
	}
	maxGiB := max(dataMiB/1024-1, 1)
	for _, f := range []struct {
		name  string
		v     *int64
		limit int64
		unit  string
	}{{"vcpus", &sp.VCPUs, int64(t.VCPUs), ""}, {"memory_mib", &sp.MemoryMiB, int64(t.MemoryMiB), " MiB"}, {"storage_gib", &sp.StorageGiB, maxGiB, " GiB"}} {
		switch {
		case *f.v == 0:
			*f.v = f.limit
		case *f.v < 0 || *f.v > f.limit:
			return "", errdefs.Invalidf("%s must be 1-%d%s in this version (the size is fixed when the postgres template is baked)", f.name, f.limit, f.unit)
		}
	}
	if len(sp.Extensions) > MaxExtensions {
		return "", errdefs.Invalidf("at most %d extensions", MaxExtensions)
	}
	seen := map[string]bool{}
	for _, e := range sp.Extensions {
		if !slices.Contains(Extensions, e) {
			return "", errdefs.Invalidf("unknown extension %q: available are %s", trunc(e), strings.Join(Extensions, ", "))
		}
		seen[e] = true
	}
	sp.Extensions = slices.Sorted(func(yield func(string) bool) {
		for e := range seen {
			if !yield(e) {
				return
			}
		}
	})
	switch {
	case sp.SuspendAfterSeconds == nil:
		d := int64(DefaultSuspendAfter)
		sp.SuspendAfterSeconds = &d
	case *sp.SuspendAfterSeconds < 0 || *sp.SuspendAfterSeconds > MaxSuspendAfter:
		return "", errdefs.Invalidf("suspend_after_seconds must be 0 (never) to %d", MaxSuspendAfter)
	}
	return note, nil
}

// farFuture is a database sandbox's expiry: it lives until the database is deleted.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Create makes a database: a sandbox restored from the postgres template, set up for its owner.
// It returns the record, the owner's password (shown once) and a note (an alias used).
func (s *Service) Create(ctx context.Context, teamID string, sp v1.DatabaseSpec) (store.Database, string, string, error) {
	note, err := s.validate(ctx, &sp)
	if err != nil {
		return store.Database{}, "", "", err
	}
	if _, err := s.cfg.Store.GetTeamDatabaseByName(ctx, teamID, sp.Name); err == nil {
		return store.Database{}, "", "", errdefs.Conflictf("the team already has a database named %s", sp.Name)
	}
	ctx = context.WithoutCancel(ctx) // what a host made is recorded or undone
	recorded, agentName, host, err := s.cfg.Templates.Resolve(ctx, teamID, s.cfg.Template)
	if err != nil {
		return store.Database{}, "", "", err
	}
	id := auth.NewID("db_")
	dbName := strings.ReplaceAll(sp.Name, "-", "_")
	d := store.Database{ID: id, TeamID: teamID, Name: sp.Name, Version: sp.Version, VCPUs: sp.VCPUs, MemoryMiB: sp.MemoryMiB,
		StorageGiB: sp.StorageGiB, Extensions: sp.Extensions, SuspendAfterSeconds: *sp.SuspendAfterSeconds,
		Owner: dbName + "_owner", DBName: dbName, State: StateReady}
	password, sealed, verifier, err := s.newPassword()
	if err != nil {
		return store.Database{}, "", "", err
	}
	d.Password = sealed
	sb, err := s.cfg.Sandboxes.Create(ctx, teamID, sandboxes.CreateParams{Template: recorded, AgentTemplate: agentName, TemplateHost: host,
		Metadata: map[string]string{"pandastack.database": id}, VolumeOwner: store.OwnerDatabase})
	if err != nil {
		return store.Database{}, "", "", err
	}
	d.SandboxID = sb.ID
	undo := func(err error) (store.Database, string, string, error) {
		s.dropVM(ctx, sb, "database create failed")
		return store.Database{}, "", "", err
	}
	if _, err := s.cfg.Store.SetSandboxExpiry(ctx, sb.ID, farFuture, 0); err != nil {
		return undo(err)
	}
	if err := s.setup(ctx, d, password, verifier); err != nil {
		return undo(err)
	}
	d, err = s.cfg.Store.CreateDatabase(ctx, d)
	if errors.Is(err, store.ErrConflict) {
		return undo(errdefs.Conflictf("the team already has a database named %s", sp.Name))
	}
	if err != nil {
		return undo(err)
	}
	s.log.Info("database created", "database", d.ID, "team", teamID, "sandbox", sb.ID)
	s.background(d, s.baseBackup)
	return d, password, note, nil
}

// newPassword makes an owner's password: the password, its sealed form and its SCRAM verifier.
func (s *Service) newPassword() (plain, stored, verifier string, err error) {
	if plain, err = auth.RandomString(32, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"); err != nil {
		return
	}
	if stored, err = sealed.SealBytes(s.cfg.SecretsKey, []byte(plain)); err != nil {
		return
	}
	verifier, err = scramVerifier(plain)
	return
}

// RotatePassword gives the team's database's owner a new password and returns it (shown once);
// the old one stops working at once, sessions already open stay.
func (s *Service) RotatePassword(ctx context.Context, teamID, id string) (store.Database, string, error) {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return d, "", err
	}
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil {
		return d, "", err
	}
	password, sealed, verifier, err := s.newPassword()
	if err != nil {
		return d, "", err
	}
	ctx = context.WithoutCancel(ctx)
	sql := fmt.Sprintf("ALTER ROLE %s PASSWORD %s;\n", quoteIdent(d.Owner), quoteLiteral(verifier))
	if err := s.psql(ctx, sb, "postgres", sql); err != nil {
		return d, "", err
	}
	if err := s.cfg.Store.SetDatabasePassword(ctx, teamID, d.ID, sealed); err != nil {
		return d, "", err
	}
	d.Password = sealed
	s.log.Info("database password rotated", "database", d.ID)
	return d, password, nil
}

// copySource is the team's database id, about to be copied into a new database called name:
// refused when the team already has a database so named.
func (s *Service) copySource(ctx context.Context, teamID, id, name string) (store.Database, error) {
	p, err := s.Get(ctx, teamID, id)
	if err != nil {
		return p, err
	}
	if _, err := s.cfg.Store.GetTeamDatabaseByName(ctx, teamID, name); err == nil {
		return store.Database{}, errdefs.Conflictf("the team already has a database named %s", name)
	}
	return p, nil
}

// Branch makes a new database that is a copy-on-write fork of the team's database parent at
// this instant (its VM: memory and disk): writes in either do not show in the other. The branch
// has the parent's owner, database and password.
func (s *Service) Branch(ctx context.Context, teamID, parentID, name string) (store.Database, error) {
	if !namePattern.MatchString(name) || slices.Contains(reservedNames, name) {
		return store.Database{}, errdefs.Invalidf("name must be 1-50 of a-z, 0-9, _ and -, starting with a letter")
	}
	p, err := s.copySource(ctx, teamID, parentID, name)
	if err != nil {
		return p, err
	}
	psb, err := s.cfg.Store.GetSandbox(ctx, p.SandboxID)
	if err != nil {
		return store.Database{}, err
	}
	ctx = context.WithoutCancel(ctx)
	kids, err := s.cfg.Sandboxes.ForkOwned(ctx, psb, 1, store.OwnerDatabase) // its own copy of the parent's volume
	if err != nil {
		return store.Database{}, err
	}
	sb := kids[0]
	d := p
	d.ID, d.Name, d.SandboxID, d.ParentID, d.State = auth.NewID("db_"), name, sb.ID, p.ID, StateReady
	return s.record(ctx, sb, d, "database branched")
}

// CronDatabase is where pg_cron lives (its cron.database_name, fixed when postgres starts):
// jobs for the database run with cron.schedule_in_database.
const CronDatabase = "postgres"

// extensionSQL is the CREATE EXTENSION statements of d's extensions by the database they go in.
func extensionSQL(d store.Database) map[string]string {
	out := map[string]string{}
	for _, e := range d.Extensions {
		db := d.DBName
		if e == "pg_cron" {
			db = CronDatabase
		}
		out[db] += fmt.Sprintf("CREATE EXTENSION IF NOT EXISTS %s CASCADE;\n", quoteIdent(e))
	}
	return out
}

// templatePassword is the password of the postgres template's roles (templates/postgres-17.yaml),
// good only until a database's set-up takes it away.
const templatePassword = "postgres"

// setup runs the set-up over the database's own port (no exec in the guest): as the template's
// postgres role, setupSQL and pg_cron; then as the new owner, the other extensions.
func (s *Service) setup(ctx context.Context, d store.Database, password, verifier string) error {
	ext := extensionSQL(d)
	steps := []struct {
		creds Credentials
		sql   string
	}{
		{Credentials{User: "postgres", Password: templatePassword, Database: "postgres"}, setupSQL(d, verifier) + ext[CronDatabase]},
		{Credentials{User: d.Owner, Password: password, Database: d.DBName}, ext[d.DBName]},
	}
	for i, st := range steps {
		if st.sql == "" {
			continue
		}
		c, err := s.connect(ctx, d, st.creds)
		if err != nil {
			return fmt.Errorf("database: set-up connection as %s: %w", st.creds.User, err)
		}
		if i == 0 {
			err = closeSessions(ctx, c, "user")
		}
		if err == nil {
			_, err = c.Exec(ctx, st.sql).ReadAll()
		}
		s.release(ctx, d, c)
		if err != nil {
			return fmt.Errorf("database: set-up as %s: %w", st.creds.User, err)
		}
	}
	return nil
}

// closeSessions ends the other sessions on database db (the pooler may hold an idle server
// connection to it) and waits until they are gone: a database with sessions cannot be renamed.
func closeSessions(ctx context.Context, c *pgconn.PgConn, db string) error {
	for range 100 {
		rs, err := c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "+quoteLiteral(db)+
			" AND pid <> pg_backend_pid()").ReadAll()
		if err != nil {
			return err
		}
		if len(rs) == 0 || len(rs[0].Rows) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("database: the template's database keeps being used")
}

// setupSQL turns the template's cluster into the database's: its role "user" and database "user"
// become the owner's (a superuser of its own VM), the owner's password is the verifier, and no
// other role can log in with a password (the template's are known).
func setupSQL(d store.Database, verifier string) string {
	var b strings.Builder
	if d.DBName != "user" {
		fmt.Fprintf(&b, "ALTER DATABASE \"user\" RENAME TO %s;\n", quoteIdent(d.DBName))
	}
	fmt.Fprintf(&b, "ALTER ROLE \"user\" RENAME TO %s;\n", quoteIdent(d.Owner))
	fmt.Fprintf(&b, "ALTER ROLE %s PASSWORD %s;\n", quoteIdent(d.Owner), quoteLiteral(verifier))
	b.WriteString("ALTER ROLE postgres PASSWORD NULL;\n")
	return b.String()
}

// psql runs sql in the database's VM as the postgres superuser over the local socket (exec: it
// needs no password, e.g. to set a new one).
func (s *Service) psql(ctx context.Context, sb store.Sandbox, dbName, sql string) error {
	_, err := s.guest(ctx, sb, "exec runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -d "+shellQuote(dbName), &sql, setupTimeout)
	return err
}

// guest runs a shell script as root in the database's VM (without the template's PG*
// environment: psql then talks over the socket) and returns its output; a non-zero exit is an
// error carrying the script's output.
func (s *Service) guest(ctx context.Context, sb store.Sandbox, script string, stdin *string, timeout float64) (string, error) {
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return "", err
	}
	res, err := c.Exec(ctx, sb.ID, agentclient.ExecRequest{Cmd: "unset PGHOST PGUSER PGPASSWORD; " + script,
		Stdin: stdin, TimeoutSeconds: &timeout, User: "root"})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return res.Stdout, fmt.Errorf("database: a command in the database's VM failed (exit %d): %s", res.ExitCode, trunc(res.Stderr+res.Stdout))
	}
	return res.Stdout, nil
}

// Get returns the team's database; another team's is NotFound.
func (s *Service) Get(ctx context.Context, teamID, id string) (store.Database, error) {
	d, err := s.cfg.Store.GetTeamDatabase(ctx, teamID, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, errdefs.NotFoundf("database %s not found", trunc(id))
	}
	if err != nil {
		return d, err
	}
	return s.withState(ctx, d), nil
}

// List returns the team's databases, newest first.
func (s *Service) List(ctx context.Context, teamID string) ([]store.Database, error) {
	list, err := s.cfg.Store.ListTeamDatabases(ctx, teamID)
	for i, d := range list {
		list[i] = s.withState(ctx, d)
	}
	return list, err
}

// Delete deletes the team's database and its backups, kills its VM and deletes its volume (its
// data goes with it).
func (s *Service) Delete(ctx context.Context, teamID, id string) error {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return err
	}
	backups, err := s.Backups(ctx, teamID, d.ID)
	if err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteDatabase(ctx, teamID, d.ID); err != nil {
		return err
	}
	if err := s.deleteArchive(context.WithoutCancel(ctx), d.ID); err != nil {
		s.log.Warn("database: could not delete the archived WAL of a deleted database", "database", d.ID, "err", err)
	}
	for _, b := range backups { // databases restored from one keep running
		if err := s.cfg.Sandboxes.DeleteSnapshot(context.WithoutCancel(ctx), teamID, b.ID); err != nil {
			s.log.Warn("database: could not delete a backup of a deleted database", "database", d.ID, "snapshot", b.ID, "err", err)
		}
	}
	if sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID); err == nil {
		s.dropVM(context.WithoutCancel(ctx), sb, "database deleted")
	}
	return nil
}

// dropVM kills a database's VM sb (unless it is killed already) and deletes the volumes the
// database owns in it (its data: store.OwnerDatabase; killed, the VM no longer holds them).
// Failures are logged: a volume whose VM could not be killed stays, recorded.
func (s *Service) dropVM(ctx context.Context, sb store.Sandbox, reason string) {
	atts, err := s.cfg.Store.SandboxVolumes(ctx, sb.ID)
	if err != nil {
		s.log.Warn("database: could not read the volumes of its VM", "sandbox", sb.ID, "err", err)
	}
	if sb.State != store.StateKilled {
		if err := s.cfg.Sandboxes.Kill(ctx, sb, reason); err != nil {
			s.log.Warn("database: could not kill its VM", "sandbox", sb.ID, "reason", reason, "err", err)
		}
	}
	s.deleteOwnedVolumes(ctx, sb, atts, "", reason)
}

// deleteOwnedVolumes deletes the volumes among atts (sb's) that a database owns, but keep.
func (s *Service) deleteOwnedVolumes(ctx context.Context, sb store.Sandbox, atts []store.VolumeAttachment, keep, why string) {
	for _, a := range atts {
		v, err := s.cfg.Store.GetVolume(ctx, a.VolumeID)
		if err != nil || v.ID == keep || v.Owner != store.OwnerDatabase || v.Deleted {
			continue
		}
		if err := s.cfg.Sandboxes.DeleteVolume(ctx, v.TeamID, v.ID); err != nil {
			s.log.Warn("database: could not delete its volume", "sandbox", sb.ID, "volume", v.ID, "reason", why, "err", err)
		}
	}
}

// Host is the database's host name: <id>.db.<domain>.
func (s *Service) Host(d store.Database) string { return d.ID + "." + s.Domain() }

// Connection is how to reach d; password is "" except in a create's answer.
func (s *Service) Connection(d store.Database, password string) v1.DatabaseConnection {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(s.Host(d), strconv.Itoa(s.cfg.RouterPort)), Path: "/" + d.DBName,
		RawQuery: "sslmode=require"}
	if password != "" {
		u.User = url.UserPassword(d.Owner, password)
	} else {
		u.User = url.User(d.Owner)
	}
	c := v1.DatabaseConnection{URI: u.String(), Host: s.Host(d), Port: s.cfg.RouterPort, User: d.Owner, Database: d.DBName}
	u.Host = net.JoinHostPort(d.ID+"-pooler."+s.Domain(), strconv.Itoa(s.cfg.RouterPort))
	c.PoolerURI = u.String()
	if s.cfg.HTTPBase != "" {
		if b, err := url.Parse(s.cfg.HTTPBase); err == nil {
			port := b.Port()
			h := s.Host(d)
			if port != "" {
				h = net.JoinHostPort(h, port)
			}
			c.HTTPURL = b.Scheme + "://" + h + "/sql"
		}
	}
	return c
}

// Password is the owner's password of d (for the broker's API-key path).
func (s *Service) Password(d store.Database) (string, error) {
	b, err := sealed.OpenBytes(s.cfg.SecretsKey, d.Password)
	return string(b), err
}

// Lookup returns a database of any team by id (the router's and the /sql broker's: the id is the
// address, postgres authenticates).
func (s *Service) Lookup(ctx context.Context, id string) (store.Database, error) {
	d, err := s.cfg.Store.GetDatabase(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, errdefs.NotFoundf("database %s not found", trunc(id))
	}
	return d, err
}

// Dial opens a TCP connection to port (Port: postgres, PoolerPort: PgBouncer) in d's VM through
// its host agent (waking it if it hibernates, giving it a new VM if its VM died: heal.go).
func (s *Service) Dial(ctx context.Context, d store.Database, port int) (net.Conn, error) {
	sb, err := s.vm(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("database %s: its VM: %w", d.ID, err)
	}
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return nil, errdefs.New(errdefs.Unavailable, "database %s is not reachable: %v", d.ID, err)
	}
	conn, err := c.DialPort(ctx, sb.ID, port) // its host wakes a suspended database first
	s.cfg.Sandboxes.Touched(ctx, sb, c, err)
	return conn, err
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

func shellQuote(s string) string { return `'` + strings.ReplaceAll(s, `'`, `'\''`) + `'` }

// DialID is Dial for a database of any team by id, to postgres or its pooler (the SNI router's
// dialer).
func (s *Service) DialID(ctx context.Context, id string, pooler bool) (net.Conn, error) {
	d, err := s.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if pooler {
		return s.Dial(ctx, d, PoolerPort)
	}
	return s.Dial(ctx, d, Port)
}

// MaxLogBytes bounds a logs answer.
const MaxLogBytes = 1 << 20

// Logs returns the end of the database's postgres log, at most n bytes (a suspended database is
// woken for it).
func (s *Service) Logs(ctx context.Context, teamID, id string, n int) (string, error) {
	d, err := s.Get(ctx, teamID, id)
	if err != nil {
		return "", err
	}
	sb, err := s.cfg.Store.GetSandbox(ctx, d.SandboxID)
	if err != nil {
		return "", err
	}
	c, err := s.cfg.Sandboxes.Target(ctx, sb)
	if err != nil {
		return "", err
	}
	secs := 30.0
	res, err := c.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"tail", "-c", strconv.Itoa(n), "/var/log/postgresql/postgresql-17-main.log"},
		User: "root", TimeoutSeconds: &secs})
	s.cfg.Sandboxes.Touched(ctx, sb, c, err)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("database %s: reading its log failed (exit %d): %s", d.ID, res.ExitCode, trunc(res.Stderr))
	}
	return res.Stdout, nil
}
