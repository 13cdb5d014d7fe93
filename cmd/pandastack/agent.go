package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pandastack/pandastack/internal/app"
	"github.com/pandastack/pandastack/internal/hostagent"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() {
	var cfg app.AgentConfig
	var logLevel string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the host agent: owns the microVMs on this machine (HTTP API for the control plane)",
		Long: `Run the host agent. It bakes templates (cold boot + snapshot, once per template), restores
sandboxes from those snapshots, and serves exec and file calls for the control plane.
Its state lives in --data-dir: a restarted agent re-adopts the VMs that kept running.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Agent.Token == "" {
				cfg.Agent.Token = os.Getenv("PANDASTACK_AGENT_TOKEN")
			}
			if cfg.ServerToken == "" {
				cfg.ServerToken = os.Getenv("PANDASTACK_CLUSTER_TOKEN")
			}
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			cfg.Agent.Logger = log
			cfg.Version = version
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := app.RunAgent(ctx, cfg); err != nil {
				return err
			}
			fmt.Fprintln(os.Stderr, "host agent stopped; running sandboxes keep running and are re-adopted at the next start")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Agent.DataDir, "data-dir", "/var/lib/pandastack/agent", "where images, templates and sandbox disks live")
	f.StringVar(&cfg.Addr, "addr", "127.0.0.1:7070", "listen address of the agent API")
	f.StringVar(&cfg.Agent.Token, "token", "", "shared secret the control plane must send (default $PANDASTACK_AGENT_TOKEN)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error (debug: each restore's steps)")
	f.StringVar(&cfg.Agent.Accel, "accel", "", "force the accelerator: kvm or tcg (default: probe)")
	f.StringVar(&cfg.Agent.GuestAgent, "guest-agent", "", "path of the pandastack-guest binary (default: next to this binary)")
	f.StringVar(&cfg.ServerURL, "server", "", "control plane URL to register with and heartbeat to")
	f.StringVar(&cfg.ServerToken, "server-token", "", "cluster token for the control plane (default $PANDASTACK_CLUSTER_TOKEN)")
	f.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL the control plane uses to reach this agent (default http://ADDR)")
	durationVar(f, &cfg.Agent.IdleHibernate, "idle-hibernate", 0, "hibernate sandboxes idle this long (0: never)")
	f.StringVar(&cfg.Agent.ImageCacheDir, "image-cache", os.Getenv("PANDASTACK_IMAGE_CACHE"), "guest image cache dir (default: inside the data dir's pool)")
	registerNetworkFlags(f, &cfg.Network)
	registerConfineFlags(f, &cfg.Agent)
	registerDiskFlags(f, &cfg.Agent)
	registerLimitFlags(f, &cfg.Agent)
	f.BoolVar(&cfg.Agent.LazyRestore, "lazy-restore", false, "restore a snapshot this host pulls before its memory is here: served on demand over FUSE by a process of its own that outlives the agent (needs /dev/fuse; docs/multi-host.md)")
	f.StringVar(&cfg.Agent.BlobStore, "blob-store", "", "where this host publishes its bakes and pulls the ones it lacks: file:///DIR or s3://BUCKET/PREFIX?endpoint=URL&region=R (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; default: the server's, told at registration)")
	f.StringVar(&cfg.Agent.TemplateStore, "template-store", "", "where this host publishes its bakes and pulls the ones it lacks, in place of --blob-store (which then carries only snapshots and hibernated sandboxes): the same URL forms")
	rootCmd.AddCommand(cmd)
}

// registerDiskFlags adds the disk pool's size and admission flags (docs/volumes.md "Disk space")
// to agent and up.
func registerDiskFlags(f *pflag.FlagSet, cfg *hostagent.Config) {
	f.IntVar(&cfg.PoolGiB, "pool-gib", 64, "size of the sparse XFS pool made when the data dir cannot reflink (made smaller if its disk has less free)")
	f.Int64Var(&cfg.DiskReserveMiB, "disk-reserve-mib", 0,
		"MiB kept free on the disk pool and the disk under it: volume creates, snapshots, hibernations and bakes that would use it are refused, 507 no_space (0: a sixteenth of the pool, at most 4096)")
	f.Float64Var(&cfg.VolumeOvercommit, "volume-overcommit", 1,
		"a volume is promised 1/N of its size in real pool space (1: every volume fully backed; >1 lets sparse volumes add up to more than the pool)")
}

// registerConfineFlags adds the VMM confinement flags (docs/security.md) to agent and up.
func registerConfineFlags(f *pflag.FlagSet, cfg *hostagent.Config) {
	confine := f.Bool("confine", true, "run each VMM jailed, as its own uid, in its own cgroup (needs root)")
	f.IntVar(&cfg.JailUIDBase, "jail-uid-base", 100000, "first uid/gid of VMMs (gid and bake uid; sandboxes get the next ones)")
	f.IntVar(&cfg.JailUIDs, "jail-uids", 10000, "size of the VMM uid range")
	f.IntVar(&cfg.VMMOverheadMiB, "vmm-overhead-mib", 512, "memory a VMM may use beyond its guest RAM (cgroup limit)")
	f.IntVar(&cfg.PreparedTemplates, "prepared-templates", hostagent.DefaultPreparedTemplates, "templates (those created from last) that keep a VMM started, confined and waiting for their next create, which then only loads its state; as many sandboxes (those forked from last) keep one for their next fork's first child, and as many hibernated ones (those hibernated last) one for their wake (0: none; confined agents only; docs/architecture.md)")
	durationVar(f, &cfg.PreparedIdle, "prepared-idle", hostagent.DefaultPreparedIdle, "end a prepared VMM no create took for this long, freeing its memory; the template's next create spawns its VMM and prepares another (0: never)")
	f.IntVar(&cfg.VMMCPUWeight, "vmm-cpu-weight", 0, "CPU weight of all VMMs together against other processes, in busy processes (default: the host's CPUs; -1: one, the kernel's default); each VMM's CPU quota is unchanged")
	cobra.OnInitialize(func() { cfg.Unconfined = !*confine })
}

// registerLimitFlags adds the host resource policy flags (docs/security.md, "Host resources").
func registerLimitFlags(f *pflag.FlagSet, cfg *hostagent.Config) {
	f.IntVar(&cfg.MaxVCPUs, "max-vcpus", 0, "most vCPUs one VM (sandbox, bake, build) may have (default: the host's CPUs)")
	f.IntVar(&cfg.MaxMemoryMiB, "max-memory-mib", 0, "most memory one VM may have (default: half of --host-memory-mib)")
	f.IntVar(&cfg.HostMemoryMiB, "host-memory-mib", 0, "memory all VMs may use together, enforced on their cgroup when set (default: the host's MemTotal, not enforced)")
	f.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", hostagent.DefaultMemoryOvercommit,
		"guest memory of running VMs may add up to this × the host's memory (restored sandboxes share clean pages)")
	f.IntVar(&cfg.MemoryWatermarkMiB, "memory-watermark-mib", 0,
		"below this much available memory the idlest sandboxes are hibernated (default 1/16 of the host's memory, 256-2048; -1: never)")
}
