// Package bake makes templates ready to restore on one host: it knows the templates the host can
// serve (the catalog, the agent's configured ones, the ones built through the API), bakes one the
// first time a sandbox needs it (a cold boot and a snapshot: Templates.Ensure), and builds
// templates from specs in a build microVM (Templates.Build).
//
// A bake or build VM is a VM like a sandbox: it asks the sandbox manager for room through VMs,
// a narrow interface, and never touches sandboxes itself.
package bake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/faultpoint"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/disk"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/snapshot"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Template is a template as this host knows it: its wire view, and where a baked one's files
// are. template.json in Dir is the wire view.
type Template struct {
	hostapi.Template
	Dir string `json:"-"` // the baked artifacts: kernel, initrd, disk.img, ram, state
	// Published names the bake in the blob store (see publish.go), if it was published or pulled.
	Published string `json:"published,omitempty"`
}

// Spec is the machine to restore from the template with disk.
func (t *Template) Spec(disk string) runtime.Spec {
	return runtime.Spec{VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB, Kernel: filepath.Join(t.Dir, "vmlinuz"),
		Initrd: filepath.Join(t.Dir, "initrd"), Disk: disk, NIC: t.NIC}
}

// Snapshot names the template's memory snapshot files.
func (t *Template) Snapshot() runtime.Snapshot {
	return runtime.Snapshot{RAMFile: filepath.Join(t.Dir, "ram"), StateFile: filepath.Join(t.Dir, "state")}
}

// VMs is what bakes and builds need of the sandbox manager: room for their VM under the host's
// memory policy, and whether sandboxes use a template.
type VMs interface {
	// CheckSize refuses a VM larger than this host's limits.
	CheckSize(what string, vcpus, memMiB int) error
	// Reserve admits memMiB of guest memory for a VM that is not a sandbox, until release.
	Reserve(what string, memMiB int) (release func(), err error)
	// RelieveForCreate makes room for a new VM above the memory watermark, or refuses.
	RelieveForCreate(ctx context.Context, what string) error
	// UsersOf counts the sandboxes of template name on this host.
	UsersOf(name string) int
	// DropPrepared ends the VMM prepared for template name's next create, if any.
	DropPrepared(name string)
}

// Config is what Templates works with.
type Config struct {
	Layout  layout.Layout
	Runtime runtime.Runtime
	Images  *image.Builder
	// GuestAgent is the pandastack-guest binary baked into images ("": bakes fail, saying so).
	GuestAgent string
	// Templates adds to (or overrides) the built-in catalog.
	Templates map[string]template.Spec
	// Net, when set, gives bake VMs a NIC, so their sandboxes have one.
	Net       *network.Pool
	Disk      *disk.Admission
	Volumes   *volume.Store
	Snapshots *snapshot.Store
	// MaxMemoryMiB bounds a build VM's memory.
	MaxMemoryMiB int
	Log          *slog.Logger
	// LiveSnapshot keeps the bake's host connected while the state is saved (as bakes did before;
	// for comparisons): clones then wake inside that host's session.
	LiveSnapshot bool
}

// Templates is one host's templates: known, baked and built.
type Templates struct {
	cfg Config
	vms VMs

	mu        sync.Mutex
	states    map[string]*bakeState
	built     map[string]template.Spec // templates built through the API (persisted in templates/specs)
	buildMu   sync.Mutex               // one API build at a time: builds are CPU- and disk-heavy
	blob      blob.Store               // where bakes, snapshots and hibernations are published and pulled from; nil: none
	bakes     blob.Store               // where bakes only are published and pulled from; nil: blob
	agentHash string                   // sha256 of the guest agent binary, once computed
	// local indexes the chunks this host holds in published or pulled files (templates,
	// snapshots): a pull copies those instead of fetching them. Shared by the host's artifacts.
	local *artifact.Local
}

// New returns the templates of cfg, with those built through the API earlier; vms is the
// sandbox manager.
func New(cfg Config, vms VMs) *Templates {
	ts := &Templates{cfg: cfg, vms: vms, states: map[string]*bakeState{}, built: map[string]template.Spec{}, local: artifact.NewLocal()}
	ts.loadBuiltSpecs()
	dirs, _ := filepath.Glob(filepath.Join(cfg.Layout.Templates(), "*"))
	for _, d := range dirs {
		ts.local.AddDir(d)
	}
	return ts
}

// Local is the host's index of chunks it holds in artifact files (templates', snapshots').
func (ts *Templates) Local() *artifact.Local { return ts.local }

// Spec finds a template by name: the agent's config, the templates built through its API, then
// the catalog (by alias too).
func (ts *Templates) Spec(name string) (template.Spec, bool) {
	if s, ok := ts.cfg.Templates[name]; ok {
		return s, true
	}
	ts.mu.Lock()
	s, ok := ts.built[name]
	ts.mu.Unlock()
	if ok {
		return s, true
	}
	return template.CatalogSpec(name)
}

// Names lists the templates this host can bake (aliases not repeated).
func (ts *Templates) Names() []string {
	names := map[string]bool{}
	for _, n := range template.CatalogNames() {
		names[n] = true
	}
	for n := range ts.cfg.Templates {
		names[n] = true
	}
	ts.mu.Lock()
	for n := range ts.built {
		names[n] = true
	}
	ts.mu.Unlock()
	return slices.Sorted(maps.Keys(names))
}

// connect opens a VM's guest agent channel, bounded so a dead guest fails instead of hanging.
func connect(ctx context.Context, socket string, timeout time.Duration) (*guest.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return guest.Connect(ctx, socket)
}

// retryLost runs a bake's guest call again, once, when the guest session broke but the VM did
// not (ctx ends with the VMM): the client re-dials on the next call. A session lost right after a
// cold boot has been seen under load (see startService).
func retryLost(ctx context.Context, say func(string, ...any), what string, call func() error) error {
	err := call()
	if errors.Is(err, guest.ErrConnectionLost) && ctx.Err() == nil {
		say("guest connection lost during %s (%v); trying again", what, err)
		err = call()
	}
	return err
}

// dataVolumes describes recipe r's data volume as its template lists it (nil: none).
func dataVolumes(r template.Recipe) []hostapi.SnapshotVolume {
	if r.Volume == nil {
		return nil
	}
	return []hostapi.SnapshotVolume{{Slot: 0, MountPath: r.Volume.MountPath, SizeMiB: int64(r.Volume.SizeMiB), FS: "ext4", Ephemeral: r.Volume.Ephemeral}}
}

// warmUp runs in a template's guest before its snapshot (see bake).
const warmUp = "true; id >/dev/null; ls / >/dev/null; command -v python3 >/dev/null && python3 -c 'import os, sys, json, subprocess' || true"

// bakeState serialises bakes of one template: concurrent creates share one bake.
type bakeState struct {
	mu   sync.Mutex
	info *Template
}

// Templates lists every template this host can serve, baked or not.
func (ts *Templates) List() []hostapi.Template {
	var out []hostapi.Template
	for _, name := range ts.Names() {
		spec, _ := ts.Spec(name)
		info := hostapi.Template{Name: name, Description: spec.Description, Aliases: spec.Aliases, Metadata: spec.Metadata}
		if r, err := template.Resolve(spec, ts.Spec); err == nil {
			info.VCPUs, info.MemoryMiB, info.DiskMiB, info.Env = r.VCPUs, r.MemoryMiB, r.DiskMiB, r.Env
			info.Volumes = dataVolumes(r) // what a bake will have: a create needs it before
		}
		ts.mu.Lock()
		_, info.Built = ts.built[name]
		ts.mu.Unlock()
		ts.mu.Lock()
		st := ts.states[name]
		ts.mu.Unlock()
		if st != nil && st.mu.TryLock() {
			if st.info != nil {
				built := info.Built
				info = st.info.Template
				info.Built = built
			}
			st.mu.Unlock()
		}
		out = append(out, info)
	}
	return out
}

// EnsureTemplate returns the baked template, baking it first if this host has not yet (a cold
// boot and a snapshot, a few seconds; the guest image build the first time, a minute or two).
// progress (may be nil) receives human-readable lines as the work goes.
func (ts *Templates) Ensure(ctx context.Context, name string, progress func(string)) (*Template, error) {
	name = template.Canonical(name)
	spec, ok := ts.Spec(name)
	if !ok {
		return nil, errdefs.NotFoundf("template %q not found (known: %v)", name, ts.Names())
	}
	recipe, err := template.Resolve(spec, ts.Spec)
	if err != nil {
		return nil, errdefs.Invalidf("%v", err)
	}
	if err := ts.vms.CheckSize("template "+name, recipe.VCPUs, recipe.MemoryMiB); err != nil {
		return nil, err
	}
	ts.mu.Lock()
	st := ts.states[name]
	if st == nil {
		st = &bakeState{}
		ts.states[name] = st
	}
	ts.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.info != nil {
		return st.info, nil
	}
	say := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		ts.cfg.Log.Info(msg, "template", name)
		if progress != nil {
			progress(msg)
		}
	}
	info, err := ts.bake(ctx, recipe, say)
	if err != nil {
		return nil, err
	}
	info.Description, info.Aliases, info.Metadata = spec.Description, spec.Aliases, spec.Metadata
	st.info = info
	return info, nil
}

// ImageSpec is what the image builder makes on the host for a recipe: Debian's packages and the
// npm packages' files (their scripts run later, in the build VM).
func ImageSpec(r template.Recipe) image.RootfsSpec {
	return image.RootfsSpec{Suite: r.Suite, Packages: r.Apt, Npm: r.Npm, DiskMiB: r.DiskMiB}
}

// bake cold-boots the template's machine with its RAM in a file, waits for the guest agent, and
// saves the device state. The RAM file, the disk as the snapshot saw it, and the state stream are
// the template: every create maps the RAM file copy-on-write and reflinks the disk.
func (ts *Templates) bake(ctx context.Context, spec template.Recipe, say func(string, ...any)) (*Template, error) {
	if ts.cfg.GuestAgent == "" {
		return nil, fmt.Errorf("pandastack-guest binary not found next to this executable or on $PATH (`make build` writes bin/pandastack-guest)")
	}
	nic := ts.cfg.Net != nil
	// With a blob store, a bake another host published is pulled instead of made here.
	store, pub := ts.bakeStore(), "" // a template's data volume travels with it (publish.go)
	if store != nil {
		var err error
		if pub, err = ts.publication(spec, nic); err != nil {
			return nil, err
		}
		if t := ts.localPublished(spec.Name, pub); t != nil {
			return t, nil
		}
		t, err := ts.pull(ctx, store, pub, say)
		switch {
		case err == nil:
			return t, nil
		case errdefs.Is(err, errdefs.NotFound):
		default:
			say("pulling template %s failed (%v): baking it here", spec.Name, err)
		}
	}
	img, err := ts.cfg.Images.Build(ctx, ImageSpec(spec), func(line string) { say("image: %s", line) })
	if err != nil {
		return nil, buildFailed("%v", err)
	}
	volSrc := "" // the data volume as the build left it ("": made empty below)
	if spec.NeedsBuildVM() {
		if img, err = ts.runBuildVM(ctx, spec, img, say); err != nil {
			return nil, err
		}
		if spec.Volume != nil {
			volSrc = builtVolume(img.Rootfs)
		}
	}
	env, _ := json.Marshal(spec.Env)
	ident := ts.cfg.Runtime.Identity()
	// The VMM's identity is in the key: a new QEMU (or accelerator) bakes into a new directory and
	// never replaces the files sandboxes restored under the old one still map.
	// v7: the host leaves before the state is saved (LiveSnapshot: as in v6).
	version := "bake-v7"
	if ts.cfg.LiveSnapshot {
		version = "bake-v6"
	}
	key := layout.ShortHash(version, strconv.Itoa(volume.Slots), warmUp, strconv.FormatBool(nic), img.Hash, strconv.Itoa(spec.VCPUs), strconv.Itoa(spec.MemoryMiB),
		strconv.Itoa(spec.DiskMiB), ident.String(), spec.Start, spec.Ready, string(env))
	if spec.Volume != nil { // without one, the key is as before
		key = layout.ShortHash(key, "volume", strconv.Itoa(spec.Volume.SizeMiB), spec.Volume.MountPath)
	}
	dir := filepath.Join(ts.cfg.Layout.Templates(), spec.Name+"-"+key)
	if info, err := loadTemplate(dir); err == nil {
		switch {
		case info.Identity.IsZero():
			// Baked before identities were recorded, under this key: taken as this VMM's, once.
			info.Identity = ident
			if err := layout.WriteJSON(filepath.Join(dir, "template.json"), info); err != nil {
				return nil, err
			}
			return info, nil
		case info.Identity.CanRestore(ident):
			return info, nil
		}
		say("template %s was baked under %s, not this host's %s: re-baking", spec.Name, info.Identity, ident)
	}
	// The image's files are copied (sparse) when the cache cannot be reflinked into the pool, and
	// the RAM file is written.
	need := int64(spec.MemoryMiB) << 20
	for _, f := range []string{img.Rootfs, img.Kernel, img.Initrd} {
		if fi, err := os.Stat(f); err == nil {
			need += layout.Allocated(fi)
		}
	}
	if spec.Volume != nil {
		need += volume.MakeFSCost(int64(spec.Volume.SizeMiB) << 20)
	}
	releaseDisk, err := ts.cfg.Disk.Admit("baking template "+spec.Name, need)
	if err != nil {
		return nil, err
	}
	defer releaseDisk()
	// The bake VM is a VM like a sandbox: it counts against the commit limit while it runs.
	release, err := ts.vms.Reserve("the bake of template "+spec.Name, spec.MemoryMiB)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := ts.vms.RelieveForCreate(ctx, "template "+spec.Name); err != nil {
		return nil, err
	}
	say("baking template %s: cold boot (%d vCPU, %d MiB RAM, %s)", spec.Name, spec.VCPUs, spec.MemoryMiB, ts.cfg.Runtime.Accel())
	start := time.Now()
	tmp := dir + ".baking"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	for src, dst := range map[string]string{img.Rootfs: "disk.img", img.Kernel: "vmlinuz", img.Initrd: "initrd"} {
		if err := cloneOrCopy(src, filepath.Join(tmp, dst)); err != nil {
			return nil, err
		}
	}
	info := &Template{Template: hostapi.Template{Name: spec.Name, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB,
		NIC: nic, VolumeSlots: volume.Slots, Env: spec.Env, Identity: ident}, Dir: tmp}
	runDir := ts.cfg.Layout.RunDir("bake-" + spec.Name)
	mspec := info.Spec(filepath.Join(tmp, "disk.img"))
	if err := volume.MakePlaceholder(tmp); err != nil {
		return nil, err
	}
	bakeSlots := filepath.Join(tmp, "bake-slots")
	defer os.RemoveAll(bakeSlots)
	if err := os.MkdirAll(bakeSlots, 0o700); err != nil {
		return nil, err
	}
	if mspec.Drives, err = ts.cfg.Volumes.Drives(tmp, volume.Slots, nil, bakeSlots); err != nil {
		return nil, err
	}
	if spec.Volume != nil {
		// The data volume sits in slot 0 during the bake and stays in the template's directory:
		// the snapshot has it mounted, and every sandbox gets a copy of it there (hostapi.Template).
		vol := filepath.Join(tmp, volume.CopyFile(0))
		if volSrc != "" {
			err = cloneOrCopy(volSrc, vol)
		} else {
			err = volume.MakeFS(ctx, vol, int64(spec.Volume.SizeMiB))
		}
		if err != nil {
			return nil, fmt.Errorf("template %s: data volume: %w", spec.Name, err)
		}
		mspec.Drives[0].File = vol
		info.Volumes = dataVolumes(spec)
	}
	if nic {
		// The bake VM needs a tap like any other (the NIC is in the snapshot), but no egress.
		slot, err := ts.cfg.Net.Acquire(ctx, network.Policy{})
		if err != nil {
			return nil, fmt.Errorf("template %s: network slot: %w", spec.Name, err)
		}
		defer slot.Release() // after the deferred Kill below: a slot is released once its VMM is gone
		if mspec.Tap, err = slot.OpenTap(); err != nil {
			return nil, fmt.Errorf("template %s: %w", spec.Name, err)
		}
	}
	vm, err := ts.cfg.Runtime.Boot(ctx, runDir, mspec, filepath.Join(tmp, "ram"))
	if mspec.Tap != nil {
		mspec.Tap.Close()
	}
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(runDir)
	defer ts.cfg.Runtime.Kill(vm)
	exited := ts.cfg.Runtime.Watch(vm)
	bootCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel() // a VMM that dies during boot fails the bake now, not at the timeout
		case <-bootCtx.Done():
		}
	}()
	client, err := connect(bootCtx, vm.AgentSocket, 120*time.Second)
	if err != nil {
		return nil, fmt.Errorf("template %s: guest agent did not come up: %v (console: %s)", spec.Name, err, consoleTail(runDir))
	}
	say("guest agent ready after %d ms", time.Since(start).Milliseconds())
	faultpoint.Reach("agent.bake.booted") // the bake VM runs, nothing is saved yet
	if err := retryLost(bootCtx, say, "data volume mount", func() error {
		return mountDataVolume(bootCtx, client, spec, filepath.Join(tmp, volume.CopyFile(0)))
	}); err != nil {
		client.Close()
		return nil, fmt.Errorf("template %s: %w", spec.Name, err)
	}
	if spec.Start != "" {
		if err := startService(bootCtx, client, spec, say); err != nil {
			client.Close()
			return nil, err
		}
	}
	// Warm the guest's page cache with what nearly every sandbox runs first (the shell, Python,
	// the user switch): the snapshot then holds those pages, and every clone starts warm instead
	// of reading them through its own disk clone.
	for _, user := range []string{"root", "user"} {
		if err := retryLost(bootCtx, say, "warm-up", func() error {
			var sink bytes.Buffer
			_, err := client.Exec(bootCtx, guest.ExecRequest{Cmd: warmUp, User: user, Timeout: 60 * time.Second}, nil, &sink, &sink)
			return err
		}); err != nil {
			client.Close()
			return nil, fmt.Errorf("template %s: warm-up: %w", spec.Name, err)
		}
	}
	// Write the guest's dirty pages to its disk so the clones' disks hold what the snapshot saw.
	if err := retryLost(bootCtx, say, "sync", func() error { return client.Sync(bootCtx) }); err != nil {
		client.Close()
		return nil, fmt.Errorf("template %s: sync: %w", spec.Name, err)
	}
	if !ts.cfg.LiveSnapshot {
		// The host leaves before the state is saved, and the guest agent ends its session: a
		// clone wakes up polling for a host (the agent's fresh-poll window), reads the new host's
		// HELLO straight into its handshake scanner and answers, with no session of the bake's
		// host to tear down first. (Saved mid-session, the HELLO breaks that session, then gets
		// answered.)
		client.Close()
		waitConsole(bootCtx, runDir, "session ended", 10*time.Second)
	}
	t := time.Now()
	err = ts.cfg.Runtime.SaveSnapshot(bootCtx, vm, filepath.Join(tmp, "state"))
	client.Close()
	if err != nil {
		return nil, fmt.Errorf("template %s: snapshot: %w", spec.Name, err)
	}
	say("snapshot saved in %d ms", time.Since(t).Milliseconds())
	ts.cfg.Runtime.Kill(vm)
	os.RemoveAll(bakeSlots) // the bake VM's empty slot disks; clones get their own
	info.BakeMS = time.Since(start).Milliseconds()
	info.BakedAt = time.Now().UTC()
	info.Baked = true
	info.SizeBytes = layout.DirSize(tmp)
	info.Published = pub
	if err := layout.WriteJSON(filepath.Join(tmp, "template.json"), info); err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	info.Dir = dir
	say("baked template %s in %.1f s", spec.Name, float64(info.BakeMS)/1000)
	if store != nil {
		ts.publish(ctx, store, info, say)
	}
	return info, nil
}

func loadTemplate(dir string) (*Template, error) {
	data, err := os.ReadFile(filepath.Join(dir, "template.json"))
	if err != nil {
		return nil, err
	}
	var info Template
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, err
	}
	info.Dir = dir
	return &info, nil
}

func cloneOrCopy(src, dst string) error {
	if err := storage.Clone(src, dst); err == nil {
		return nil
	}
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %v: %s", filepath.Base(src), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitConsole waits (at most timeout) until the VM's console log shows text.
func waitConsole(ctx context.Context, runDir, text string, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && ctx.Err() == nil; {
		if data, _ := os.ReadFile(filepath.Join(runDir, "console.log")); bytes.Contains(data, []byte(text)) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func consoleTail(runDir string) string {
	data, _ := os.ReadFile(filepath.Join(runDir, "console.log"))
	if len(data) > 1500 {
		data = data[len(data)-1500:]
	}
	return string(data)
}
