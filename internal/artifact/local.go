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
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/storage"
)

// Local is one host's index of the chunks it already holds in the files of artifacts it pushed or
// pulled (a template it baked, a snapshot it pulled…). A pull takes a chunk from there instead of
// fetching it: a host that has a template pulls only the dirty chunks of a snapshot or a
// hibernated sandbox made from it. Where it can, it clones the chunk's blocks (a reflink: no
// bytes read or written, and the pulled file shares them with the template's), else it copies.
//
// Invariant: an entry is trusted only while its file is the one indexed — same inode, size and
// modification time (artifact files are written once; a sandbox disk that changed since, a file
// replaced, shows a new mtime or inode). Any other entry is read and verified like a fetched chunk,
// and dropped on a mismatch (the chunk is then fetched). The index lives in memory; AddDir
// rebuilds it from the manifest.json that Push and Pull leave beside an artifact's files.
type Local struct {
	mu    sync.Mutex
	at    map[string][]localChunk // by digest: where it is, first indexed first (at most maxPlaces)
	files map[string]fileID       // by path: the file as indexed
	sums  map[string][]string     // by path: its chunks' digests as indexed ("" a hole)
	cuts  map[string]int64        // by path: the chunk size it is cut in
	arts  map[string][2]string    // by path: the kind and name of the artifact it is a file of
}

// maxPlaces bounds the places kept per chunk: a template's chunk is in every snapshot pulled from
// it, and those come and go; the template, indexed first, stays first.
const maxPlaces = 4

type localChunk struct {
	path string
	off  int64
}

// fileID is what tells a file from its replacement or a modified version of it.
type fileID struct {
	ino, size int64
	mtime     time.Time
}

func (a fileID) same(b fileID) bool {
	return a.ino == b.ino && a.ino >= 0 && a.size == b.size && a.mtime.Equal(b.mtime)
}

func identify(fi os.FileInfo) fileID {
	var ino int64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = int64(st.Ino)
	}
	return fileID{ino, fi.Size(), fi.ModTime()}
}

// ManifestFile is the name of the manifest Local's Push and Pull leave in an artifact's directory.
const ManifestFile = "manifest.json"

// NewLocal returns an empty index.
func NewLocal() *Local {
	return &Local{at: map[string][]localChunk{}, files: map[string]fileID{}, sums: map[string][]string{}, cuts: map[string]int64{},
		arts: map[string][2]string{}}
}

// Add indexes the chunks of m's files under dir, as those files are now.
func (l *Local) Add(dir string, m Manifest) {
	ids := map[string]fileID{}
	for _, f := range m.Files {
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path))); err == nil {
			ids[f.Path] = identify(fi)
		}
	}
	l.add(dir, m, ids)
}

// add indexes m's files under dir as ids says they were when they matched m.
func (l *Local) add(dir string, m Manifest, ids map[string]fileID) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range m.Files {
		id, ok := ids[f.Path]
		if !ok {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		l.files[p] = id
		l.sums[p], l.cuts[p], l.arts[p] = f.Chunks, f.Chunk(), [2]string{m.Kind, m.Name}
		for i, sum := range f.Chunks {
			if sum == "" {
				continue
			}
			c := localChunk{p, f.Off(i)}
			switch places := l.at[sum]; {
			case slices.Contains(places, c):
			case len(places) < maxPlaces:
				l.at[sum] = append(places, c)
			default:
				places[len(places)-1] = c
			}
		}
	}
}

// kept is manifest.json: the artifact's manifest and its files as they were when they matched it.
type kept struct {
	Manifest Manifest            `json:"manifest"`
	Files    map[string]keptFile `json:"files"`
}

type keptFile struct {
	Ino     int64 `json:"ino"`
	Size    int64 `json:"size"`
	MtimeNs int64 `json:"mtime_ns"`
}

// AddDir indexes the artifact in dir from its manifest.json, if it has one: a file changed since
// that was written is indexed untrusted (read and verified on use).
func (l *Local) AddDir(dir string) {
	if l == nil {
		return
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return
	}
	var k kept
	if json.Unmarshal(raw, &k) != nil {
		return
	}
	ids := map[string]fileID{}
	for _, f := range k.Manifest.Files {
		if kf, ok := k.Files[f.Path]; ok {
			ids[f.Path] = fileID{kf.Ino, kf.Size, time.Unix(0, kf.MtimeNs)}
		} else {
			ids[f.Path] = fileID{ino: -1} // unknown: never trusted
		}
	}
	l.add(dir, k.Manifest, ids)
}

// Place writes chunk sum (want bytes) into dst at off from a local file, if one has it: cloned
// when its file is unchanged since indexed (copied if the filesystem cannot clone), read and
// verified otherwise. false: not here (or not intact): fetch it.
func (l *Local) Place(sum string, want int, dst *os.File, off int64) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	places := slices.Clone(l.at[sum])
	l.mu.Unlock()
	for _, c := range places {
		if l.placeFrom(c, sum, want, dst, off) {
			return true
		}
		l.forget(sum, c)
	}
	return false
}

// PlaceRuns places the chunks of f that this host holds into dst (f's file being pulled) by runs:
// consecutive chunks held at consecutive offsets of one indexed, unchanged file (a snapshot's
// memory against its template's: most of it) are cloned with one FICLONERANGE each, not one per
// chunk (2048 clones of 256 KiB took 112 ms on XFS, one clone of the 512 MiB 0.04 ms). It returns
// which chunks it placed; the caller places or fetches the others one by one (Place verifies what
// it cannot trust). Nothing is placed where the filesystem cannot clone.
func (l *Local) PlaceRuns(f File, dst *os.File) (placed []bool) {
	placed = make([]bool, len(f.Chunks))
	if l == nil {
		return placed
	}
	type run struct {
		path         string
		srcOff, size int64
		first, n     int
	}
	var runs []run
	l.mu.Lock()
	for i, sum := range f.Chunks {
		places := l.at[sum]
		if sum == "" || len(places) == 0 {
			continue
		}
		c := places[0]
		if k := len(runs) - 1; k >= 0 && runs[k].first+runs[k].n == i {
			// Prefer the place that continues the run.
			r := runs[k]
			for _, p := range places {
				if p.path == r.path && p.off == r.srcOff+r.size {
					c = p
					break
				}
			}
			if c.path == r.path && c.off == r.srcOff+r.size {
				runs[k].size += int64(f.Len(i))
				runs[k].n++
				continue
			}
		}
		runs = append(runs, run{path: c.path, srcOff: c.off, size: int64(f.Len(i)), first: i, n: 1})
	}
	l.mu.Unlock()
	srcs := map[string]*os.File{}
	defer func() {
		for _, s := range srcs {
			if s != nil {
				s.Close()
			}
		}
	}()
	for _, r := range runs {
		src, opened := srcs[r.path]
		if !opened {
			srcs[r.path] = nil
			s, _, trusted := l.openIndexed(r.path)
			// Trusted only while it is the file indexed (see Local): else chunk by chunk, verified.
			if s != nil && !trusted {
				s.Close()
				continue
			}
			src, srcs[r.path] = s, s
		}
		if src == nil {
			continue
		}
		if err := cloneRange(dst, src, r.srcOff, r.size, f.Off(r.first)); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTTY) {
				return placed // no reflinks here: Place copies chunk by chunk
			}
			continue // an unaligned tail, a file cut short: chunk by chunk
		}
		for i := r.first; i < r.first+r.n; i++ {
			placed[i] = true
		}
	}
	return placed
}

// openIndexed opens path, an indexed file, and says whether it is still the file indexed (its
// chunks' digests can be trusted unread). nil when it cannot be opened.
func (l *Local) openIndexed(path string) (f *os.File, fi os.FileInfo, trusted bool) {
	l.mu.Lock()
	id, known := l.files[path]
	l.mu.Unlock()
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, false
	}
	fi, err = f.Stat()
	return f, fi, err == nil && known && identify(fi).same(id)
}

// cloneRange reflinks n bytes of src at srcOff into dst at dstOff.
func cloneRange(dst, src *os.File, srcOff, n, dstOff int64) error {
	return unix.IoctlFileCloneRange(int(dst.Fd()), &unix.FileCloneRange{Src_fd: int64(src.Fd()),
		Src_offset: uint64(srcOff), Src_length: uint64(n), Dest_offset: uint64(dstOff)})
}

func (l *Local) placeFrom(c localChunk, sum string, want int, dst *os.File, off int64) bool {
	src, fi, trusted := l.openIndexed(c.path)
	if src == nil {
		return false
	}
	defer src.Close()
	if trusted && c.off+int64(want) <= fi.Size() {
		if cloneRange(dst, src, c.off, int64(want), off) == nil {
			return true
		}
		// No reflinks here (or an unaligned tail): copy the trusted bytes.
		buf := make([]byte, want)
		if _, err := src.ReadAt(buf, c.off); err == nil || errors.Is(err, io.EOF) {
			_, err = dst.WriteAt(buf, off)
			return err == nil
		}
	}
	buf := make([]byte, want)
	_, err := src.ReadAt(buf, c.off)
	got := sha256.Sum256(buf)
	if (err != nil && !errors.Is(err, io.EOF)) || hex.EncodeToString(got[:]) != sum {
		return false
	}
	_, err = dst.WriteAt(buf, off)
	return err == nil
}

// forget drops place c of sum (a file gone or changed).
func (l *Local) forget(sum string, c localChunk) {
	l.mu.Lock()
	defer l.mu.Unlock()
	places := slices.DeleteFunc(l.at[sum], func(p localChunk) bool { return p == c })
	if len(places) == 0 {
		delete(l.at, sum)
	} else {
		l.at[sum] = places
	}
}

// Push is the package's Push that also leaves the manifest in dir and indexes its chunks. A chunk
// whose blocks are the very blocks of the same chunk of an indexed, unchanged file of the same
// name (a snapshot's memory reflinked from its template's, minus the pages the guest wrote) takes
// that file's digest without being read (Stats.Known counts them).
func (l *Local) Push(ctx context.Context, s blob.Store, kind, name, dir string, files []string, record any) (Manifest, Stats, error) {
	return l.PushDerived(ctx, s, kind, name, dir, files, record, nil)
}

// Derived says a file being pushed is a reflink of Base (an indexed file: its digests are known)
// with only the Written runs rewritten since: a snapshot's memory image, which its runtime made
// from its base's by copying in the pages the guest wrote (runtime.SnapshotStats.Written).
type Derived struct {
	Base    string
	Written []storage.Run
}

// PushDerived is Push where some files (by path relative to dir) are Derived: their chunks outside
// the written runs take the base's digests without being read or mapped (FIEMAP flushes the file's
// dirty pages first: the pages the diff just wrote, 0.1-0.4 s of a fork's publish under load).
// Trusted only while the base is the file indexed and of the same size; else as Push.
func (l *Local) PushDerived(ctx context.Context, s blob.Store, kind, name, dir string, files []string, record any, derived map[string]Derived) (Manifest, Stats, error) {
	m, st, err := push(ctx, s, kind, name, dir, files, record, l, derived)
	if err == nil && l != nil {
		l.keep(dir, m)
	}
	return m, st, err
}

// Pull is the package's Pull taking chunks from local files where it can (Stats.Local counts
// them); it leaves the manifest in dir and indexes the pulled files (a nil Local: neither).
func (l *Local) Pull(ctx context.Context, s blob.Store, kind, name, dir string) (Manifest, Stats, error) {
	m, err := Get(ctx, s, kind, name)
	if err != nil {
		return Manifest{}, Stats{}, err
	}
	st, err := l.PullManifest(ctx, s, m, dir)
	if err != nil {
		return Manifest{}, st, err
	}
	return m, st, nil
}

// PullManifest is Pull of a manifest already read (Get), possibly cut to some of its files.
func (l *Local) PullManifest(ctx context.Context, s blob.Store, m Manifest, dir string) (Stats, error) {
	return l.pullManifest(ctx, s, m, dir, true)
}

// PullUnsynced is PullManifest without flushing each file to the disk before it is renamed into
// place: for a copy the caller pulls again when the machine went down since (its files may then
// be torn, see snapshot.Store.Pull). Flushing a pulled memory image costs a restore ~0.2 s.
func (l *Local) PullUnsynced(ctx context.Context, s blob.Store, m Manifest, dir string) (Stats, error) {
	return l.pullManifest(ctx, s, m, dir, false)
}

func (l *Local) pullManifest(ctx context.Context, s blob.Store, m Manifest, dir string, sync bool) (Stats, error) {
	st, err := pullManifest(ctx, s, m, dir, l, sync)
	if err == nil && l != nil {
		l.keep(dir, m)
	}
	return st, err
}

// keep writes m and its files' identities beside them (for AddDir after a restart) and indexes them.
func (l *Local) keep(dir string, m Manifest) {
	k := kept{Manifest: m, Files: map[string]keptFile{}}
	for _, f := range m.Files {
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path))); err == nil {
			id := identify(fi)
			k.Files[f.Path] = keptFile{id.ino, id.size, id.mtime.UnixNano()}
		}
	}
	if raw, err := json.Marshal(k); err == nil {
		os.WriteFile(filepath.Join(dir, ManifestFile), raw, 0o600)
	}
	l.Add(dir, m)
}

// derivedKnown is known for a Derived file (described by fi): the chunk size of its base and the
// digests of the base's chunks no written run touches ("" a hole, as in the base), and the base's
// artifact. false: d names no base, or the base is not indexed, changed since, or of another size.
func (l *Local) derivedKnown(d Derived, fi os.FileInfo) (cut int64, sums map[int]string, arts [][2]string, ok bool) {
	if l == nil || d.Base == "" {
		return 0, nil, nil, false
	}
	l.mu.Lock()
	id, indexed := l.files[d.Base]
	base, cut, art := l.sums[d.Base], l.cuts[d.Base], l.arts[d.Base]
	l.mu.Unlock()
	if !indexed || cut <= 0 {
		return 0, nil, nil, false
	}
	bi, err := os.Stat(d.Base)
	if err != nil || !identify(bi).same(id) || bi.Size() != fi.Size() || len(base) != chunks(fi.Size(), cut) {
		return 0, nil, nil, false
	}
	written := make([]bool, len(base))
	for _, r := range d.Written {
		if r.Len <= 0 {
			continue
		}
		if r.Off < 0 || r.Off+r.Len > fi.Size() {
			return 0, nil, nil, false // not a run of this file: trust nothing
		}
		for i := r.Off / cut; i <= (r.Off+r.Len-1)/cut; i++ {
			written[i] = true
		}
	}
	sums = map[int]string{}
	for i, sum := range base {
		if !written[i] {
			sums[i] = sum
		}
	}
	return cut, sums, [][2]string{art}, true
}

// maxBases bounds the indexed files a push compares a file's blocks with.
const maxBases = 64

// known chooses the chunk size of f (path p, described by fi) and returns the digests of its
// chunks that need no reading: a chunk with no blocks is a hole (""), a chunk mapped to exactly
// the blocks of the same chunk of an indexed file of the same name that is unchanged since indexed
// has that file's digest. Blocks name bytes on one device: a reflink shares them, and a write to
// either file moves the written range to new blocks. The chunk size is that of the indexed files
// f shares the most blocks with (its base: a snapshot's memory is cut like its template's, whose
// chunks the pulling host has), else def (or, where blocks cannot be compared, a base's). nil:
// nothing known (no FIEMAP here, no base). arts are the artifacts (kind, name) of the bases of
// that chunk size, whose manifests name the chunks known from them.
func (l *Local) known(p string, f *os.File, fi os.FileInfo, def int64) (cut int64, sums map[int]string, arts [][2]string) {
	if l == nil {
		return def, nil, nil
	}
	type base struct {
		path string
		id   fileID
		sums []string
		cut  int64
		art  [2]string
	}
	var bases []base
	l.mu.Lock()
	for bp, id := range l.files {
		if bp != p && filepath.Base(bp) == filepath.Base(p) && len(l.sums[bp]) > 0 && len(bases) < maxBases {
			bases = append(bases, base{bp, id, l.sums[bp], l.cuts[bp], l.arts[bp]})
		}
	}
	l.mu.Unlock()
	exts, err := storage.Extents(f)
	if err != nil {
		if len(bases) > 0 { // no blocks to compare: still cut like a base, whose chunks may match
			return bases[0].cut, nil, nil
		}
		return def, nil, nil
	}
	var ms []mappedBase
	cuts := []int64{def}
	for _, b := range bases {
		if m, ok := mapBase(b.path, b.id, b.sums, b.cut, fi); ok {
			m.art = b.art
			ms = append(ms, m)
			if !slices.Contains(cuts, b.cut) {
				cuts = append(cuts, b.cut)
			}
		}
	}
	bestShared := int64(-1)
	for _, cs := range cuts {
		out, shared := knownIn(exts, ms, fi.Size(), cs)
		if shared > bestShared {
			cut, sums, bestShared = cs, out, shared
		}
	}
	for _, m := range ms {
		if m.cut == cut && !slices.Contains(arts, m.art) {
			arts = append(arts, m.art)
		}
	}
	return cut, sums, arts
}

// knownIn is known for one chunk size cs: the digests known and the bytes they take from bases.
func knownIn(exts []storage.Extent, ms []mappedBase, size, cs int64) (map[int]string, int64) {
	out := map[int]string{}
	var shared int64
	for i := range chunks(size, cs) {
		off, want := uint64(i)*uint64(cs), uint64(chunkLen(size, cs, i))
		mine := storage.ExtentsIn(exts, off, want)
		if len(mine) == 0 {
			out[i] = ""
			continue
		}
		if !reliable(mine) {
			continue
		}
		for _, m := range ms {
			if m.cut == cs && i < len(m.sums) && int64(off+want) <= m.size && uint64(chunkLen(m.size, cs, i)) == want &&
				slices.Equal(mine, storage.ExtentsIn(m.exts, off, want)) {
				out[i] = m.sums[i]
				shared += int64(want)
				break
			}
		}
	}
	return out, shared
}

// mappedBase is an indexed file's digests, chunk size and blocks.
type mappedBase struct {
	sums []string
	art  [2]string
	cut  int64
	size int64
	exts []storage.Extent
}

// mapBase maps the blocks of indexed file p if it is unchanged since indexed (id) and on the
// device of the file being pushed (fi).
func mapBase(p string, id fileID, sums []string, cut int64, fi os.FileInfo) (mappedBase, bool) {
	b, err := os.Open(p)
	if err != nil {
		return mappedBase{}, false
	}
	defer b.Close()
	bi, err := b.Stat()
	if err != nil || !identify(bi).same(id) || device(bi) != device(fi) {
		return mappedBase{}, false
	}
	exts, err := storage.Extents(b)
	if err != nil {
		return mappedBase{}, false
	}
	return mappedBase{sums: sums, cut: cut, size: bi.Size(), exts: exts}, true
}

func reliable(exts []storage.Extent) bool {
	for _, e := range exts {
		if !e.Reliable() {
			return false
		}
	}
	return true
}

func device(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Dev
	}
	return 0
}
