// Package lazy serves an artifact's files from a blob store before they are local: a read-only
// FUSE filesystem whose reads come from a per-host chunk cache, filled on first touch. QEMU maps
// a lazily served memory file (MAP_PRIVATE) and restores at once; the guest faults pages in on
// demand, and the kernel's page cache of that file is shared by every VM restored from it.
//
// Invariants: every chunk is verified (length and sha256) before it enters the cache, and the
// cache holds only verified chunks (written aside, renamed in); a read of a chunk that cannot be
// fetched or verified fails with EIO — wrong bytes are never served. All-zero chunks are holes:
// served as zeros, never fetched. The order in which chunks were first touched is recorded, so a
// later restore can prefetch in that order.
//
// Caveat for callers: a process that maps a served file gets SIGBUS on an untouched page once the
// server stops. Unmount only after every such process is gone, or pull the file whole first.
package lazy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
)

// Cache is a host's store of verified chunks, shared by every mount on the host.
type Cache struct {
	dir   string
	store blob.Store

	mu       sync.Mutex
	inflight map[string]*fetch

	// Local, if set, is this host's index of chunks in its own files: a chunk found there is
	// cloned into the cache instead of fetched (a snapshot's memory is mostly its template's).
	Local *artifact.Local

	// Fetched counts chunks fetched from the store (not found in the cache); Placed those taken
	// from this host's files.
	Fetched, Placed atomic.Int64
}

type fetch struct {
	done chan struct{}
	err  error
}

// NewCache keeps chunks under dir (created if missing), fetched from store.
func NewCache(dir string, store blob.Store) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Cache{dir: dir, store: store, inflight: map[string]*fetch{}}, nil
}

// Dir is where the cache keeps chunks.
func (c *Cache) Dir() string { return c.dir }

func (c *Cache) path(sum string) string { return filepath.Join(c.dir, sum) }

// Ensure makes chunk sum (size bytes) present in the cache and returns its path; concurrent
// calls for one chunk fetch it once.
func (c *Cache) Ensure(ctx context.Context, sum string, size int) (string, error) {
	p := c.path(sum)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	c.mu.Lock()
	f, ok := c.inflight[sum]
	if !ok {
		f = &fetch{done: make(chan struct{})}
		c.inflight[sum] = f
		go func() {
			f.err = c.fetch(context.WithoutCancel(ctx), sum, size)
			c.mu.Lock()
			delete(c.inflight, sum)
			c.mu.Unlock()
			close(f.done)
		}()
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return p, f.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *Cache) fetch(ctx context.Context, sum string, size int) error {
	tmp, err := os.CreateTemp(c.dir, ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if c.Local.Place(sum, size, tmp, 0) {
		if err := tmp.Close(); err != nil {
			return err
		}
		c.Placed.Add(1)
		return os.Rename(tmp.Name(), c.path(sum))
	}
	buf, err := artifact.FetchChunk(ctx, c.store, sum, size)
	if err != nil {
		tmp.Close()
		return fmt.Errorf("chunk %s: %w", sum, err)
	}
	if _, err := tmp.Write(buf); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	c.Fetched.Add(1)
	return os.Rename(tmp.Name(), c.path(sum))
}

// Mount is one artifact served at a directory.
type Mount struct {
	Dir    string
	server *fuse.Server
	cache  *Cache
	name   string
	log    func(string, ...any)

	traceMu sync.Mutex
	touched map[string]bool
	trace   []Touch
}

// Touch names a chunk by file and index.
type Touch struct {
	Path  string `json:"path"`
	Chunk int    `json:"chunk"`
}

// Serve mounts m's files read-only at dir (which must exist and be empty). Files are readable by
// every user (the VMM runs as its own unprivileged user); the mount is private to this host.
// logf, if set, is told about failed reads.
func Serve(dir string, m artifact.Manifest, cache *Cache, logf func(string, ...any)) (*Mount, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mt := &Mount{Dir: dir, cache: cache, name: m.Kind + "/" + m.Name, log: logf, touched: map[string]bool{}}
	root := &dirNode{}
	root.build = func(ctx context.Context) {
		for _, f := range m.Files {
			parent := &root.Inode
			parts := strings.Split(f.Path, "/")
			for _, d := range parts[:len(parts)-1] {
				ch := parent.GetChild(d)
				if ch == nil {
					ch = parent.NewPersistentInode(ctx, &fusefs.Inode{}, fusefs.StableAttr{Mode: syscall.S_IFDIR})
					parent.AddChild(d, ch, true)
				}
				parent = ch
			}
			parent.AddChild(parts[len(parts)-1], parent.NewPersistentInode(ctx, &fileNode{m: mt, f: f}, fusefs.StableAttr{}), true)
		}
	}
	timeout := time.Hour // the files never change: let the kernel keep attributes and names
	srv, err := fusefs.Mount(dir, root, &fusefs.Options{
		AttrTimeout:  &timeout,
		EntryTimeout: &timeout,
		MountOptions: fuse.MountOptions{
			FsName: "pandastack-" + m.Kind, Name: "pandastack", DirectMount: true, DirectMountStrict: true,
			AllowOther: true, MaxReadAhead: artifact.ChunkSize / 4,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("serve %s at %s: %w", mt.name, dir, err)
	}
	mt.server = srv
	return mt, nil
}

// Close unmounts. See the package caveat: nothing may still map a served file.
func (m *Mount) Close() error {
	err := m.server.Unmount()
	m.server.Wait()
	return err
}

// Trace is the order in which chunks were first read.
func (m *Mount) Trace() []Touch {
	m.traceMu.Lock()
	defer m.traceMu.Unlock()
	return append([]Touch(nil), m.trace...)
}

func (m *Mount) traceLen() int {
	m.traceMu.Lock()
	defer m.traceMu.Unlock()
	return len(m.trace)
}

func (m *Mount) touch(path string, i int) {
	key := fmt.Sprintf("%s#%d", path, i)
	m.traceMu.Lock()
	if !m.touched[key] {
		m.touched[key] = true
		m.trace = append(m.trace, Touch{Path: path, Chunk: i})
	}
	m.traceMu.Unlock()
}

// Prefetch fetches the chunks named by order (a Trace from an earlier restore) into the cache,
// `parallel` at a time, in that order; it returns when all are cached or ctx ends.
func Prefetch(ctx context.Context, c *Cache, m artifact.Manifest, order []Touch, parallel int) error {
	files := map[string]artifact.File{}
	for _, f := range m.Files {
		files[f.Path] = f
	}
	work := make(chan Touch)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				f := files[t.Path]
				if t.Chunk < 0 || t.Chunk >= len(f.Chunks) || f.Chunks[t.Chunk] == "" {
					continue
				}
				if _, err := c.Ensure(ctx, f.Chunks[t.Chunk], f.Len(t.Chunk)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, t := range order {
		select {
		case work <- t:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

type dirNode struct {
	fusefs.Inode
	build func(context.Context)
}

func (d *dirNode) OnAdd(ctx context.Context) { d.build(ctx) }

type fileNode struct {
	fusefs.Inode
	m *Mount
	f artifact.File
}

var (
	_ fusefs.NodeWriter    = (*fileNode)(nil)
	_ fusefs.NodeSetattrer = (*fileNode)(nil)
	_ fusefs.NodeOpener    = (*fileNode)(nil)
	_ fusefs.NodeReader    = (*fileNode)(nil)
	_ fusefs.NodeGetattrer = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, fh fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = uint64(n.f.Size)
	out.Blocks = (out.Size + 511) / 512
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	// QEMU opens its memory file read-write even to map it privately (copy-on-write: nothing
	// reaches the file), so read-write opens are let through and every write is refused.
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY || flags&(syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	// The content never changes: the kernel may keep its page cache across opens.
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

// Write is refused: the files are an artifact's, immutable.
func (n *fileNode) Write(ctx context.Context, fh fusefs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}

// Setattr (chmod, chown, truncate) is refused likewise.
func (n *fileNode) Setattr(ctx context.Context, fh fusefs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (n *fileNode) Read(ctx context.Context, fh fusefs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= n.f.Size {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), n.f.Size)
	out := dest[:end-off]
	for pos := off; pos < end; {
		cs := n.f.Chunk()
		i := int(pos / cs)
		in := pos - n.f.Off(i)
		take := min(end-pos, cs-in)
		part := out[pos-off : pos-off+take]
		n.m.touch(n.f.Path, i)
		if err := n.readChunk(ctx, i, in, part); err != nil {
			n.m.log("lazy read failed", "artifact", n.m.name, "file", n.f.Path, "chunk", i, "err", err)
			return nil, syscall.EIO
		}
		pos += take
	}
	return fuse.ReadResultData(out), 0
}

func (n *fileNode) readChunk(ctx context.Context, i int, off int64, dest []byte) error {
	sum := n.f.Chunks[i]
	if sum == "" {
		clear(dest)
		return nil
	}
	p, err := n.m.cache.Ensure(ctx, sum, n.f.Len(i))
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(dest, off)
	return err
}
