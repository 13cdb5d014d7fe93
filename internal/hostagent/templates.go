package hostagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/network"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/template"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// TemplateInfo is a template as this host knows it: its wire view, and where a baked one's files
// are. template.json in Dir is the wire view.
type TemplateInfo struct {
	hostapi.Template
	Dir string `json:"-"` // the baked artifacts: kernel, initrd, disk.img, ram, state
}

func (t *TemplateInfo) spec(disk string) runtime.Spec {
	return runtime.Spec{VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB, Kernel: filepath.Join(t.Dir, "vmlinuz"),
		Initrd: filepath.Join(t.Dir, "initrd"), Disk: disk, NIC: t.NIC}
}

func (t *TemplateInfo) snapshot() runtime.Snapshot {
	return runtime.Snapshot{RAMFile: filepath.Join(t.Dir, "ram"), StateFile: filepath.Join(t.Dir, "state")}
}

// warmUp runs in a template's guest before its snapshot (see bake).
const warmUp = "true; id >/dev/null; ls / >/dev/null; command -v python3 >/dev/null && python3 -c 'import os, sys, json, subprocess' || true"

// bakeState serialises bakes of one template: concurrent creates share one bake.
type bakeState struct {
	mu   sync.Mutex
	info *TemplateInfo
}

// Templates lists every template this host can serve, baked or not.
func (a *Agent) Templates() []hostapi.Template {
	var out []hostapi.Template
	for _, name := range a.TemplateNames() {
		spec, _ := a.templateSpec(name)
		info := hostapi.Template{Name: name, Description: spec.Description, Aliases: spec.Aliases, Metadata: spec.Metadata}
		if r, err := template.Resolve(spec, a.templateSpec); err == nil {
			info.VCPUs, info.MemoryMiB, info.DiskMiB, info.Env = r.VCPUs, r.MemoryMiB, r.DiskMiB, r.Env
		}
		a.mu.Lock()
		_, info.Built = a.built[name]
		a.mu.Unlock()
		a.mu.Lock()
		st := a.templates[name]
		a.mu.Unlock()
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
func (a *Agent) EnsureTemplate(ctx context.Context, name string, progress func(string)) (*TemplateInfo, error) {
	name = template.Canonical(name)
	spec, ok := a.templateSpec(name)
	if !ok {
		return nil, errdefs.NotFoundf("template %q not found (known: %v)", name, a.TemplateNames())
	}
	recipe, err := template.Resolve(spec, a.templateSpec)
	if err != nil {
		return nil, errdefs.Invalidf("%v", err)
	}
	if err := a.checkSize("template "+name, recipe.VCPUs, recipe.MemoryMiB); err != nil {
		return nil, err
	}
	a.mu.Lock()
	st := a.templates[name]
	if st == nil {
		st = &bakeState{}
		a.templates[name] = st
	}
	a.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.info != nil {
		return st.info, nil
	}
	say := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		a.log.Info(msg, "template", name)
		if progress != nil {
			progress(msg)
		}
	}
	info, err := a.bake(ctx, recipe, say)
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
func (a *Agent) bake(ctx context.Context, spec template.Recipe, say func(string, ...any)) (*TemplateInfo, error) {
	if a.cfg.GuestAgent == "" {
		return nil, fmt.Errorf("pandastack-guest binary not found next to this executable or on $PATH (`make build` writes bin/pandastack-guest)")
	}
	img, err := a.images.Build(ctx, ImageSpec(spec), func(line string) { say("image: %s", line) })
	if err != nil {
		return nil, buildFailed("%v", err)
	}
	if spec.NeedsBuildVM() {
		if img, err = a.runBuildVM(ctx, spec, img, say); err != nil {
			return nil, err
		}
	}
	nic := a.net != nil
	env, _ := json.Marshal(spec.Env)
	ident := a.rt.Identity()
	// The VMM's identity is in the key: a new QEMU (or accelerator) bakes into a new directory and
	// never replaces the files sandboxes restored under the old one still map.
	key := shortHash("bake-v6", strconv.Itoa(volume.Slots), warmUp, strconv.FormatBool(nic), img.Hash, strconv.Itoa(spec.VCPUs), strconv.Itoa(spec.MemoryMiB),
		strconv.Itoa(spec.DiskMiB), ident.String(), spec.Start, spec.Ready, string(env))
	dir := filepath.Join(a.templatesDir(), spec.Name+"-"+key)
	if info, err := loadTemplate(dir); err == nil {
		switch {
		case info.Identity.IsZero():
			// Baked before identities were recorded, under this key: taken as this VMM's, once.
			info.Identity = ident
			if err := writeJSONFile(filepath.Join(dir, "template.json"), info); err != nil {
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
	releaseDisk, err := a.disk.Admit("baking template "+spec.Name, need)
	if err != nil {
		return nil, err
	}
	defer releaseDisk()
	// The bake VM is a VM like a sandbox: it counts against the commit limit while it runs.
	release, err := a.reserve("the bake of template "+spec.Name, spec.MemoryMiB)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := a.relieveForCreate(ctx, "template "+spec.Name); err != nil {
		return nil, err
	}
	say("baking template %s: cold boot (%d vCPU, %d MiB RAM, %s)", spec.Name, spec.VCPUs, spec.MemoryMiB, a.rt.Accel())
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
	info := &TemplateInfo{Template: hostapi.Template{Name: spec.Name, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, DiskMiB: spec.DiskMiB,
		NIC: nic, VolumeSlots: volume.Slots, Env: spec.Env, Identity: ident}, Dir: tmp}
	runDir := a.runDir("bake-" + spec.Name)
	mspec := info.spec(filepath.Join(tmp, "disk.img"))
	if err := volume.MakePlaceholder(tmp); err != nil {
		return nil, err
	}
	bakeSlots := filepath.Join(tmp, "bake-slots")
	defer os.RemoveAll(bakeSlots)
	if err := os.MkdirAll(bakeSlots, 0o700); err != nil {
		return nil, err
	}
	if mspec.Drives, err = a.volumes.Drives(tmp, volume.Slots, nil, bakeSlots); err != nil {
		return nil, err
	}
	if nic {
		// The bake VM needs a tap like any other (the NIC is in the snapshot), but no egress.
		slot, err := a.net.Acquire(ctx, network.Policy{})
		if err != nil {
			return nil, fmt.Errorf("template %s: network slot: %w", spec.Name, err)
		}
		defer slot.Release() // after the deferred Kill below: a slot is released once its VMM is gone
		if mspec.Tap, err = slot.OpenTap(); err != nil {
			return nil, fmt.Errorf("template %s: %w", spec.Name, err)
		}
	}
	vm, err := a.rt.Boot(ctx, runDir, mspec, filepath.Join(tmp, "ram"))
	if mspec.Tap != nil {
		mspec.Tap.Close()
	}
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(runDir)
	defer a.rt.Kill(vm)
	exited := a.rt.Watch(vm)
	bootCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel() // a VMM that dies during boot fails the bake now, not at the timeout
		case <-bootCtx.Done():
		}
	}()
	client, err := guestConnect(bootCtx, vm.AgentSocket, 120*time.Second)
	if err != nil {
		return nil, fmt.Errorf("template %s: guest agent did not come up: %v (console: %s)", spec.Name, err, consoleTail(runDir))
	}
	say("guest agent ready after %d ms", time.Since(start).Milliseconds())
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
		var sink bytes.Buffer
		if _, err := client.Exec(bootCtx, guest.ExecRequest{Cmd: warmUp, User: user, Timeout: 60 * time.Second}, nil, &sink, &sink); err != nil {
			client.Close()
			return nil, fmt.Errorf("template %s: warm-up: %w", spec.Name, err)
		}
	}
	// Write the guest's dirty pages to its disk so the clones' disks hold what the snapshot saw.
	if err := client.Sync(bootCtx); err != nil {
		client.Close()
		return nil, fmt.Errorf("template %s: sync: %w", spec.Name, err)
	}
	t := time.Now()
	// The host stays connected while the state is saved: a clone wakes up inside a read of a live
	// session, sees the new host at once and re-handshakes (no reconnect polling to wait out).
	err = a.rt.SaveSnapshot(bootCtx, vm, filepath.Join(tmp, "state"))
	client.Close()
	if err != nil {
		return nil, fmt.Errorf("template %s: snapshot: %w", spec.Name, err)
	}
	say("snapshot saved in %d ms", time.Since(t).Milliseconds())
	a.rt.Kill(vm)
	os.RemoveAll(bakeSlots) // the bake VM's empty slot disks; clones get their own
	info.BakeMS = time.Since(start).Milliseconds()
	info.BakedAt = time.Now().UTC()
	info.Baked = true
	info.SizeBytes = layout.DirSize(tmp)
	if err := writeJSONFile(filepath.Join(tmp, "template.json"), info); err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	info.Dir = dir
	say("baked template %s in %.1f s", spec.Name, float64(info.BakeMS)/1000)
	return info, nil
}

func loadTemplate(dir string) (*TemplateInfo, error) {
	data, err := os.ReadFile(filepath.Join(dir, "template.json"))
	if err != nil {
		return nil, err
	}
	var info TemplateInfo
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

func consoleTail(runDir string) string {
	data, _ := os.ReadFile(filepath.Join(runDir, "console.log"))
	if len(data) > 1500 {
		data = data[len(data)-1500:]
	}
	return string(data)
}
