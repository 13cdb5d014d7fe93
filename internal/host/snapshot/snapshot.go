// Package snapshot keeps a host's snapshot records: a sandbox's memory and disk at one instant,
// in snapshots/<id>/ (snapshot.json, ram, state, disk.img). Taking one is the sandbox manager's
// (it pauses the VM); this package names, commits, lists, deletes and frees them, and pushes them
// to a blob store and pulls them on another host (publish.go).
//
// Invariants: a snapshot becomes visible whole (written under <id>.tmp, then renamed); a deleted
// snapshot's files stay while a sandbox restores from them (Store.InUse) and go at the next GC;
// internal snapshots (behind forks) are never listed.
package snapshot

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Record is a snapshot's record (snapshot.json): its wire view and the host's flags.
type Record struct {
	hostapi.Snapshot
	// Internal snapshots back forks; they are deleted with their last child.
	Internal bool `json:"internal,omitempty"`
	// NoProcs: its sandbox had no background processes its agent knew of (none started, none
	// restored with it), so a sandbox restored from it has no exits to inherit and none to look
	// for. Records from before it (false) are taken as having them.
	NoProcs bool `json:"no_procs,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
	// LazyMount: the memory file ("ram") is a link into this mount, served by a process of its
	// own until the snapshot is freed (lazy.go).
	LazyMount string `json:"lazy_mount,omitempty"`
	// UnflushedBoot is the boot of this machine a published snapshot's files were written in
	// without being flushed (pulled by Pull, or taken here and published at once: the store
	// holds the durable copy): after another boot they may be torn, and the snapshot is dropped
	// (DropTornPulls) to be pulled again.
	UnflushedBoot string `json:"pulled_boot,omitempty"`

	Dir string `json:"-"` // where its files are
}

// File is one of the snapshot's files ("disk.img", "ram", "state").
func (r *Record) File(name string) string { return filepath.Join(r.Dir, name) }

var idRE = regexp.MustCompile(`^snap_[a-z0-9]{1,60}$`)

// Store is one host's snapshots.
type Store struct {
	dir      string
	identity runtime.Identity
	// InUse is the set of directories sandboxes restore from (set before use).
	InUse func() map[string]bool

	pullMu sync.Mutex
	pulls  map[string]*sync.Mutex // one lock per snapshot being pulled
	// Local is the host's index of chunks in artifact files (set before use; nil: none).
	Local *artifact.Local
	// Lazy, if set, makes a pull serve the snapshot's memory lazily (lazy.go).
	Lazy *Lazy
}

// New opens the snapshots of layout l; identity is this host's VMM, recorded on snapshots saved
// before identities were.
func New(l layout.Layout, identity runtime.Identity) *Store {
	return &Store{dir: l.Snapshots(), identity: identity, InUse: func() map[string]bool { return nil }}
}

// NewID names a new snapshot.
func NewID() string { return layout.NewID("snap_") }

// Load reads a snapshot's record, internal ones too; a deleted one is not found.
func (s *Store) Load(id string) (*Record, error) {
	if !idRE.MatchString(id) {
		return nil, errdefs.NotFoundf("snapshot %s not found", id)
	}
	dir := filepath.Join(s.dir, id)
	var r Record
	if err := layout.ReadJSON(filepath.Join(dir, "snapshot.json"), &r); err != nil || r.Deleted {
		return nil, errdefs.NotFoundf("snapshot %s not found", id)
	}
	r.Dir = dir
	if r.Identity.IsZero() {
		// Saved before identities were recorded: taken as this host's VMM's, once.
		r.Identity = s.identity
		if err := layout.WriteJSON(filepath.Join(dir, "snapshot.json"), r); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// records reads every record, deleted and internal ones too.
func (s *Store) records() []Record {
	files, _ := filepath.Glob(filepath.Join(s.dir, "*", "snapshot.json"))
	var out []Record
	for _, f := range files {
		var r Record
		if layout.ReadJSON(f, &r) == nil {
			r.Dir = filepath.Dir(f)
			out = append(out, r)
		}
	}
	return out
}

// List returns the snapshot objects on this host (not the internal ones behind forks), oldest
// first.
func (s *Store) List() []hostapi.Snapshot {
	out := []hostapi.Snapshot{}
	for _, r := range s.records() {
		if !r.Deleted && !r.Internal {
			out = append(out, r.Snapshot)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Get returns one snapshot object.
func (s *Store) Get(id string) (hostapi.Snapshot, error) {
	r, err := s.Load(id)
	if err != nil || r.Internal {
		return hostapi.Snapshot{}, errdefs.NotFoundf("snapshot %s not found", id)
	}
	return r.Snapshot, nil
}

// Delete removes a snapshot. Sandboxes restored from it keep running: its files go only when the
// last of them is gone.
func (s *Store) Delete(id string) error {
	r, err := s.Load(id)
	if err != nil {
		return err
	}
	r.Deleted = true
	if err := layout.WriteJSON(r.File("snapshot.json"), r); err != nil {
		return err
	}
	s.GC()
	return nil
}

// LazyMounts is the set of mounts this host's snapshots are served from (Lazy).
func (s *Store) LazyMounts() map[string]bool {
	out := map[string]bool{}
	for _, r := range s.records() {
		if r.LazyMount != "" {
			out[r.LazyMount] = true
		}
	}
	return out
}

// GC frees deleted snapshots that no sandbox uses as its memory base any more.
func (s *Store) GC() {
	used := s.InUse()
	for _, r := range s.records() {
		if !r.Deleted || used[r.Dir] {
			continue
		}
		if r.LazyMount != "" && FreeMount(r.LazyMount) != nil {
			continue // still served: freed at a later GC
		}
		os.RemoveAll(r.Dir)
	}
	// Snapshots and adopted hibernations are served from mounts of their own; once none is
	// left, nothing reads the cache any more.
	if s.Lazy != nil && s.Lazy.Idle() {
		os.RemoveAll(s.Lazy.CacheDir)
	}
}

// CountOf counts the snapshots on this host taken of sandboxes of template name.
func (s *Store) CountOf(template string) int {
	n := 0
	dirs, _ := os.ReadDir(s.dir)
	for _, d := range dirs {
		if r, err := s.Load(d.Name()); err == nil && r.Template == template {
			n++
		}
	}
	return n
}

// Begin makes the directory a new snapshot's files are written into, invisible until Commit.
// The caller removes it when done (after Commit it is gone).
func (s *Store) Begin(id string) (tmp string, err error) {
	tmp = filepath.Join(s.dir, id+".tmp")
	return tmp, os.MkdirAll(tmp, 0o700)
}

// BeginInPlace makes the directory of a snapshot written where it stays: a fork's, whose RAM file
// a VMM prepared for the fork maps before the save (a jailed VMM keeps seeing a mapped file at
// the path it had, so that must be the snapshot's own). It is invisible until CommitInPlace
// writes its record; one left without a record is swept at the agent's next start.
func (s *Store) BeginInPlace(id string) (dir string, err error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", err
	}
	dir = filepath.Join(s.dir, id)
	return dir, os.Mkdir(dir, 0o700)
}

// CommitInPlace writes r's record into dir (BeginInPlace's): the snapshot is then visible.
func (s *Store) CommitInPlace(dir string, r *Record) error {
	r.SizeBytes = layout.DirSize(dir)
	if err := layout.WriteJSON(filepath.Join(dir, "snapshot.json"), r); err != nil {
		return err
	}
	r.Dir = dir
	return nil
}

// Commit writes r's record into tmp and publishes the snapshot whole; r.Dir is then its home.
func (s *Store) Commit(tmp string, r *Record) error {
	r.SizeBytes = layout.DirSize(tmp)
	if err := layout.WriteJSON(filepath.Join(tmp, "snapshot.json"), r); err != nil {
		return err
	}
	final := filepath.Join(s.dir, r.ID)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	r.Dir = final
	return nil
}
