package bake

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/image"
	"github.com/pandastack/pandastack/internal/template"
)

// A baked template leaves its host through the blob store: published after its bake, pulled by
// a host that lacks it instead of building its image and baking (minutes → seconds).
//
// A publication is named by what makes two bakes interchangeable — the recipe, the guest agent
// binary, the VMM's identity, the NIC and the volume slots — and not by the guest image's hash,
// which a host knows only after building the image. It carries its own kernel, initrd, disk, RAM
// and device state, and its data volume if it has one (vol0.ext4, which every sandbox made from it
// copies), so the pulling host needs nothing else.

// templateKind is the artifact kind of published templates.
const templateKind = "template"

// publishedFiles are a baked template's files, as published (template.json is the record).
var publishedFiles = []string{"vmlinuz", "initrd", "disk.img", "ram", "state", volume.PlaceholderName}

// SetBlob makes s (nil: none) where this host publishes its bakes and pulls the ones it lacks.
func (ts *Templates) SetBlob(s blob.Store) {
	ts.mu.Lock()
	ts.blob = s
	ts.mu.Unlock()
}

// SetBakeStore makes s (nil: none) where this host publishes its bakes and pulls the ones it
// lacks, in place of the blob store (SetBlob), which then carries only snapshots and hibernations.
// Hosts that share bakes but keep their snapshots to themselves use it (a publication costs each
// snapshot its upload), and so do the VM tests: one bake per template per test process.
func (ts *Templates) SetBakeStore(s blob.Store) {
	ts.mu.Lock()
	ts.bakes = s
	ts.mu.Unlock()
}

// Blob is the host's blob store (nil: none); snapshots travel through it too.
func (ts *Templates) Blob() blob.Store {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.blob
}

// bakeStore is where bakes are published and pulled: the bake store, else the blob store.
func (ts *Templates) bakeStore() blob.Store {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.bakes != nil {
		return ts.bakes
	}
	return ts.blob
}

// publication names the bake of spec on this host as published: equal names restore alike.
func (ts *Templates) publication(spec template.Recipe, nic bool) (string, error) {
	agent, err := ts.guestAgentHash()
	if err != nil {
		return "", err
	}
	recipe, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	return spec.Name + "-" + layout.ShortHash("publish-v1", string(recipe), agent, ts.cfg.Runtime.Identity().String(),
		strconv.FormatBool(nic), strconv.Itoa(volume.Slots), warmUp), nil
}

func (ts *Templates) guestAgentHash() (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.agentHash != "" {
		return ts.agentHash, nil
	}
	sum, err := image.HashFile(ts.cfg.GuestAgent)
	if err != nil {
		return "", err
	}
	ts.agentHash = sum
	return ts.agentHash, nil
}

// localPublished finds a template of this host whose bake is the publication pub.
func (ts *Templates) localPublished(name, pub string) *Template {
	dirs, _ := filepath.Glob(filepath.Join(ts.cfg.Layout.Templates(), name+"-*", "template.json"))
	for _, p := range dirs {
		if t, err := loadTemplate(filepath.Dir(p)); err == nil && t.Published == pub && t.Identity.CanRestore(ts.cfg.Runtime.Identity()) {
			return t
		}
	}
	return nil
}

// pull fetches publication pub into this host's templates, or returns errdefs.NotFound when the
// store has none. The files are verified chunk by chunk; nothing is registered unless all are.
func (ts *Templates) pull(ctx context.Context, s blob.Store, pub string, say func(string, ...any)) (*Template, error) {
	m, err := artifact.Get(ctx, s, templateKind, pub)
	if err != nil {
		return nil, err
	}
	var info Template
	if err := json.Unmarshal(m.Record, &info); err != nil {
		return nil, errdefs.Invalidf("published template %s: its record is not valid: %v", pub, err)
	}
	if err := m.Carries(volume.CopyFiles(info.Volumes)); err != nil {
		return nil, err
	}
	if !info.Identity.CanRestore(ts.cfg.Runtime.Identity()) {
		return nil, errdefs.NotFoundf("published template %s was baked under %s, not this host's %s", pub, info.Identity, ts.cfg.Runtime.Identity())
	}
	// What the pull writes: a rootfs's unused blocks are holes in the manifest and stay holes.
	size := m.DataBytes()
	release, err := ts.cfg.Disk.Admit("pulling template "+info.Name, size)
	if err != nil {
		return nil, err
	}
	defer release()
	say("pulling template %s from %s (%d MiB)", info.Name, s, size>>20)
	start := time.Now()
	dir := filepath.Join(ts.cfg.Layout.Templates(), pub)
	tmp := dir + ".pulling"
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	_, st, err := ts.local.Pull(ctx, s, templateKind, pub, tmp)
	if err != nil {
		return nil, err
	}
	info.Dir, info.Published = dir, pub
	if err := layout.WriteJSON(filepath.Join(tmp, "template.json"), &info); err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	ts.local.AddDir(dir) // the index named the files under tmp
	say("pulled template %s in %.1f s (%d MiB fetched, %d MiB from this host's files)", info.Name, time.Since(start).Seconds(), st.Bytes>>20, st.LocalBytes>>20)
	return &info, nil
}

// publish uploads a fresh bake as publication pub. A failure is logged, not returned: the bake
// stands on this host either way, and other hosts bake it themselves.
func (ts *Templates) publish(ctx context.Context, s blob.Store, info *Template, say func(string, ...any)) {
	start := time.Now()
	files := append(append([]string{}, publishedFiles...), volume.CopyFiles(info.Volumes)...)
	_, st, err := ts.local.Push(ctx, s, templateKind, info.Published, info.Dir, files, info)
	if err != nil {
		ts.cfg.Log.Warn("publishing a template failed: other hosts will bake it themselves", "template", info.Name, "store", s.String(), "err", err)
		return
	}
	say("published template %s to %s in %.1f s (%d MiB sent)", info.Name, s, time.Since(start).Seconds(), st.Bytes>>20)
}
