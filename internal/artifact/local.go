package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/pandastack/pandastack/internal/blob"
)

// Local is one host's index of the chunks it already holds in the files of artifacts it pushed or
// pulled (a template it baked, a snapshot it pulled…). A pull takes a chunk from there — read and
// verified like a fetched one — instead of fetching it: a host that has a template pulls only the
// dirty chunks of a snapshot or a hibernated sandbox made from it.
//
// Invariant: an entry is a hint, never trusted: a file that changed or went away since (a woken
// sandbox's disk, a deleted snapshot) fails the verification, the entry is dropped, and the chunk
// is fetched from the store. The index lives in memory; AddDir rebuilds it from the manifest.json
// that Push and Pull leave beside an artifact's files.
type Local struct {
	mu sync.Mutex
	at map[string]localChunk // by digest
}

type localChunk struct {
	path string
	off  int64
}

// ManifestFile is the name of the manifest Local's Push and Pull leave in an artifact's directory.
const ManifestFile = "manifest.json"

// NewLocal returns an empty index.
func NewLocal() *Local { return &Local{at: map[string]localChunk{}} }

// Add indexes the chunks of m's files under dir.
func (l *Local) Add(dir string, m Manifest) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range m.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		for i, sum := range f.Chunks {
			if sum != "" {
				l.at[sum] = localChunk{p, int64(i) * ChunkSize}
			}
		}
	}
}

// AddDir indexes the artifact in dir from its manifest.json, if it has one.
func (l *Local) AddDir(dir string) {
	if l == nil {
		return
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return
	}
	var m Manifest
	if json.Unmarshal(raw, &m) == nil {
		l.Add(dir, m)
	}
}

// read returns chunk sum from a local file if it is there, whole and unchanged.
func (l *Local) read(sum string, want int) ([]byte, bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	c, ok := l.at[sum]
	l.mu.Unlock()
	if !ok {
		return nil, false
	}
	buf := make([]byte, want)
	f, err := os.Open(c.path)
	if err == nil {
		_, err = f.ReadAt(buf, c.off)
		f.Close()
	}
	got := sha256.Sum256(buf)
	if (err != nil && !errors.Is(err, io.EOF)) || hex.EncodeToString(got[:]) != sum {
		l.mu.Lock()
		if l.at[sum] == c {
			delete(l.at, sum)
		}
		l.mu.Unlock()
		return nil, false
	}
	return buf, true
}

// Push is the package's Push that also leaves the manifest in dir and indexes its chunks.
func (l *Local) Push(ctx context.Context, s blob.Store, kind, name, dir string, files []string, record any) (Manifest, Stats, error) {
	m, st, err := Push(ctx, s, kind, name, dir, files, record)
	if err == nil && l != nil {
		l.keep(dir, m)
	}
	return m, st, err
}

// Pull is the package's Pull taking chunks from local files where it can (Stats.Local counts
// them); it leaves the manifest in dir and indexes the pulled files.
func (l *Local) Pull(ctx context.Context, s blob.Store, kind, name, dir string) (Manifest, Stats, error) {
	m, st, err := pull(ctx, s, kind, name, dir, l)
	if err == nil && l != nil {
		l.keep(dir, m)
	}
	return m, st, err
}

// keep writes m beside the files (for AddDir after a restart) and indexes them.
func (l *Local) keep(dir string, m Manifest) {
	if raw, err := json.Marshal(m); err == nil {
		os.WriteFile(filepath.Join(dir, ManifestFile), raw, 0o600)
	}
	l.Add(dir, m)
}
