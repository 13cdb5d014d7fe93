package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/api"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
	"github.com/spf13/cobra"
)

// cpOptions configure a control plane (`server`, and the one inside `up`).
type cpOptions struct {
	dbURL            string
	agents           []string // URL=TOKEN
	clusterToken     string
	defaultTTL       time.Duration
	maxTTL           time.Duration
	maxUpload        int64
	heartbeatTimeout time.Duration
	presetKey        string // becomes the first admin key of an empty store
	proxyDomain      string
	egressOpen       []string
	log              *slog.Logger
}

func (o *cpOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&o.defaultTTL, "default-ttl", api.DefaultTTL, "TTL of a sandbox created without ttl_seconds")
	f.DurationVar(&o.maxTTL, "max-ttl", api.DefaultMaxTTL, "largest ttl_seconds accepted")
	f.Int64Var(&o.maxUpload, "max-upload-bytes", api.DefaultMaxUploadBytes, "largest file upload accepted")
	f.StringVar(&o.proxyDomain, "proxy-domain", "localhost", `sandbox ports are served at <port>-<sandbox id>.<domain> through this server (empty: no proxy); point a wildcard DNS record *.<domain> at it`)
	f.StringArrayVar(&o.egressOpen, "egress-open", nil, "a private range (IPv4 CIDR) every sandbox may reach, e.g. a corporate proxy's (repeatable; teams may then allow inside it); loopback, link-local, multicast, the sandboxes' links and the hosts' own addresses stay blocked")
	f.DurationVar(&o.heartbeatTimeout, "heartbeat-timeout", scheduler.DefaultHeartbeatTimeout, "a host silent this long is marked down and its sandboxes lost")
}

// controlPlane is a running store + scheduler + API server.
type controlPlane struct {
	st     *store.Store
	sched  *scheduler.Scheduler
	srv    *api.Server
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// startControlPlane opens the store, makes the first key of an empty store, registers the static
// agents and starts the background loops (heartbeat checks, polls, reaper). The returned key is
// non-empty only when this call created it.
func startControlPlane(ctx context.Context, o cpOptions) (*controlPlane, string, error) {
	open, err := network.ParseOpen(o.egressOpen)
	if err != nil {
		return nil, "", fmt.Errorf("--egress-open: %w", err)
	}
	st, err := store.Open(ctx, o.dbURL)
	if err != nil {
		return nil, "", err
	}
	key, created, err := auth.Bootstrap(ctx, st, o.presetKey)
	if err != nil {
		st.Close()
		return nil, "", fmt.Errorf("first API key: %w", err)
	}
	if !created {
		key = ""
	}
	sched := scheduler.New(scheduler.Config{Store: st, Logger: o.log, HeartbeatTimeout: o.heartbeatTimeout})
	for _, a := range o.agents {
		u, tok, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(u, "http") {
			st.Close()
			return nil, "", fmt.Errorf("--agent %q: expected URL=TOKEN, e.g. http://10.0.0.5:7070=secret", a)
		}
		sched.AddStaticAgent(u, tok)
	}
	// One synchronous poll so the first requests already see the hosts.
	if err := sched.PollStatic(ctx); err != nil {
		o.log.Warn("a host agent did not answer at start-up; will keep trying", "err", err)
	}
	srv := api.New(api.Config{Store: st, Scheduler: sched, Logger: o.log, DefaultTTL: o.defaultTTL, MaxTTL: o.maxTTL,
		MaxUploadBytes: o.maxUpload, ClusterToken: o.clusterToken, Version: version, EgressOpen: open,
		ProxyDomain: strings.ToLower(strings.Trim(o.proxyDomain, "."))})
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp := &controlPlane{st: st, sched: sched, srv: srv, log: o.log, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cp.done)
		go sched.Run(lctx)
		srv.RunReaper(lctx)
	}()
	return cp, key, nil
}

// serve answers on ln until ctx ends, then drains requests for up to 10 s.
func (cp *controlPlane) serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: cp.srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cp.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return nil
}

func (cp *controlPlane) close() {
	cp.cancel()
	<-cp.done
	cp.st.Close()
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
	var o cpOptions
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
			o.log = log
			if o.dbURL == "" {
				o.dbURL = envOr("PANDASTACK_DATABASE_URL", "/var/lib/pandastack/server/state.db")
			}
			if o.clusterToken == "" {
				o.clusterToken = os.Getenv("PANDASTACK_CLUSTER_TOKEN")
			}
			o.presetKey = os.Getenv("PANDASTACK_API_KEY")
			ctx, stop := signalContext()
			defer stop()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			cp, key, err := startControlPlane(ctx, o)
			if err != nil {
				ln.Close()
				return err
			}
			defer cp.close()
			if key != "" && key != o.presetKey {
				fmt.Fprintf(os.Stderr, "First admin API key (shown once; store it now):\n  %s\n", key)
			}
			log.Info("control plane listening", "addr", ln.Addr().String(), "store", string(cp.st.Dialect()),
				"agents", len(o.agents), "agent_registration", o.clusterToken != "")
			return cp.serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", ":8080", "listen address")
	f.StringVar(&o.dbURL, "database-url", "", "SQLite file path or postgres:// URL (default $PANDASTACK_DATABASE_URL, else /var/lib/pandastack/server/state.db)")
	f.StringArrayVar(&o.agents, "agent", nil, "host agent to use, as URL=TOKEN (repeatable)")
	f.StringVar(&o.clusterToken, "cluster-token", "", "secret agents present to register themselves (default $PANDASTACK_CLUSTER_TOKEN; empty disables registration)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	o.flags(cmd)
	rootCmd.AddCommand(cmd)
}
