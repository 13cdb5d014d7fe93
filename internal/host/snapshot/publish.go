package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
	"github.com/pandastack/pandastack/internal/storage"
)

// A snapshot leaves its host through the blob store: published when it is taken (if the host has
// a store), pulled by a host that is asked to restore it and lacks it. The publication carries
// the template's boot files and spare-slot placeholder as well, so a pulled snapshot needs no
// template on the pulling host: its record's TemplateDir is its own directory there.

// Kind is the artifact kind of published snapshots (artifact name: the snapshot id).
const Kind = "snapshot"

// ownFiles are a snapshot's own files; bootFiles come from its template's directory.
var (
	ownFiles  = []string{"ram", "state", "disk.img"}
	bootFiles = []string{"vmlinuz", "initrd", volume.PlaceholderName}
)

// Publish uploads r (only the chunks the store lacks) and records it published. A snapshot that
// is published already is not sent again.
func (s *Store) Publish(ctx context.Context, bs blob.Store, r *Record) (artifact.Stats, error) {
	if r.Published {
		return artifact.Stats{}, nil
	}
	// The template's boot files travel beside the snapshot's own: reflinks, so free here.
	for _, f := range bootFiles {
		dst := r.File(f)
		if _, err := os.Stat(dst); err == nil || filepath.Clean(r.TemplateDir) == filepath.Clean(r.Dir) {
			continue
		}
		if err := storage.Clone(filepath.Join(r.TemplateDir, f), dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return artifact.Stats{}, err
		}
	}
	var files []string
	for _, f := range append(append([]string{}, ownFiles...), bootFiles...) {
		if _, err := os.Stat(r.File(f)); err == nil {
			files = append(files, f)
		}
	}
	_, st, err := artifact.Push(ctx, bs, Kind, r.ID, r.Dir, files, r.Snapshot)
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
	var r Record
	if err := json.Unmarshal(m.Record, &r.Snapshot); err != nil || r.ID != id {
		return nil, artifact.Stats{}, errdefs.Invalidf("published snapshot %s: its record is not valid", id)
	}
	tmp, err := s.Begin(id)
	defer os.RemoveAll(tmp)
	if err != nil {
		return nil, artifact.Stats{}, err
	}
	_, st, err := artifact.Pull(ctx, bs, Kind, id, tmp)
	if err != nil {
		return nil, st, err
	}
	r.TemplateDir, r.Published = filepath.Join(s.dir, id), true
	if err := s.Commit(tmp, &r); err != nil {
		return nil, st, err
	}
	return &r, st, nil
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
