// Package hostagent is PandaStack's host agent: it owns the microVMs on one machine. This package
// is its HTTP facade (http.go, exec.go, files.go, proxy.go: decode, call, encode; errors leave as
// internal/errdefs kinds) and the wiring of the host packages (agent.go: New, Close):
//
//   - internal/host/sandbox   the sandbox manager: create (restore), fork, snapshot, hibernate,
//     wake, adopt, kill, exec and file calls, the memory policy
//   - internal/host/bake      templates: known, baked once per host, built in a build VM
//   - internal/host/volume    volume files and their mounts
//   - internal/host/snapshot  snapshot records: publish, list, delete, free
//   - internal/host/disk      disk-pool admission; internal/host/layout  where the files are
//
// The wire types are internal/wire/hostapi's (docs/hostagent-api.md). State lives in files under
// the data dir, so a restarted agent re-adopts the VMs that kept running.
package hostagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/cgroup"
	"github.com/pandastack/pandastack/internal/defaults"
	"github.com/pandastack/pandastack/internal/host/bake"
	"github.com/pandastack/pandastack/internal/host/disk"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/sandbox"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/runtime/qemu"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/template"
)

// Config configures a host agent.
type Config struct {
	DataDir string
	// Token is the shared secret the control plane sends as a bearer token; empty disables auth
	// (only for an agent embedded in `pandastack up`, which is not reachable from outside).
	Token  string
	Logger *slog.Logger
	// GuestAgent is the static pandastack-guest binary baked into images; default: next to this
	// executable, then $PATH.
	GuestAgent string
	// Templates adds to (or overrides) the built-in catalog.
	Templates map[string]template.Spec
	// ImageCacheDir holds built guest images (default: inside the pool). Tests share one across
	// data dirs so the debootstrap runs once.
	ImageCacheDir string
	// PoolGiB sizes the loop-mounted XFS pool when the data dir cannot reflink (default 64,
	// sparse; made smaller when its disk has less free, docs/volumes.md "Disk space").
	PoolGiB int
	// DiskReserveMiB is kept free on the pool's filesystem and on the disk under a loop pool:
	// volume creates and resizes, snapshots, hibernations and bakes that would eat into it are
	// refused with 507 no_space (0: a sixteenth of the pool, at most disk.DefaultReserveMiB).
	DiskReserveMiB int64
	// VolumeOvercommit: a volume is promised 1/VolumeOvercommit of its size in real pool space
	// (default 1: every volume's whole size is backed; must be >= 1).
	VolumeOvercommit float64
	// BlobStore is where this host publishes its bakes and pulls bakes it lacks (a blob URL, see
	// internal/blob). Empty: the control plane's, learned at registration (SetBlobStore), if any.
	BlobStore string
	// TemplateStore, if set, is where this host publishes its bakes and pulls bakes it lacks in
	// place of BlobStore, which then carries only snapshots and hibernations (a blob URL).
	TemplateStore string
	// LazyRestore: a snapshot this host pulls is restored before its memory is here, served
	// on demand by a process of its own (snapshot.Lazy; needs /dev/fuse).
	LazyRestore bool
	// Accel forces "tcg" or "kvm"; empty probes.
	Accel string
	// CPUModel is the VMs' QEMU CPU model (default qemu.DefaultCPU; for comparisons).
	CPUModel string
	// ReliableTSC boots guests with tsc=reliable (qemu.Driver.WithReliableTSC; for comparisons).
	ReliableTSC bool
	// ColdSnapshots makes snapshots (forks, hibernation) copy only what the guest wrote
	// (qemu.Driver.WithColdSnapshots; for comparisons).
	ColdSnapshots bool
	// LiveBakeSnapshot keeps a bake's host connected while its state is saved (bake.Config's
	// LiveSnapshot; for comparisons).
	LiveBakeSnapshot bool
	// ExecOutputLimit caps each stream of a buffered exec (default 16 MiB).
	ExecOutputLimit int64
	// MaxUpload caps one file upload (default 4 GiB).
	MaxUpload int64
	// FullSnapshots streams all guest RAM for snapshots instead of the diff against the
	// sandbox's base (the fallback path; for comparisons).
	FullSnapshots bool
	// IdleHibernate hibernates a running sandbox no call has touched for this long (0: never).
	IdleHibernate time.Duration
	// Unconfined runs VMMs without their jail, own uid and cgroup limits. Confinement is on
	// by default, and needs root (an agent not running as root runs VMMs unconfined).
	Unconfined bool
	// JailUIDBase: every VMM runs with gid JailUIDBase, template bakes with uid JailUIDBase and
	// each sandbox with its own uid JailUIDBase+1 … JailUIDBase+JailUIDs-1 (default 100000, 10000).
	JailUIDBase, JailUIDs int
	// PreparedTemplates is how many templates, those created from last, keep a VMM prepared for
	// their next create: started confined with -incoming defer, holding no guest memory (0:
	// none; the agent and up commands default to DefaultPreparedTemplates). As many sandboxes,
	// those forked from last, keep one for their next fork's first child, and as many hibernated
	// ones, those hibernated last, one for their wake. An unconfined agent prepares none.
	PreparedTemplates int
	// PreparedIdle ends a prepared VMM no create took for this long, freeing its memory; the
	// template's next create spawns its VMM and prepares another (0: never; the agent and up
	// commands default to DefaultPreparedIdle).
	PreparedIdle time.Duration
	// VMMOverheadMiB is what a VMM may use beyond its guest's RAM before its cgroup's OOM
	// killer ends it (QEMU, TCG's code cache, the page default 512).
	VMMOverheadMiB int
	// VMMCPUWeight is the CPU weight of the VMMs' parent cgroup, in busy processes: under
	// contention all VMMs together get as much CPU as this many processes outside it (default:
	// the host's CPU count; -1: the kernel's default, one process). Each VMM's own CPU quota is
	// unchanged (cgroup.Manager.SetCPUWeight).
	VMMCPUWeight int
	// Network, when set, gives every sandbox a NIC in its own network namespace (a slot of this
	// pool) with its egress policy; templates are then baked with a NIC. Nil: no networking.
	Network *network.Config
	// MaxVCPUs and MaxMemoryMiB bound one VM: a sandbox, a template's bake VM or a build VM
	// (default: the host's CPUs and half of HostMemoryMiB).
	MaxVCPUs, MaxMemoryMiB int
	// HostMemoryMiB is the memory this agent's VMs may use in all (default: the host's MemTotal).
	// With confinement on it is enforced: it becomes the memory limit of the VMMs' parent cgroup.
	HostMemoryMiB int
	// MemoryOvercommit: the guest memory of running VMs may add up to this × HostMemoryMiB
	// (default DefaultMemoryOvercommit).
	MemoryOvercommit float64
	// MemoryWatermarkMiB: below this much memory available to VMs, the idlest sandboxes are
	// hibernated (default 1/16 of HostMemoryMiB, 256-2048; negative: never).
	MemoryWatermarkMiB int
	// PressureInterval is how often available memory is checked (default 1 s).
	PressureInterval time.Duration
}

// Agent is a running host agent: the HTTP facade (http.go) over the host's packages, wired here.
type Agent struct {
	cfg     Config
	blobMu  sync.Mutex
	blobURL string // the blob store in use ("": none yet)
	log     *slog.Logger
	rt      runtime.Runtime
	pool    *storage.Pool
	images  *image.Builder
	layout  layout.Layout
	hostID  string
	net     *network.Pool // nil: networking off
	// confined: VMMs run jailed, with their own uids, in cg (the VMMs' parent cgroup).
	confined bool
	cg       *cgroup.Manager
	// hostMemorySet: the operator gave HostMemoryMiB (it is then enforced on the VMMs' cgroup).
	hostMemorySet bool

	sandboxes *sandbox.Manager
	reach     reacher // the sandbox manager, for the port proxy
	templates *bake.Templates
	volumes   *volume.Store
	snapshots *snapshot.Store
	disk      *disk.Admission
	stop      context.CancelFunc // ends background loops
}

// New opens the data dir, probes the accelerator, and re-adopts the sandboxes a previous agent
// process left running.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("a data dir is required")
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = abs
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	defaults.Positive(&cfg.ExecOutputLimit, 16<<20)
	defaults.Positive(&cfg.MaxUpload, 4<<30)
	if cfg.GuestAgent == "" {
		cfg.GuestAgent = findGuestAgent()
	}
	if cfg.VolumeOvercommit == 0 {
		cfg.VolumeOvercommit = 1
	}
	if cfg.VolumeOvercommit < 1 {
		return nil, fmt.Errorf("volume overcommit must be at least 1 (1: no overcommit), got %g", cfg.VolumeOvercommit)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	fitReserve := cfg.DiskReserveMiB
	if fitReserve <= 0 {
		// The reserve the pool will get (below), from the size asked for: a small pool on a
		// crowded disk is not refused for a reserve sized for a large one.
		poolGiB := cmp.Or(max(cfg.PoolGiB, 0), storage.DefaultPoolGiB)
		fitReserve = disk.DefaultReserveFor(int64(poolGiB) << 10)
	}
	pool, err := storage.Open(cfg.DataDir, cfg.PoolGiB, fitReserve<<20)
	if err != nil {
		return nil, fmt.Errorf("disk pool: %w", err)
	}
	if cfg.DiskReserveMiB <= 0 { // from the pool as made (a loop pool may be fitted smaller)
		sp, err := pool.Space()
		if err != nil {
			return nil, fmt.Errorf("disk pool: %w", err)
		}
		cfg.DiskReserveMiB = disk.DefaultReserveFor(sp.Total >> 20)
	}
	for _, w := range pool.Warnings {
		cfg.Logger.Warn(w)
	}
	cfg.ImageCacheDir = cmp.Or(cfg.ImageCacheDir, filepath.Join(pool.Dir, "images"))
	a := &Agent{cfg: cfg, log: cfg.Logger, pool: pool, hostID: hostID(cfg.DataDir),
		layout: layout.Layout{DataDir: cfg.DataDir, Pool: pool.Dir}}
	a.disk = disk.New(pool, cfg.DiskReserveMiB)
	a.volumes = volume.New(a.layout, a.disk, cfg.VolumeOvercommit)
	a.disk.Promised = a.volumes.Promised
	a.setLimitDefaults()
	a.images = &image.Builder{
		CacheDir:   cfg.ImageCacheDir,
		GuestAgent: cfg.GuestAgent,
		Log:        func(f string, args ...any) { a.log.Info(fmt.Sprintf(f, args...)) },
	}
	accel := cfg.Accel
	if accel == "" {
		accel = a.probeAccel(ctx)
	}
	drv, err := qemu.New(accel)
	if err != nil {
		return nil, err
	}
	if cfg.CPUModel != "" {
		drv.UseCPU(cfg.CPUModel)
	}
	if cfg.ReliableTSC {
		drv.WithReliableTSC()
	}
	if cfg.ColdSnapshots {
		drv.WithColdSnapshots()
	}
	a.rt = drv
	a.snapshots = snapshot.New(a.layout, drv.Identity())
	if !cfg.Unconfined && os.Geteuid() == 0 {
		if err := a.confine(drv); err != nil {
			return nil, fmt.Errorf("VMM confinement: %w (run unconfined to go without)", err)
		}
	} else {
		a.log.Warn("VMMs run unconfined: no jail, no per-sandbox uid, no cgroup limits")
	}
	for _, dir := range []string{a.sandboxesDir(), a.templatesDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if cfg.Network != nil {
		if err := a.openNetwork(*cfg.Network); err != nil {
			return nil, fmt.Errorf("networking: %w (run with networking off to go without)", err)
		}
	}
	sbCfg := sandbox.Config{Limits: a.limits(), Layout: a.layout, Runtime: a.rt, Net: a.net, Disk: a.disk,
		Volumes: a.volumes, Snapshots: a.snapshots, Log: a.log, FullSnapshots: cfg.FullSnapshots}
	if a.confined {
		sbCfg.Cgroup, sbCfg.JailUIDBase, sbCfg.JailUIDs = a.cg, a.cfg.JailUIDBase, a.cfg.JailUIDs
		// Only confined: a jailed VMM sees its files where its jail bound them, so the create
		// that takes a prepared VMM may move them to the sandbox's directory. An unconfined one
		// sees the host's paths, and QEMU opens its disk again by name when the guest starts.
		sbCfg.PreparedTemplates, sbCfg.PreparedIdle = cfg.PreparedTemplates, cfg.PreparedIdle
	}
	a.sandboxes = sandbox.New(sbCfg) // re-adopts what an earlier agent left running
	a.templates = bake.New(bake.Config{Layout: a.layout, Runtime: a.rt, Images: a.images, GuestAgent: cfg.GuestAgent,
		Templates: cfg.Templates, Net: a.net, Disk: a.disk, Volumes: a.volumes, Snapshots: a.snapshots,
		MaxMemoryMiB: a.cfg.MaxMemoryMiB, Log: a.log, LiveSnapshot: cfg.LiveBakeSnapshot}, a.sandboxes)
	a.sandboxes.Templates, a.reach = a.templates, a.sandboxes
	a.snapshots.UseLocal(a.templates.Local())
	if cfg.TemplateStore != "" {
		s, err := blob.Open(ctx, cfg.TemplateStore)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("--template-store: %w", err)
		}
		a.templates.SetBakeStore(s)
		a.log.Info("template store: bakes are published to it and pulled from it", "url", s.String())
	}
	if cfg.BlobStore != "" {
		if err := a.SetBlobStore(ctx, cfg.BlobStore); err != nil {
			a.Close()
			return nil, fmt.Errorf("--blob-store: %w", err)
		}
	}
	a.volumes.Attached, a.snapshots.InUse = a.sandboxes.Attachments, a.sandboxes.BaseDirs
	a.reclaim() // what an agent killed mid-operation left (not its running sandboxes: adopted)
	var bg context.Context
	bg, a.stop = context.WithCancel(context.Background())
	a.sandboxes.Start(bg, cfg.IdleHibernate)
	a.log.Info("resource limits", "max_vcpus", a.cfg.MaxVCPUs, "max_memory_mib", a.cfg.MaxMemoryMiB, "host_memory_mib", a.cfg.HostMemoryMiB,
		"memory_overcommit", a.cfg.MemoryOvercommit, "commit_limit_mib", a.sandboxes.CommitLimitMiB(), "watermark_mib", a.cfg.MemoryWatermarkMiB)
	return a, nil
}

// openNetwork starts the slot pool. Namespaces of sandboxes recorded as running are kept for
// adoption; every other leftover of an earlier agent is reclaimed.
func (a *Agent) openNetwork(cfg network.Config) error {
	keep := sandbox.RunningNetns(a.layout)
	cfg.Keep = func(ns string) bool { return keep[ns] }
	cfg.Logger = cmp.Or(cfg.Logger, a.log)
	p, err := network.Open(cfg)
	if err != nil {
		return err
	}
	a.net = p
	return nil
}

// probeAccel decides between KVM and TCG once per host boot and guest kernel, and remembers it in
// the image cache (shared by every agent that uses it, each in its own data dir): a KVM that
// hangs a guest costs seconds of a busy core to find out, so it is found out once, with the
// other agents waiting for that answer rather than probing beside it.
func (a *Agent) probeAccel(ctx context.Context) string {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		a.log.Info("using TCG (software CPU): no /dev/kvm on this host")
		return "tcg"
	}
	base, _ := template.CatalogSpec("base")
	recipe, _ := template.Resolve(base, template.CatalogSpec)
	img, err := a.images.Build(ctx, bake.ImageSpec(recipe), nil)
	if err != nil {
		a.log.Warn("using TCG: cannot build the guest image for the KVM probe", "err", err)
		return "tcg"
	}
	hostKernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id") // a module or its options may change at a reboot
	cache := filepath.Join(a.cfg.ImageCacheDir, "accel-"+layout.ShortHash(string(hostKernel), string(boot), img.KernelVersion))
	if b, err := os.ReadFile(cache); err == nil {
		return strings.TrimSpace(string(b))
	}
	if unlock, err := image.LockEntry(ctx, cache); err == nil {
		defer unlock()
		if b, err := os.ReadFile(cache); err == nil { // another agent probed while this one waited
			return strings.TrimSpace(string(b))
		}
	}
	accel, reason := qemu.ProbeAccel(ctx, img.Kernel, img.Initrd, filepath.Join(a.cfg.DataDir, "run"), 20*time.Second)
	a.log.Info("accelerator chosen", "accel", accel, "reason", reason)
	if ctx.Err() == nil {
		// Whole or absent: other agents read it without the lock.
		if os.WriteFile(cache+".tmp", []byte(accel), 0o644) == nil {
			os.Rename(cache+".tmp", cache)
		}
	}
	return accel
}

// Close stops serving; running VMs are left running (a new agent re-adopts them).
func (a *Agent) Close() error {
	a.stop()
	running := a.sandboxes.Close()
	var errs []error
	if a.net != nil {
		// Slots of running sandboxes stay: a new agent adopts them with their VMMs.
		errs = append(errs, a.net.Close())
	}
	if !running {
		// No VMM holds the pool or a cgroup: leave the host as we found it (a successor mounts the
		// pool again; hibernated sandboxes and templates are files in it). With VMMs running, both
		// stay for the agent that adopts them.
		if a.cg != nil {
			errs = append(errs, a.cg.Close())
		}
		errs = append(errs, a.pool.Close())
	}
	return errors.Join(errs...)
}

// setLimitDefaults fills the resource limits the operator left unset from the host.
func (a *Agent) setLimitDefaults() {
	c := &a.cfg
	a.hostMemorySet = c.HostMemoryMiB > 0
	l := a.limits().WithDefaults()
	c.MaxVCPUs, c.MaxMemoryMiB, c.HostMemoryMiB = l.MaxVCPUs, l.MaxMemoryMiB, l.HostMemoryMiB
	c.MemoryOvercommit, c.MemoryWatermarkMiB, c.PressureInterval = l.MemoryOvercommit, l.MemoryWatermarkMiB, l.PressureInterval
}

// limits is the configured policy.
func (a *Agent) limits() sandbox.Limits {
	c := a.cfg
	return sandbox.Limits{MaxVCPUs: c.MaxVCPUs, MaxMemoryMiB: c.MaxMemoryMiB, HostMemoryMiB: c.HostMemoryMiB,
		MemoryOvercommit: c.MemoryOvercommit, MemoryWatermarkMiB: c.MemoryWatermarkMiB, PressureInterval: c.PressureInterval}
}

// DefaultPreparedTemplates is the agent and up commands' --prepared-templates.
const DefaultPreparedTemplates = 4

// DefaultPreparedIdle is the agent and up commands' --prepared-idle.
const DefaultPreparedIdle = 10 * time.Minute

// WaitPrepared waits until template has its VMM prepared, if one is being prepared (the bench
// keeps a preparation out of the next measurement).
func (a *Agent) WaitPrepared(ctx context.Context, template string) error {
	return a.sandboxes.WaitPrepared(ctx, template)
}

// WaitForkPrepared waits until parent's next fork has a prepared VMM or none is being prepared.
func (a *Agent) WaitForkPrepared(ctx context.Context, parent string) error {
	return a.sandboxes.WaitForkPrepared(ctx, parent)
}

// WaitWakePrepared waits until hibernated sandbox id's next wake has a prepared VMM or none is
// being prepared.
func (a *Agent) WaitWakePrepared(ctx context.Context, id string) error {
	return a.sandboxes.WaitWakePrepared(ctx, id)
}

// PreparedVMMs are the VMMs prepared for the next creates (name → pid), waiting or taken by a
// create in flight.
func (a *Agent) PreparedVMMs() map[string]int { return a.sandboxes.PreparedVMMs() }

// PreparedCounts are how many VMMs were prepared and how many creates took one.
func (a *Agent) PreparedCounts() (made, used int64) { return a.sandboxes.PreparedCounts() }

// PreparedExpired is how many prepared VMMs were ended for waiting longer than PreparedIdle.
func (a *Agent) PreparedExpired() int64 { return a.sandboxes.PreparedExpired() }

// DefaultMemoryOvercommit is the commit limit's ratio when none is configured.
const DefaultMemoryOvercommit = sandbox.DefaultMemoryOvercommit

func (a *Agent) sandboxesDir() string    { return a.layout.Sandboxes() }
func (a *Agent) templatesDir() string    { return a.layout.Templates() }
func (a *Agent) snapshotsDir() string    { return a.layout.Snapshots() }
func (a *Agent) runDir(id string) string { return a.layout.RunDir(id) }

func hostID(dataDir string) string {
	name, _ := os.Hostname()
	return name + "-" + layout.ShortHash(dataDir)[:6]
}

// findGuestAgent looks for pandastack-guest next to the running binary, then on $PATH.
func findGuestAgent() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pandastack-guest")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("pandastack-guest"); err == nil {
		return p
	}
	return ""
}

// artifactDirs are this host's directories of published or pulled artifacts (templates and
// snapshots), whose chunks a lazy server clones instead of fetching.
func (a *Agent) artifactDirs() []string {
	var dirs []string
	for _, pattern := range []string{filepath.Join(a.layout.Templates(), "*"), filepath.Join(a.layout.Snapshots(), "snap_*")} {
		found, _ := filepath.Glob(filepath.Join(pattern, artifact.ManifestFile))
		for _, f := range found {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	return dirs
}

// SetBlobStore opens the blob store at url and makes it where this host's bakes are published
// and pulled from. An agent started with its own BlobStore keeps it: the control plane's, told at
// registration, is for agents that were given none.
func (a *Agent) SetBlobStore(ctx context.Context, url string) error {
	a.blobMu.Lock()
	defer a.blobMu.Unlock()
	if url == "" || a.blobURL != "" {
		return nil
	}
	s, err := blob.Open(ctx, url)
	if err != nil {
		return err
	}
	a.blobURL = url
	a.templates.SetBlob(s)
	if a.cfg.LazyRestore {
		a.snapshots.Lazy = &snapshot.Lazy{StoreURL: url, CacheDir: filepath.Join(a.layout.Pool, "lazy-cache"),
			MountDir: filepath.Join(a.layout.DataDir, "lazy"), LogDir: filepath.Join(a.layout.DataDir, "lazy-logs"),
			IndexDirs: a.artifactDirs}
	}
	a.log.Info("blob store: bakes (unless a template store is set), snapshots and hibernations are published to it and pulled from it", "url", s.String())
	return nil
}
