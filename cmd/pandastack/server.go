package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/pandastack/pandastack/internal/api"
	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// registerControlPlaneFlags adds the control plane's policy flags to server and up.
func registerControlPlaneFlags(f *pflag.FlagSet, o *app.ControlPlaneConfig) {
	durationVar(f, &o.DefaultTTL, "default-ttl", api.DefaultTTL, "TTL of a sandbox created without ttl_seconds")
	durationVar(f, &o.MaxTTL, "max-ttl", api.DefaultMaxTTL, "largest ttl_seconds accepted")
	f.Int64Var(&o.MaxUploadBytes, "max-upload-bytes", api.DefaultMaxUploadBytes, "largest file upload accepted")
	f.StringVar(&o.E2BAddr, "e2b-addr", "", "listen address of the E2B-compatible API, e.g. 127.0.0.1:3000 (off unless set): the stock E2B SDKs work with E2B_API_URL and E2B_SANDBOX_URL set to it and E2B_API_KEY from keys create --e2b (docs/e2b.md)")
	f.StringVar(&o.ProxyDomain, "proxy-domain", "localhost", `sandbox ports are served at <port>-<sandbox id>.<domain> through this server (empty: no proxy); point a wildcard DNS record *.<domain> at it`)
	f.BoolVar(&o.PrivatePorts, "private-ports", false, "sandboxes' ports need their traffic token (a create may still ask for public_ports: true); default: a port is reachable by anyone who knows its sandbox id")
	f.StringArrayVar(&o.EgressOpen, "egress-open", nil, "a private range (IPv4 CIDR) every sandbox may reach, e.g. a corporate proxy's (repeatable; teams may then allow inside it); loopback, link-local, multicast, the sandboxes' links and the hosts' own addresses stay blocked")
	f.StringArrayVar(&o.WebhookAllow, "webhook-allow", nil, "a non-public range (CIDR) webhooks may deliver to, e.g. an internal receiver's (repeatable); other private, link-local and reserved addresses are refused at creation and at every dial (up also allows loopback)")
	f.StringArrayVar(&o.GuestCAFiles, "guest-ca-file", nil, "PEM file of extra CA certificates every sandbox trusts (app builds too), e.g. a TLS-inspecting proxy's for npm/pip (repeatable)")
	f.StringVar(&o.GitDir, "git-dir", "", "directory of apps' git remotes (bare repositories served at /git/<app>.git; git push deploys); default: beside a SQLite store (up: DATA_DIR/git), none with PostgreSQL")
	f.StringVar(&o.BlobStore, "blob-store", "", "where artifacts go to leave their host: file:///DIR or s3://BUCKET/PREFIX?endpoint=URL&region=R (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); hosts learn it when they register (up: file://DATA_DIR/blobs)")
	durationVar(f, &o.HeartbeatTimeout, "heartbeat-timeout", scheduler.DefaultHeartbeatTimeout, "a host silent this long is marked down and its sandboxes lost")
	f.Int64Var(&o.Quota.Sandboxes, "quota-sandboxes", 0, "each team's default limit on running and hibernated sandboxes (0: none; an admin key may set a team's own)")
	f.Int64Var(&o.Quota.VCPUs, "quota-vcpus", 0, "each team's default limit on its sandboxes' vCPUs together (0: none)")
	f.Int64Var(&o.Quota.MemoryMiB, "quota-memory-mib", 0, "each team's default limit on its sandboxes' memory together, in MiB (0: none)")
	f.Int64Var(&o.Quota.Volumes, "quota-volumes", 0, "each team's default limit on its volumes (0: none)")
	f.Int64Var(&o.Quota.VolumeMiB, "quota-volume-mib", 0, "each team's default limit on its volumes' sizes together, in MiB (0: none)")
	f.Int64Var(&o.Quota.Databases, "quota-databases", 0, "each team's default limit on its databases (0: none)")
	f.Int64Var(&o.Quota.Apps, "quota-apps", 0, "each team's default limit on its apps (0: none)")
	f.Int64Var(&o.Quota.Functions, "quota-functions", 0, "each team's default limit on its functions (0: none)")
	f.Int64Var(&o.Quota.SnapshotMiB, "quota-snapshot-mib", 0, "each team's default limit on its snapshots' sizes together, in MiB (0: none; a snapshot is let in while the sizes and its sandbox's memory size fit)")
	f.Float64Var(&o.RateLimit.PerSecond, "rate-limit", 0, "calls a second each API key may make on average, per server replica (0: no limit; over it: 429 rate_limited with Retry-After)")
	f.IntVar(&o.RateLimit.Burst, "rate-burst", 0, "calls a key may make at once before --rate-limit applies (default: the rate, at least 1)")
	f.Float64Var(&o.RateLimit.CreatesPerSecond, "create-rate-limit", 0, "creates (sandboxes, forks, snapshots, volumes, templates) a second each key may make, on top of --rate-limit (0: no limit)")
	f.IntVar(&o.RateLimit.CreateBurst, "create-burst", 0, "creates a key may make at once before --create-rate-limit applies (default: the rate, at least 1)")
	durationVar(f, &o.AuditRetention, "audit-retention", api.DefaultAuditRetention, "how long the audit log keeps an entry (older ones are pruned hourly)")
	durationVar(f, &o.KilledRetention, "killed-retention", api.DefaultKilledRetention, "how long a killed sandbox's record is kept after its last change (older ones are deleted hourly, by one replica; a GET of one then answers 404)")
}

// registerDBTLSFlags adds the operator's own certificate for the databases' router.
func registerDBTLSFlags(f *pflag.FlagSet, o *app.ControlPlaneConfig) {
	f.StringVar(&o.DBTLSCert, "db-tls-cert", "", "PEM certificate for *.db.<proxy domain> (with --db-tls-key); default: a local CA's")
	f.StringVar(&o.DBTLSKey, "db-tls-key", "", "PEM key of --db-tls-cert")
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func init() {
	var o app.ControlPlaneConfig
	var addr, logLevel string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: the public /v1 API over SQLite or PostgreSQL",
		Long: `Run the control plane. It serves the public API, keeps state in SQLite (a file path) or
PostgreSQL (a postgres:// URL; run as many replicas as you like over one database), places
sandboxes on host agents and kills them when their TTL runs out.

Host agents join in one of two ways:
  --agent URL=TOKEN             the server polls that agent itself (repeatable), or
  pandastack agent --server URL --server-token T
                                the agent registers and heartbeats (needs --cluster-token T here).

On an empty database the first admin key is PANDASTACK_API_KEY if set, else a new one that is
printed once on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			o.Logger, o.Version = log, version
			if o.DatabaseURL == "" {
				o.DatabaseURL = envOr("PANDASTACK_DATABASE_URL", "/var/lib/pandastack/server/state.db")
			}
			if o.ClusterToken == "" {
				o.ClusterToken = os.Getenv("PANDASTACK_CLUSTER_TOKEN")
			}
			o.PresetKey = os.Getenv("PANDASTACK_API_KEY")
			ctx, stop := signalContext()
			defer stop()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			o.PublicURL = app.BaseURL(ln.Addr().String())
			o.DBAddrRequired = cmd.Flags().Changed("db-addr")
			if o.DBTLSDir == "" {
				o.DBTLSDir = "/var/lib/pandastack/server/db-tls"
				if !strings.Contains(o.DatabaseURL, "://") {
					o.DBTLSDir = filepath.Join(filepath.Dir(o.DatabaseURL), "db-tls")
				}
			}
			cp, key, err := app.StartControlPlane(ctx, o)
			if err != nil {
				ln.Close()
				return err
			}
			defer cp.Close()
			if key != "" && key != o.PresetKey {
				fmt.Fprintf(os.Stderr, "First admin API key (shown once; store it now):\n  %s\n", key)
			}
			log.Info("control plane listening", "addr", ln.Addr().String(), "store", string(cp.Store.Dialect()),
				"agents", len(o.Agents), "agent_registration", o.ClusterToken != "", "databases", cp.DBAddr, "databases_ca", cp.DBCA)
			if cp.E2BURL != "" {
				log.Info("E2B-compatible API listening (docs/e2b.md)", "E2B_API_URL", cp.E2BURL, "E2B_SANDBOX_URL", cp.E2BURL)
			}
			return cp.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", ":8080", "listen address")
	f.StringVar(&o.DatabaseURL, "database-url", "", "SQLite file path or postgres:// URL (default $PANDASTACK_DATABASE_URL, else /var/lib/pandastack/server/state.db)")
	f.StringArrayVar(&o.Agents, "agent", nil, "host agent to use, as URL=TOKEN (repeatable)")
	f.StringVar(&o.ClusterToken, "cluster-token", "", "secret agents present to register themselves (default $PANDASTACK_CLUSTER_TOKEN; empty disables registration)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.DBAddr, "db-addr", ":5432", "listen address of the databases' PostgreSQL router (TLS, SNI <id>.db.<proxy domain>; empty: none)")
	f.StringVar(&o.DBTLSDir, "db-tls-dir", "", "where the router keeps the local CA and certificate it makes when --db-tls-cert is not given; clients verify with ca.pem there (default: db-tls beside the SQLite file, else /var/lib/pandastack/server/db-tls)")
	registerDBTLSFlags(f, &o)
	registerControlPlaneFlags(f, &o)
	rootCmd.AddCommand(cmd)
}
