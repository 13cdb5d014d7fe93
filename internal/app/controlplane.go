// Package app assembles PandaStack's three modes from their parts: the control plane (`server`),
// the host agent (`agent`) and both in one process (`up`). cmd/pandastack only binds flags to
// these configs; what starts in which order, and how it stops, is decided here once.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pandastack/pandastack/web"

	"github.com/pandastack/pandastack/internal/api"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/dbrouter"
	"github.com/pandastack/pandastack/internal/e2bcompat"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/pandastack/pandastack/internal/webhooks"
)

// ControlPlaneConfig configures a control plane (`server`, and the one inside `up`).
type ControlPlaneConfig struct {
	DatabaseURL      string   // SQLite file path or postgres:// URL
	Agents           []string // static host agents, as URL=TOKEN
	ClusterToken     string   // agents present it to register; empty disables registration
	DefaultTTL       time.Duration
	MaxTTL           time.Duration
	MaxUploadBytes   int64
	HeartbeatTimeout time.Duration
	AuditRetention   time.Duration // how long audit entries are kept
	KilledRetention  time.Duration // how long a killed sandbox's record is kept
	Quota            api.Quota     // every team's default limits (zero: none)
	RateLimit        api.RateLimit // per-key rate limits (zero: none)
	PresetKey        string        // becomes the first admin key of an empty store
	// KeyRecovery is the command that makes an admin key of this store on its machine, named
	// when PresetKey is not one of the store's keys (default: keys create --database-url).
	KeyRecovery string
	ProxyDomain string
	// PrivatePorts: a sandbox created without public_ports gets private ports (traffic token).
	PrivatePorts bool
	EgressOpen   []string // IPv4 CIDRs, as --egress-open gives them
	// WebhookAllow are non-public ranges (CIDRs, --webhook-allow) webhooks may reach;
	// WebhookLoopback lets them reach loopback too (`up`: a receiver on this machine).
	WebhookAllow    []string
	WebhookLoopback bool
	// BlobStore is where artifacts go to leave their host (file:///dir or s3://bucket/prefix?…,
	// see internal/blob); hosts learn it when they register. Empty: artifacts stay on their host.
	BlobStore string
	// DBAddr is the databases' SNI router's listen address ("": no router). Its TLS certificate
	// is DBTLSCert/DBTLSKey (the operator's), else a local CA and certificate kept in DBTLSDir
	// (made when missing). DBAddrRequired: a router that cannot start stops the start; else it
	// is a warning and databases are reached by the HTTP broker only.
	DBAddr         string
	DBAddrRequired bool
	DBTLSDir       string
	DBTLSCert      string
	DBTLSKey       string
	// PublicURL is the API's base URL as clients reach it (databases' http_url port).
	PublicURL string
	// GitDir holds apps' git remotes; empty: beside a SQLite store's file, none with PostgreSQL.
	GitDir string
	// GuestCAFiles are PEM files of extra CA certificates every sandbox trusts, app builds too (a
	// TLS-inspecting proxy's, for package registries).
	GuestCAFiles []string
	Version      string // reported by /healthz
	// E2BAddr is the listen address of the E2B-compatible API (internal/e2bcompat,
	// docs/e2b.md); empty: off.
	E2BAddr string
	Logger  *slog.Logger
}

// ControlPlane is a running store + scheduler + API server and their background loops.
type ControlPlane struct {
	Store     *store.Store
	Scheduler *scheduler.Scheduler
	API       *api.Server
	Blob      blob.Store // nil without --blob-store
	// PresetKeyOK: the config's PresetKey is a usable key of the store (made now, or known).
	PresetKeyOK bool
	// E2BURL is the base URL of the E2B-compatible API ("" when off).
	E2BURL string
	e2bLn  net.Listener
	// DBAddr is where the databases' router listens and DBCA the CA file clients verify it with
	// ("" when the operator gave the certificate, or there is no router).
	DBAddr string
	DBCA   string
	dbLn   net.Listener
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// StartControlPlane opens the store, makes the first key of an empty store, registers the static
// agents and starts the background loops (heartbeat checks, polls, reaper). The returned key is
// non-empty only when this call created it.
func StartControlPlane(ctx context.Context, o ControlPlaneConfig) (*ControlPlane, string, error) {
	hookPolicy := webhooks.Policy{AllowLoopback: o.WebhookLoopback}
	for _, c := range o.WebhookAllow {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, "", fmt.Errorf("--webhook-allow %q: not a CIDR", c)
		}
		hookPolicy.Allow = append(hookPolicy.Allow, p.Masked())
	}
	open, err := network.ParseOpen(o.EgressOpen)
	if err != nil {
		return nil, "", fmt.Errorf("--egress-open: %w", err)
	}
	guestCA, err := readGuestCAs(o.GuestCAFiles)
	if err != nil {
		return nil, "", err
	}
	secretsKey, err := secretsKeyFromEnv()
	if err != nil {
		return nil, "", err
	}
	var bs blob.Store
	if o.BlobStore != "" {
		// Opened first: a store that is unreachable or misconfigured stops the start, with why.
		if bs, err = blob.Open(ctx, o.BlobStore); err != nil {
			return nil, "", fmt.Errorf("--blob-store: %w", err)
		}
		o.Logger.Info("blob store", "url", bs.String())
	}
	st, err := store.Open(ctx, o.DatabaseURL)
	if err != nil {
		return nil, "", err
	}
	key, created, err := auth.Bootstrap(ctx, st, o.PresetKey)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("first API key: %w", err)
	}
	if !created {
		key = ""
	}
	presetOK := created && key == o.PresetKey
	if !created && o.PresetKey != "" {
		_, aerr := (&auth.Authenticator{Store: st}).Authenticate(ctx, o.PresetKey)
		if presetOK = aerr == nil; !presetOK {
			warnPresetKey(o, aerr)
		}
	}
	sched := scheduler.New(scheduler.Config{Store: st, Logger: o.Logger, HeartbeatTimeout: o.HeartbeatTimeout,
		HostCacheTTL: scheduler.DefaultHostCacheTTL})
	for _, a := range o.Agents {
		u, tok, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(u, "http") {
			st.Close()
			return nil, "", fmt.Errorf("--agent %q: expected URL=TOKEN, e.g. http://10.0.0.5:7070=secret", a)
		}
		sched.AddStaticAgent(u, tok)
	}
	// One synchronous poll so the first requests already see the hosts.
	if err := sched.PollStatic(ctx); err != nil {
		o.Logger.Warn("a host agent did not answer at start-up; will keep trying", "err", err)
	}
	dbLn, dbTLS, dbCA, err := openDBRouter(o)
	if err != nil {
		st.Close()
		return nil, "", err
	}
	dbPort := 0
	if dbLn != nil {
		dbPort = dbLn.Addr().(*net.TCPAddr).Port
	}
	srv := api.New(api.Config{DBRouterPort: dbPort, PublicURL: o.PublicURL, Store: st, Scheduler: sched, Logger: o.Logger, DefaultTTL: o.DefaultTTL, MaxTTL: o.MaxTTL,
		MaxUploadBytes: o.MaxUploadBytes, ClusterToken: o.ClusterToken, Version: o.Version, EgressOpen: open, AuditRetention: o.AuditRetention, KilledRetention: o.KilledRetention, Quota: o.Quota, RateLimit: o.RateLimit,
		ProxyDomain: strings.ToLower(strings.Trim(o.ProxyDomain, ".")), PrivatePorts: o.PrivatePorts, BlobStore: blobURL(bs), Blob: bs, SecretsKey: secretsKey,
		Console: web.Handler(), GitDir: gitDir(o), GuestCA: guestCA, Webhooks: hookPolicy})
	var e2bLn net.Listener
	if o.E2BAddr != "" {
		if e2bLn, err = net.Listen("tcp", o.E2BAddr); err != nil {
			if dbLn != nil {
				dbLn.Close()
			}
			srv.Close()
			st.Close()
			return nil, "", fmt.Errorf("--e2b-addr: %w", err)
		}
	}
	// The loops outlive a cancelled start-up context: Close stops them, after the listener.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp := &ControlPlane{Store: st, Scheduler: sched, API: srv, Blob: bs, PresetKeyOK: presetOK, log: o.Logger, cancel: cancel,
		done: make(chan struct{}), e2bLn: e2bLn}
	if e2bLn != nil {
		cp.E2BURL = BaseURL(e2bLn.Addr().String())
	}
	if dbLn != nil {
		cp.dbLn, cp.DBAddr, cp.DBCA = dbLn, dbLn.Addr().String(), dbCA
		dbs := srv.Databases()
		router := dbrouter.New(dbrouter.Config{TLS: dbTLS, Domain: dbs.Domain(), Dial: dbs.DialID, Active: dbs.Active,
			Cancels: routerCancels{st}, Logger: o.Logger.With("part", "dbrouter")})
		go router.Serve(dbLn)
		o.Logger.Info("databases' router listening", "addr", cp.DBAddr, "ca", dbCA)
	}
	go func() {
		defer close(cp.done)
		go sched.Run(lctx)
		go srv.RunAuditPruner(lctx)
		go srv.RunKilledPruner(lctx)
		go srv.RunVolumeSweeper(lctx)
		go srv.RunWebhooks(lctx)
		go srv.RunFunctions(lctx)
		go srv.Databases().RunSuspender(lctx, 0)
		go srv.Databases().RunBackups(lctx)
		go srv.Databases().RunArchiver(lctx)
		go srv.Databases().RunHealer(lctx, 0)
		if bs != nil {
			go srv.RunPublishedSweeper(lctx, bs)
		}
		go srv.RunApps(lctx)
		schedulesDone := make(chan struct{})
		go func() { srv.RunSchedules(lctx, 0); close(schedulesDone) }() // waits for its runs
		srv.RunReaper(lctx)
		<-schedulesDone
		srv.Close()
	}()
	return cp, key, nil
}

// warnPresetKey says, loudly, that the operator's PANDASTACK_API_KEY is not a key of this store
// (it already had keys, so it was not made one): every call with it would be a 401 whose cause
// is not visible from the client. The line says what to do.
func warnPresetKey(o ControlPlaneConfig, why error) {
	recovery := o.KeyRecovery
	if recovery == "" {
		url := o.DatabaseURL
		if strings.Contains(url, "://") {
			url = "URL" // a postgres URL may hold a password: not for a log
		}
		recovery = "pandastack keys create --admin --database-url " + url
	}
	o.Logger.Warn("PANDASTACK_API_KEY IS NOT A KEY OF THIS STORE: every call with it will be refused (401). "+
		"Use the key printed when this store was first started, or make an admin key on this machine, as root: "+
		recovery+" (then export PANDASTACK_API_KEY=<the key it prints>)",
		"key", auth.DisplayPrefix(o.PresetKey)+"…", "why", why.Error())
}

// Serve answers on ln (and on the E2B-compatible API's listener, when on) until ctx ends, then
// drains requests for up to 10 s.
func (cp *ControlPlane) Serve(ctx context.Context, ln net.Listener) error {
	servers := []*http.Server{cp.httpServer(cp.API.Handler())}
	lns := []net.Listener{ln}
	if cp.e2bLn != nil {
		// The E2B SDKs speak HTTP/1.1 to a plain http:// URL; connect-go clients may use h2c.
		e := cp.httpServer(e2bcompat.New(cp.API.E2BBackend()))
		e.Protocols = new(http.Protocols)
		e.Protocols.SetHTTP1(true)
		e.Protocols.SetUnencryptedHTTP2(true)
		servers, lns = append(servers, e), append(lns, cp.e2bLn)
	}
	errc := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { errc <- hs.Serve(lns[i]) }()
	}
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, hs := range servers {
		if serr := hs.Shutdown(sctx); serr != nil {
			hs.Close()
		}
	}
	return err
}

func (cp *ControlPlane) httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cp.log.Handler(), slog.LevelWarn)}
}

// openDBRouter takes the router's port and loads (or makes) its TLS certificate; nil without
// DBAddr, or when it cannot start and is not required (a warning says why).
func openDBRouter(o ControlPlaneConfig) (net.Listener, *tls.Config, string, error) {
	if o.DBAddr == "" {
		return nil, nil, "", nil
	}
	fail := func(err error) (net.Listener, *tls.Config, string, error) {
		if o.DBAddrRequired {
			return nil, nil, "", fmt.Errorf("--db-addr: %w", err)
		}
		o.Logger.Warn("the databases' router is off (set --db-addr to a free port, or empty to silence this)", "addr", o.DBAddr, "err", err)
		return nil, nil, "", nil
	}
	var cfg *tls.Config
	ca := ""
	var err error
	if o.DBTLSCert != "" || o.DBTLSKey != "" {
		cfg, err = dbrouter.LoadTLS(o.DBTLSCert, o.DBTLSKey)
	} else {
		domain := strings.ToLower(strings.Trim(o.ProxyDomain, "."))
		if domain == "" {
			domain = "localhost"
		}
		cfg, ca, err = dbrouter.LoadOrCreateTLS(o.DBTLSDir, "db."+domain)
	}
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", o.DBAddr)
	if err != nil {
		return fail(err)
	}
	return ln, cfg, ca, nil
}

// Close stops the background loops and then closes the store they use.
func (cp *ControlPlane) Close() {
	if cp.dbLn != nil {
		cp.dbLn.Close()
	}
	cp.cancel()
	<-cp.done
	if cp.e2bLn != nil {
		cp.e2bLn.Close()
	}
	cp.Store.Close()
}

// blobURL is the store's URL as hosts are told it (never with credentials), or "".
func blobURL(bs blob.Store) string {
	if bs == nil {
		return ""
	}
	return bs.String()
}

// secretsKeyFromEnv reads PANDASTACK_SECRETS_KEY, the key (32 bytes, base64) that seals
// functions' secrets at rest; unset: they are stored unsealed (never shown or logged either way).
func secretsKeyFromEnv() ([]byte, error) {
	v := strings.TrimSpace(os.Getenv("PANDASTACK_SECRETS_KEY"))
	if v == "" {
		return nil, nil
	}
	k, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(k) != 32 {
		return nil, errors.New("PANDASTACK_SECRETS_KEY must be 32 bytes in base64 (e.g. `head -c 32 /dev/urandom | base64`)")
	}
	return k, nil
}

// gitDir is where apps' git remotes live: o.GitDir, else "git" beside a SQLite store's file.
func gitDir(o ControlPlaneConfig) string {
	if o.GitDir != "" || strings.Contains(o.DatabaseURL, "://") {
		return o.GitDir
	}
	return filepath.Join(filepath.Dir(o.DatabaseURL), "git")
}

// readGuestCAs reads PEM files of CA certificates into one bundle, refusing a file that holds no
// certificate or something else.
func readGuestCAs(files []string) ([]byte, error) {
	var out []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--guest-ca-file: %w", err)
		}
		n := 0
		for rest := b; ; n++ {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if _, err := x509.ParseCertificate(blk.Bytes); blk.Type != "CERTIFICATE" || err != nil {
				return nil, fmt.Errorf("--guest-ca-file %s: a %s block that is not a certificate", f, blk.Type)
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("--guest-ca-file %s: no PEM certificate in it", f)
		}
		out = append(append(out, b...), '\n')
	}
	if len(out) > sandboxes.MaxGuestCA {
		return nil, fmt.Errorf("--guest-ca-file: %d bytes of certificates, more than the %d-byte limit", len(out), sandboxes.MaxGuestCA)
	}
	return out, nil
}

// routerCancels keeps the router's cancel keys in the store, where every replica finds them.
type routerCancels struct{ *store.Store }

func (c routerCancels) CancelTargets(ctx context.Context, hash string) ([]dbrouter.CancelTarget, error) {
	ts, err := c.CancelKeyTargets(ctx, hash)
	out := make([]dbrouter.CancelTarget, len(ts))
	for i, t := range ts {
		out[i] = dbrouter.CancelTarget{ID: t.ID, Pooler: t.Pooler}
	}
	return out, err
}
