package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pandastack/pandastack/web"

	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/spf13/cobra"
)

func defaultDataDir() string {
	if d := os.Getenv("PANDASTACK_DATA_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/pandastack"
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".pandastack")
	}
	return ".pandastack"
}

func init() {
	var cfg app.UpConfig
	var logLevel, bake string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a complete single-machine PandaStack: control plane + local host agent, SQLite in --data-dir",
		Long: `Run everything on this machine: the control plane (state in DATA_DIR/state.db), one host
agent (DATA_DIR/agent) and the API on --addr. It prints the base URL, an API key and a quickstart.

The first start of a data dir makes an admin key: PANDASTACK_API_KEY if set (so scripts can start
it non-interactively), otherwise a new key printed once. A restart keeps keys and sandboxes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.ControlPlane.Logger, cfg.ControlPlane.Version = log, version
			cfg.ControlPlane.PresetKey = os.Getenv("PANDASTACK_API_KEY")
			if cfg.ControlPlane.PresetKey == "" {
				cfg.ControlPlane.PresetKey = os.Getenv("PANDASTACK_TOKEN")
			}
			cfg.Bake = nil
			if bake != "" {
				cfg.Bake = strings.Split(bake, ",")
			}
			ctx, stop := signalContext()
			defer stop()
			// `down --kill-sandboxes` asks with SIGUSR2 (taken before the pid file tells anyone
			// where to send it): end every sandbox, then stop.
			killAll := make(chan os.Signal, 1)
			signal.Notify(killAll, syscall.SIGUSR2)
			defer signal.Stop(killAll)
			s, err := app.StartUp(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			go func() {
				select {
				case <-killAll:
					log.Info("pandastack down --kill-sandboxes: killing every sandbox, then stopping")
					n, err := s.CP.API.KillAll(ctx, "pandastack down --kill-sandboxes")
					if err != nil {
						log.Error("killing every sandbox failed; stopping anyway", "killed", n, "err", err)
					} else {
						log.Info("killed every sandbox", "killed", n)
					}
					stop()
				case <-ctx.Done():
				}
			}()
			rejected := ""
			if s.KeyRejected {
				rejected = s.KeyRecovery
			}
			printBanner(cmd.OutOrStdout(), s.URL, s.Key, s.KeyPreset, s.DataDir, rejected)
			if s.CP.E2BURL != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "E2B SDKs (docs/e2b.md):\n  export E2B_API_URL=%[1]s E2B_SANDBOX_URL=%[1]s E2B_API_KEY=$(%[2]s keys create --e2b)\n\n",
					s.CP.E2BURL, "pandastack")
			}
			return s.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", defaultDataDir(), "where state, templates and sandbox disks live (default $PANDASTACK_DATA_DIR)")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:8080", "listen address of the API")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&bake, "bake", "base,code-interpreter", "templates to bake in the background at start (comma-separated; empty: none)")
	f.StringVar(&cfg.Agent.Accel, "accel", "", "force the accelerator: kvm or tcg (default: probe)")
	f.StringVar(&cfg.Agent.GuestAgent, "guest-agent", "", "path of the pandastack-guest binary (default: next to this binary)")
	f.StringVar(&cfg.Agent.ImageCacheDir, "image-cache", image.CacheDir(), "directory of built guest images, the machine's one cache shared with the tests and benchmarks (default: $PANDASTACK_IMAGE_CACHE, else "+image.DefaultCacheDir+")")
	registerNetworkFlags(f, &cfg.Network)
	registerConfineFlags(f, &cfg.Agent)
	registerDiskFlags(f, &cfg.Agent)
	registerLimitFlags(f, &cfg.Agent)
	durationVar(f, &cfg.Agent.IdleHibernate, "idle-hibernate", 0,
		"hibernate sandboxes no call touched for this long, e.g. 5m (memory to disk, VM stopped; the next call wakes them); 0: never")
	registerControlPlaneFlags(f, &cfg.ControlPlane)
	rootCmd.AddCommand(cmd)
}

// consoleLine is the banner's console line: where it is, or that this binary has none.
func consoleLine(url string) string {
	if !web.Built() {
		return url + "/   (not built into this binary: make build)"
	}
	return url + "/   (sign in with the API key)"
}

// printBanner prints the base URL, the key and a quickstart. A preset key (from
// PANDASTACK_API_KEY) is never printed, only its display prefix: the operator has it, and the
// banner usually lands in a log. rejected, when the operator's key is not one of the data dir's,
// is the command that makes one.
func printBanner(w io.Writer, url, key string, preset bool, dataDir, rejected string) {
	self := "pandastack"
	if strings.Contains(os.Args[0], "/") {
		self = os.Args[0] // e.g. bin/pandastack: the quickstart then works from this directory
	}
	keyLine := key + "   (shown once: keep it)"
	export := "PANDASTACK_API_KEY=" + key
	switch {
	case rejected != "":
		keyLine = "PANDASTACK_API_KEY is NOT a key of this data dir: calls with it get 401.\n" +
			"             Use the key printed at its first start, or make one (as root): " + rejected
		export = "PANDASTACK_API_KEY=<your key>"
	case key == "":
		keyLine = "the one printed when this data dir was first started (" + self + " keys create makes more)"
		export = "PANDASTACK_API_KEY=<your key>"
	case preset:
		keyLine = auth.DisplayPrefix(key) + "…   (from PANDASTACK_API_KEY)"
		export = "  # PANDASTACK_API_KEY is set already"
	}
	fmt.Fprintf(w, `
PandaStack is up.
  base URL:  %s
  console:   %s
  API key:   %s
  data dir:  %s

Quickstart:
  export PANDASTACK_BASE_URL=%s %s
  id=$(%s sandbox create --template base -q)
  %s sandbox exec "$id" -- python -c 'print(2 ** 10)'

`, url, consoleLine(url), keyLine, dataDir, url, export, self, self)
}
