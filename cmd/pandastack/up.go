package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/hostagent"
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
	var o cpOptions
	var dataDir, addr, logLevel, bake string
	var agentCfg hostagent.Config
	var netf netFlags
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
			o.log = log
			if dataDir, err = filepath.Abs(dataDir); err != nil {
				return err
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			// Take the API port first: a clash should fail before anything slow starts.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			defer ln.Close()

			agentToken, err := auth.RandomString(32, "0123456789abcdefghijklmnopqrstuvwxyz")
			if err != nil {
				return err
			}
			agentCfg.DataDir = filepath.Join(dataDir, "agent")
			agentCfg.Token = agentToken
			agentCfg.Logger = log.With("part", "agent")
			if agentCfg.Network, err = netf.config(agentCfg.DataDir); err != nil {
				return err
			}
			hostagent.Version = version
			agent, err := hostagent.New(ctx, agentCfg)
			if err != nil {
				return fmt.Errorf("host agent: %w", err)
			}
			defer func() {
				if err := agent.Close(); err != nil {
					log.Warn("host agent: shutting down", "err", err)
				}
			}()
			aln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			agentURL := "http://" + aln.Addr().String()
			agentSrv := &http.Server{Handler: agent.Handler(), ReadHeaderTimeout: 10 * time.Second}
			go agentSrv.Serve(aln)
			defer agentSrv.Close()

			o.dbURL = filepath.Join(dataDir, "state.db")
			o.agents = []string{agentURL + "=" + agentToken}
			o.presetKey = os.Getenv("PANDASTACK_API_KEY")
			if o.presetKey == "" {
				o.presetKey = os.Getenv("PANDASTACK_TOKEN")
			}
			cp, key, err := startControlPlane(ctx, o)
			if err != nil {
				return err
			}
			defer cp.close()

			// A key the operator supplied is theirs already: the banner (often a log) names it by
			// its prefix only. A key made here is printed in full, once.
			shown, preset := key, false
			switch {
			case key != "" && key == o.presetKey:
				preset = true
			case key == "" && o.presetKey != "":
				if _, err := (&auth.Authenticator{Store: cp.st}).Authenticate(ctx, o.presetKey); err == nil {
					shown, preset = o.presetKey, true
				}
			}
			printBanner(cmd.OutOrStdout(), baseURL(ln.Addr().String()), shown, preset, dataDir)

			if bake != "" {
				go prebake(ctx, cp, agentURL, agentToken, strings.Split(bake, ","))
			}
			err = cp.serve(ctx, ln)
			log.Info("shutting down; running sandboxes keep running and are re-adopted at the next start")
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "where state, templates and sandbox disks live (default $PANDASTACK_DATA_DIR)")
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address of the API")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&bake, "bake", "base,code-interpreter", "templates to bake in the background at start (comma-separated; empty: none)")
	f.StringVar(&agentCfg.Accel, "accel", "", "force the accelerator: kvm or tcg (default: probe)")
	f.StringVar(&agentCfg.GuestAgent, "guest-agent", "", "path of the pandastack-guest binary (default: next to this binary)")
	f.StringVar(&agentCfg.ImageCacheDir, "image-cache", os.Getenv("PANDASTACK_IMAGE_CACHE"), "directory of built guest images, shareable between data dirs (default: $PANDASTACK_IMAGE_CACHE, else inside the data dir)")
	netf.register(f)
	registerConfineFlags(f, &agentCfg)
	registerDiskFlags(f, &agentCfg)
	registerLimitFlags(f, &agentCfg)
	f.DurationVar(&agentCfg.IdleHibernate, "idle-hibernate", 0,
		"hibernate sandboxes no call touched for this long, e.g. 5m (memory to disk, VM stopped; the next call wakes them); 0: never")
	o.flags(cmd)
	rootCmd.AddCommand(cmd)
}

// baseURL turns a listen address into the URL a local client uses.
func baseURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// printBanner prints the base URL, the key and a quickstart. A preset key (from
// PANDASTACK_API_KEY) is never printed, only its display prefix: the operator has it, and the
// banner usually lands in a log.
func printBanner(w io.Writer, url, key string, preset bool, dataDir string) {
	self := "pandastack"
	if strings.Contains(os.Args[0], "/") {
		self = os.Args[0] // e.g. bin/pandastack: the quickstart then works from this directory
	}
	keyLine := key + "   (shown once: keep it)"
	export := "PANDASTACK_API_KEY=" + key
	switch {
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
  API key:   %s
  data dir:  %s

Quickstart:
  export PANDASTACK_BASE_URL=%s %s
  id=$(%s sandbox create --template base -q)
  %s sandbox exec "$id" -- python -c 'print(2 ** 10)'

`, url, keyLine, dataDir, url, export, self, self)
}

// prebake asks the local agent to bake templates now, so the first create restores a snapshot
// instead of waiting for a cold boot; then it refreshes the scheduler's view of the host.
func prebake(ctx context.Context, cp *controlPlane, agentURL, token string, names []string) {
	c := agentclient.New(agentURL, token)
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		start := time.Now()
		resp, err := c.Raw(ctx, "POST", "/v1/templates/"+name+"/bake", nil, nil, -1, nil)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && strings.Contains(string(b), `"error"`) {
				err = errors.New(strings.TrimSpace(lastLine(string(b))))
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				cp.log.Warn("pre-baking a template failed; its first create will try again", "template", name, "err", err)
			}
			continue
		}
		cp.log.Info("template ready", "template", name, "took", time.Since(start).Round(time.Millisecond))
	}
	cp.sched.PollStatic(ctx)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
