package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/timing"
)

// A snapshot leaves its host through the blob store: published when it is taken (if the host has
// a store), pulled by a host that is asked to restore it and lacks it. The publication carries
// the template's boot files and spare-slot placeholder as well, so a pulled snapshot needs no
// template on the pulling host: its record's TemplateDir is its own directory there. It carries
// its volume copies (volume.CopyFiles) too: a restore on the pulling host makes its volumes from them,
// in their slots, as one on the snapshot's own host does.

// Kind is the artifact kind of published snapshots (artifact name: the snapshot id).
const Kind = "snapshot"

// ownFiles are a snapshot's own files; BootFiles come from its template's directory.
var (
	ownFiles = []string{"ram", "state", "disk.img", WorkingSetFile}
	// BootFiles are what a restore needs of a template besides memory and disk: they travel with
	// every published memory image (snapshots, hibernated sandboxes).
	BootFiles = []string{"vmlinuz", "initrd", volume.PlaceholderName}
)

// CloneBootFiles reflinks templateDir's BootFiles into dir (those it lacks), so that dir can be
// published whole; a template without a placeholder has none to clone.
func CloneBootFiles(templateDir, dir string) error {
	if filepath.Clean(templateDir) == filepath.Clean(dir) {
		return nil
	}
	for _, f := range BootFiles {
		dst := filepath.Join(dir, f)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		if err := storage.Clone(filepath.Join(templateDir, f), dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Publish uploads r (only the chunks the store lacks) and records it published. A snapshot that
// is published already is not sent again. ram, when its Base is set, says how r's memory image
// was made from its base's (artifact.Derived): only the chunks the guest wrote are then read.
func (s *Store) Publish(ctx context.Context, bs blob.Store, r *Record, ram artifact.Derived) (artifact.Stats, error) {
	if r.Published {
		return artifact.Stats{}, nil
	}
	// The template's boot files travel beside the snapshot's own: reflinks, so free here.
	if err := CloneBootFiles(r.TemplateDir, r.Dir); err != nil {
		return artifact.Stats{}, err
	}
	// The volume copies are not optional: a snapshot published without one would restore with an
	// empty slot where its guest has a filesystem mounted.
	files := append(Present(r.Dir, append(append([]string{}, ownFiles...), BootFiles...)), volume.CopyFiles(r.Volumes)...)
	timing.Mark(ctx, "publish_files")
	var derived map[string]artifact.Derived
	if ram.Base != "" {
		derived = map[string]artifact.Derived{"ram": ram}
	}
	_, st, err := s.Local.PushDerived(ctx, bs, Kind, r.ID, r.Dir, files, r.Snapshot, derived)
	if err != nil {
		return st, err
	}
	r.Published = true
	return st, layout.WriteJSON(r.File("snapshot.json"), r)
}

// Pull fetches published snapshot id into this host's snapshots and returns its record (a
// snapshot this host has already, pulled earlier or its own, is returned as is). Concurrent pulls
// of one id share the work; a failed pull leaves nothing behind.
func (s *Store) Pull(ctx context.Context, bs blob.Store, id string) (*Record, artifact.Stats, error) {
	if !idRE.MatchString(id) {
		return nil, artifact.Stats{}, errdefs.NotFoundf("snapshot %s not found", id)
	}
	unlock := s.lockPull(id)
	defer unlock()
	if r, err := s.Load(id); err == nil {
		return r, artifact.Stats{}, nil
	}
	m, err := artifact.Get(ctx, bs, Kind, id)
	if err != nil {
		return nil, artifact.Stats{}, err
	}
	timing.Mark(ctx, "pull_get_manifest")
	var r Record
	if err := json.Unmarshal(m.Record, &r.Snapshot); err != nil || r.ID != id {
		return nil, artifact.Stats{}, errdefs.Invalidf("published snapshot %s: its record is not valid", id)
	}
	if err := m.Carries(volume.CopyFiles(r.Volumes)); err != nil {
		return nil, artifact.Stats{}, err
	}
	tmp, err := s.Begin(id)
	defer os.RemoveAll(tmp)
	if err != nil {
		return nil, artifact.Stats{}, err
	}
	var st artifact.Stats
	if s.Lazy != nil {
		r.LazyMount, st, err = s.Lazy.Pull(ctx, s.Local, bs, m, tmp)
	} else {
		// Unflushed (a pulled snapshot is a copy of the store's): UseLocal drops it after a
		// reboot, so torn files are never restored.
		st, err = s.Local.PullUnsynced(ctx, bs, m, tmp)
		r.UnflushedBoot = BootID()
	}
	if err != nil {
		return nil, st, err
	}
	// The index names files under tmp; they are about to move.
	defer s.Local.AddDir(filepath.Join(s.dir, id))
	r.TemplateDir, r.Published = filepath.Join(s.dir, id), true
	if err := s.Commit(tmp, &r); err != nil {
		if r.LazyMount != "" {
			FreeMount(r.LazyMount)
		}
		return nil, st, err
	}
	return &r, st, nil
}

// UseLocal makes l the index of chunks this host holds, and indexes this host's snapshots in it
// (once torn pulls are dropped).
func (s *Store) UseLocal(l *artifact.Local) {
	s.Local = l
	s.DropTornPulls()
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "snap_*"))
	for _, d := range dirs {
		l.AddDir(d)
	}
}

// Present returns the names (relative to dir) of those files that exist.
func Present(dir string, names []string) []string {
	var out []string
	for _, f := range names {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// Unpublish deletes snapshot id's publication (its chunks go at the store's next sweep).
func Unpublish(ctx context.Context, bs blob.Store, id string) error {
	return artifact.Delete(ctx, bs, Kind, id)
}

// lockPull serialises pulls of one id.
func (s *Store) lockPull(id string) (unlock func()) {
	s.pullMu.Lock()
	if s.pulls == nil {
		s.pulls = map[string]*sync.Mutex{}
	}
	mu, ok := s.pulls[id]
	if !ok {
		mu = &sync.Mutex{}
		s.pulls[id] = mu
	}
	s.pullMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// BootID names this boot of the machine ("" where the kernel does not say).
func BootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// DropTornPulls deletes the published snapshots written unflushed in an earlier boot of the
// machine (their files may be torn) that no sandbox restores from; they are pulled again when
// needed.
func (s *Store) DropTornPulls() {
	boot, used := BootID(), s.InUse()
	for _, r := range s.records() {
		if r.UnflushedBoot != "" && r.UnflushedBoot != boot && r.Published && !used[r.Dir] {
			os.RemoveAll(r.Dir)
		}
	}
}
