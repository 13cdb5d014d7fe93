// Package artifact moves a directory of files (a baked template, a snapshot, a hibernated
// sandbox's memory and disk) between a host and a blob store, in the format every PandaStack
// artifact shares:
//
//	chunks/<sha256>                   a chunk of a file (4 MiB; 256 KiB of a memory
//	                                  image), named by its content
//	manifests/<kind>/<name>.json      the files, each a list of chunk digests, and the artifact's
//	                                  own record (its metadata, runtime identity included)
//
// Invariants: a chunk's key is the sha256 of its bytes, so identical chunks — a fork's unchanged
// memory, two templates' shared base — are stored once and a push uploads only chunks the store
// lacks; an all-zero chunk is not stored (a hole in the manifest, a hole in the pulled file); the
// manifest is written after every chunk it names, so a push cut midway leaves no manifest that
// points at a missing chunk; every chunk is verified on pull, and a mismatch or a missing chunk
// fails the pull with an error naming the artifact and the chunk — nothing is resumed on bad
// bytes, and a failed pull leaves no file behind. Sweep deletes only chunks no manifest names.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/timing"
)

// ChunkSize is the unit of storage, dedupe and fetch of a file, and the largest chunk a manifest
// may name; a manifest of format 1 names no chunk size: all of its files are cut in ChunkSize.
const ChunkSize = 4 << 20

// MemoryChunkSize cuts a guest memory image ("ram") in a store where small objects are cheap
// (blob.SmallObjectsCheap: a directory, not S3): a guest's writes land on pages spread over its
// memory, so a snapshot's image differs from its base in many chunks, each partly. Measured on a
// 512 MiB guest that wrote 64 MiB (71 MiB of pages differed): 38 chunks of 4 MiB (152 MiB)
// differ, 398 of 256 KiB (99 MiB). On S3 a request per object costs more than the bytes saved:
// memory stays in 4 MiB chunks there. A file keeps the chunk size of the indexed file its blocks
// are shared with (see Local), so a snapshot of a template published with 4 MiB chunks is cut
// like it and still shares its chunks.
const MemoryChunkSize = 256 << 10

// minChunkSize is the smallest chunk size a manifest may name.
const minChunkSize = 4 << 10

// FormatVersion is written in every manifest; Get reads this format and format 1 (before files
// said their chunk size) and refuses others.
const FormatVersion = 2

// chunkSizeFor is the chunk size of a file pushed to s with no indexed base to follow.
func chunkSizeFor(s blob.Store, rel string) int64 {
	if filepath.Base(rel) == "ram" && blob.SmallObjectsCheap(s) {
		return MemoryChunkSize
	}
	return ChunkSize
}

// parallelFor is how many chunks of size cs move at once: 8, more for small chunks (a request's
// latency, not its bytes, bounds a small chunk's fetch from S3), at most 32.
func parallelFor(cs int64) int { return int(min(32, max(8, (32<<20)/max(cs, 1)))) }

// Manifest describes one artifact.
type Manifest struct {
	Version int             `json:"version"`
	Kind    string          `json:"kind"`
	Name    string          `json:"name"`
	Created time.Time       `json:"created"`
	Record  json.RawMessage `json:"record,omitempty"` // the artifact's own metadata, opaque here
	Files   []File          `json:"files"`
}

// File is one file of an artifact: its chunks in order, "" for an all-zero chunk.
type File struct {
	Path string `json:"path"` // slash-separated, relative to the artifact's directory
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
	// ChunkSize is the length of each chunk but the last (a power of two, 4 KiB to ChunkSize);
	// absent (format 1): ChunkSize.
	ChunkSize int64    `json:"chunk_size,omitempty"`
	Chunks    []string `json:"chunks"`
}

// Chunk is the chunk size f is cut in.
func (f File) Chunk() int64 {
	if f.ChunkSize == 0 {
		return ChunkSize
	}
	return f.ChunkSize
}

// Len is the length of chunk i of f.
func (f File) Len(i int) int { return chunkLen(f.Size, f.Chunk(), i) }

// DataBytes is what pulling f writes: its bytes less its holes (all-zero chunks stay holes).
func (f File) DataBytes() int64 {
	var n int64
	for i, c := range f.Chunks {
		if c != "" {
			n += int64(f.Len(i))
		}
	}
	return n
}

// DataBytes is what pulling m writes (File.DataBytes of every file).
func (m Manifest) DataBytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.DataBytes()
	}
	return n
}

// Carries checks that m has a file at each of paths: a publication whose record names a file it
// does not carry (a volume copy) is refused before anything is pulled.
func (m Manifest) Carries(paths []string) error {
	for _, p := range paths {
		if !slices.ContainsFunc(m.Files, func(f File) bool { return f.Path == p }) {
			return errdefs.Invalidf("artifact %s/%s: its record names %s, which it does not carry", m.Kind, m.Name, p)
		}
	}
	return nil
}

// Off is where chunk i of f starts.
func (f File) Off(i int) int64 { return int64(i) * f.Chunk() }

// chunks is how many chunks a file of size bytes cut in cs has.
func chunks(size, cs int64) int { return int((size + cs - 1) / cs) }

func validChunkSize(cs int64) bool { return cs >= minChunkSize && cs <= ChunkSize && cs&(cs-1) == 0 }

// Stats says what a push or pull moved.
type Stats struct {
	Chunks      int   // chunks in the artifact's files (holes not counted)
	Holes       int   // all-zero chunks, neither stored nor fetched
	Transferred int   // chunks actually uploaded or downloaded
	Bytes       int64 // bytes of those chunks
	Local       int   // chunks a pull copied from this host's own files (Local) instead
	LocalBytes  int64 // bytes of those chunks
	Known       int   // chunks a push named without reading them (their blocks are an indexed file's)
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ManifestKey is where the manifest of kind/name is stored.
func ManifestKey(kind, name string) string { return "manifests/" + kind + "/" + name + ".json" }

// TraceKey is where the order in which kind/name's chunks were first read at its first lazy
// restore is kept (internal/artifact/lazy); it goes with the manifest.
func TraceKey(kind, name string) string { return "traces/" + kind + "/" + name + ".json" }

func chunkKey(sum string) string { return "chunks/" + sum }

func checkName(kind, name string) error {
	if !namePattern.MatchString(kind) || !namePattern.MatchString(name) {
		return errdefs.Invalidf("artifact %s/%s: kind and name are lowercase letters, digits, '.', '_' or '-' (at most 128)", kind, name)
	}
	return nil
}

// Push uploads the files (paths relative to dir) as artifact kind/name with record as its
// metadata, replacing an earlier manifest of that name. Chunks the store holds are not sent again.
func Push(ctx context.Context, s blob.Store, kind, name, dir string, files []string, record any) (Manifest, Stats, error) {
	return push(ctx, s, kind, name, dir, files, record, nil, nil)
}

func push(ctx context.Context, s blob.Store, kind, name, dir string, files []string, record any, local *Local, derived map[string]Derived) (Manifest, Stats, error) {
	if err := checkName(kind, name); err != nil {
		return Manifest{}, Stats{}, err
	}
	m := Manifest{Version: FormatVersion, Kind: kind, Name: name, Created: time.Now().UTC()}
	if record != nil {
		raw, err := json.Marshal(record)
		if err != nil {
			return Manifest{}, Stats{}, err
		}
		m.Record = raw
	}
	var st stats
	for _, rel := range files {
		f, err := pushFile(ctx, s, dir, rel, local, derived[rel], &st)
		if err != nil {
			return Manifest{}, Stats{}, fmt.Errorf("push %s/%s: %s: %w", kind, name, rel, err)
		}
		m.Files = append(m.Files, f)
		timing.Mark(ctx, "push_"+stepName(rel))
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return Manifest{}, Stats{}, err
	}
	if err := s.Put(ctx, ManifestKey(kind, name), bytes.NewReader(raw)); err != nil {
		return Manifest{}, Stats{}, fmt.Errorf("push %s/%s: manifest: %w", kind, name, err)
	}
	timing.Mark(ctx, "push_manifest")
	return m, st.snapshot(), nil
}

// stats counts across the parallel workers.
type stats struct{ chunks, holes, moved, bytes, local, localBytes, known atomic.Int64 }

func (s *stats) snapshot() Stats {
	return Stats{Chunks: int(s.chunks.Load()), Holes: int(s.holes.Load()), Transferred: int(s.moved.Load()), Bytes: s.bytes.Load(),
		Local: int(s.local.Load()), LocalBytes: s.localBytes.Load(), Known: int(s.known.Load())}
}

func pushFile(ctx context.Context, s blob.Store, dir, rel string, local *Local, derived Derived, st *stats) (File, error) {
	if !filepath.IsLocal(rel) {
		return File{}, errdefs.Invalidf("%q is not a path inside the artifact", rel)
	}
	f, err := os.Open(filepath.Join(dir, rel))
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return File{}, err
	}
	if !info.Mode().IsRegular() {
		return File{}, errdefs.Invalidf("%s is not a regular file", rel)
	}
	cs, known, bases, ok := local.derivedKnown(derived, info)
	if !ok {
		cs, known, bases = local.known(filepath.Join(dir, rel), f, info, chunkSizeFor(s, rel))
	}
	timing.Mark(ctx, "push_map")
	stored := namedBy(ctx, s, bases)
	out := File{Path: filepath.ToSlash(rel), Size: info.Size(), Mode: uint32(info.Mode().Perm()), ChunkSize: cs}
	n := chunks(info.Size(), cs)
	out.Chunks = make([]string, n)
	read := func(i int) ([]byte, error) {
		buf := make([]byte, out.Len(i))
		if _, err := f.ReadAt(buf, out.Off(i)); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return buf, nil
	}
	err = forEach(ctx, n, parallelFor(cs), func(i int) error {
		var buf []byte
		if sum, ok := known[i]; ok {
			if sum == "" {
				st.holes.Add(1)
				return nil
			}
			out.Chunks[i] = sum
			st.known.Add(1)
		} else {
			var err error
			if buf, err = read(i); err != nil {
				return err
			}
			if allZero(buf) {
				st.holes.Add(1)
				return nil
			}
			sum := sha256.Sum256(buf)
			out.Chunks[i] = hex.EncodeToString(sum[:])
		}
		st.chunks.Add(1)
		if buf == nil && stored[out.Chunks[i]] {
			return nil // its base's manifest in the store names it: stored, no need to ask
		}
		if _, err := s.Stat(ctx, chunkKey(out.Chunks[i])); err == nil {
			return nil // already stored: content addressing makes it the same bytes
		} else if !errdefs.Is(err, errdefs.NotFound) {
			return err
		}
		if buf == nil { // known but not stored (its publication swept): read it after all
			var err error
			if buf, err = read(i); err != nil {
				return err
			}
			if got := sha256.Sum256(buf); hex.EncodeToString(got[:]) != out.Chunks[i] {
				return fmt.Errorf("chunk %d changed while it was pushed", i)
			}
		}
		if err := s.Put(ctx, chunkKey(out.Chunks[i]), bytes.NewReader(buf)); err != nil {
			return fmt.Errorf("chunk %d: %w", i, err)
		}
		st.moved.Add(1)
		st.bytes.Add(int64(len(buf)))
		return nil
	})
	return out, err
}

// namedBy is the set of chunks the manifests of arts (kind, name) in s name: a chunk a live
// manifest names is in the store (Push writes a manifest after its chunks; Sweep keeps what a
// manifest names), so a push of a file whose chunks are a base's asks the store once for the
// base's manifest, not once per chunk (a request each on S3). A manifest that is gone or cannot
// be read names nothing: its chunks are asked for one by one.
func namedBy(ctx context.Context, s blob.Store, arts [][2]string) map[string]bool {
	named := map[string]bool{}
	for _, a := range arts {
		m, err := Get(ctx, s, a[0], a[1])
		if err != nil {
			continue
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				named[c] = true
			}
		}
	}
	return named
}

// Get reads the manifest of kind/name.
func Get(ctx context.Context, s blob.Store, kind, name string) (Manifest, error) {
	if err := checkName(kind, name); err != nil {
		return Manifest{}, err
	}
	rc, err := s.Get(ctx, ManifestKey(kind, name))
	if err != nil {
		if errdefs.Is(err, errdefs.NotFound) {
			return Manifest{}, errdefs.NotFoundf("artifact %s/%s is not in the blob store %s", kind, name, s)
		}
		return Manifest{}, err
	}
	defer rc.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(rc, 64<<20)).Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("artifact %s/%s: manifest is not valid JSON: %w", kind, name, err)
	}
	if m.Version != FormatVersion && m.Version != 1 {
		return Manifest{}, fmt.Errorf("artifact %s/%s: manifest format %d, this build reads 1 and %d", kind, name, m.Version, FormatVersion)
	}
	for _, f := range m.Files {
		if f.ChunkSize != 0 && (m.Version == 1 || !validChunkSize(f.ChunkSize)) {
			return Manifest{}, fmt.Errorf("artifact %s/%s: manifest names a bad chunk size %d for %q", kind, name, f.ChunkSize, f.Path)
		}
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) || f.Size < 0 || len(f.Chunks) != chunks(f.Size, f.Chunk()) {
			return Manifest{}, fmt.Errorf("artifact %s/%s: manifest names a bad file %q", kind, name, f.Path)
		}
	}
	return m, nil
}

// Pull fetches artifact kind/name into dir (created if missing) and returns its manifest. Files
// appear whole or not at all: each is written beside its place and renamed once every chunk of it
// has been verified.
func Pull(ctx context.Context, s blob.Store, kind, name, dir string) (Manifest, Stats, error) {
	return (*Local)(nil).Pull(ctx, s, kind, name, dir)
}

// pullManifest pulls m's files (all of them: a caller may pass a manifest cut to fewer files).
func pullManifest(ctx context.Context, s blob.Store, m Manifest, dir string, local *Local, sync bool) (Stats, error) {
	var st stats
	for _, f := range m.Files {
		if err := pullFile(ctx, s, dir, f, local, &st, sync); err != nil {
			return Stats{}, fmt.Errorf("pull %s/%s: %s: %w", m.Kind, m.Name, f.Path, err)
		}
		timing.Mark(ctx, "pull_"+stepName(f.Path))
	}
	return st.snapshot(), nil
}

func pullFile(ctx context.Context, s blob.Store, dir string, f File, local *Local, st *stats, sync bool) error {
	dst := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".pull-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	defer tmp.Close()
	// The file starts as one hole of its size; all-zero chunks stay holes.
	if err := tmp.Truncate(f.Size); err != nil {
		return err
	}
	// What this host holds, cloned by runs first; the rest chunk by chunk.
	placed := local.PlaceRuns(f, tmp)
	err = forEach(ctx, len(f.Chunks), parallelFor(f.Chunk()), func(i int) error {
		sum := f.Chunks[i]
		if sum == "" {
			st.holes.Add(1)
			return nil
		}
		st.chunks.Add(1)
		if placed[i] || local.Place(sum, f.Len(i), tmp, f.Off(i)) {
			st.local.Add(1)
			st.localBytes.Add(int64(f.Len(i)))
			return nil
		}
		buf, err := FetchChunk(ctx, s, sum, f.Len(i))
		if err != nil {
			return fmt.Errorf("chunk %d (%s): %w", i, sum, err)
		}
		st.moved.Add(1)
		st.bytes.Add(int64(len(buf)))
		_, err = tmp.WriteAt(buf, f.Off(i))
		return err
	})
	if err != nil {
		return err
	}
	if err := tmp.Chmod(os.FileMode(f.Mode).Perm()); err != nil {
		return err
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return err
		}
	}
	return os.Rename(tmp.Name(), dst)
}

// FetchChunk reads chunk sum from the store and checks it is want bytes whose sha256 is sum.
func FetchChunk(ctx context.Context, s blob.Store, sum string, want int) ([]byte, error) {
	rc, err := s.Get(ctx, chunkKey(sum))
	if err != nil {
		if errdefs.Is(err, errdefs.NotFound) {
			return nil, fmt.Errorf("missing from the blob store")
		}
		return nil, err
	}
	defer rc.Close()
	// Read into a buffer of the expected size (+1 to see a longer object): no growing copies.
	buf := make([]byte, min(want, ChunkSize)+1)
	n, err := io.ReadFull(rc, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	buf = buf[:n]
	got := sha256.Sum256(buf)
	if len(buf) != want || hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("corrupt: %d bytes with digest %x, want %d bytes", len(buf), got, want)
	}
	return buf, nil
}

// Delete removes the manifest of kind/name; its chunks go at the next Sweep unless another
// manifest names them.
func Delete(ctx context.Context, s blob.Store, kind, name string) error {
	if err := checkName(kind, name); err != nil {
		return err
	}
	if err := s.Delete(ctx, ManifestKey(kind, name)); err != nil {
		return err
	}
	return s.Delete(ctx, TraceKey(kind, name))
}

// Sweep deletes every chunk no manifest names that is older than grace (a push in progress has
// uploaded chunks its manifest does not yet name: grace must outlast the longest push). It
// returns how many chunks it deleted.
func Sweep(ctx context.Context, s blob.Store, grace time.Duration) (int, error) {
	live := map[string]bool{}
	err := s.List(ctx, "manifests/", func(in blob.Info) error {
		kind, rest, _ := strings.Cut(strings.TrimPrefix(in.Key, "manifests/"), "/")
		m, err := Get(ctx, s, kind, strings.TrimSuffix(rest, ".json"))
		if err != nil {
			return fmt.Errorf("sweep: %s: %w (nothing deleted)", in.Key, err)
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				live[c] = true
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-grace)
	var dead []string
	err = s.List(ctx, "chunks/", func(in blob.Info) error {
		if !live[strings.TrimPrefix(in.Key, "chunks/")] && in.Modified.Before(cutoff) {
			dead = append(dead, in.Key)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, k := range dead {
		if err := s.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(dead), nil
}

// stepName is a file's step in a push's or pull's trace: its memory image and disk apart (they
// are what costs), every other file (boot files, state, volume copies) together.
func stepName(rel string) string {
	switch b := filepath.Base(rel); b {
	case "ram", "disk.img", "state":
		return b
	}
	return "other"
}

// chunkLen is the length of chunk i of a file of size bytes cut in cs.
func chunkLen(size, cs int64, i int) int {
	return int(min(cs, size-int64(i)*cs))
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// forEach runs fn(0..n-1) on up to parallel goroutines; the first error cancels the rest and
// is returned.
func forEach(ctx context.Context, n, parallel int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
