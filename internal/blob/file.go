package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// fileStore keeps each object as a file under root: key a/b/c is root/a/b/c. A Put writes a
// temporary file beside the target and renames it over, so readers never see a part.
type fileStore struct{ root string }

// tmpPrefix marks a Put in progress; List never shows such files, and no valid key segment
// can be confused with one because a Put only ever creates them beside the target.
const tmpPrefix = ".put-"

// OpenFile returns a store of files under dir (created if missing).
func OpenFile(dir string) (Store, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, errdefs.Invalidf("file blob store needs an absolute directory, not %q", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &fileStore{root: filepath.Clean(dir)}, nil
}

func (s *fileStore) String() string { return "file://" + s.root }

func (s *fileStore) smallObjectsCheap() bool { return true }

func (s *fileStore) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	if strings.HasPrefix(filepath.Base(key), tmpPrefix) {
		return "", errdefs.Invalidf("blob key %q: a last segment may not start with %q", key, tmpPrefix)
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

func (s *fileStore) Put(ctx context.Context, key string, body io.ReadSeeker) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return err
	}
	f, err := s.createTemp(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if err := writeBody(ctx, f, body); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// createTemp makes a temporary file in dir, making dir first; it tries twice because a Delete
// may remove dir, left empty, between the two steps.
func (s *fileStore) createTemp(dir string) (f *os.File, err error) {
	for range 2 {
		if err = os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if f, err = os.CreateTemp(dir, tmpPrefix+"*"); !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	return nil, err
}

func (s *fileStore) open(key string) (*os.File, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFound(key)
	}
	if err == nil {
		if st, serr := f.Stat(); serr == nil && st.IsDir() {
			f.Close()
			return nil, notFound(key)
		}
	}
	return f, err
}

func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.open(key)
}

func (s *fileStore) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || length < 0 {
		return nil, errdefs.Invalidf("blob %s: range %d+%d is negative", key, offset, length)
	}
	f, err := s.open(key)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, offset, length), f}, nil
}

func (s *fileStore) Stat(ctx context.Context, key string) (Info, error) {
	f, err := s.open(key)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	return Info{Key: key, Size: st.Size(), Modified: st.ModTime()}, nil
}

func (s *fileStore) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	// Walk only the deepest directory the prefix names whole.
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		start = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
	}
	var found []Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), tmpPrefix) {
			return ctx.Err()
		}
		rel, _ := filepath.Rel(s.root, p)
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		found = append(found, Info{Key: key, Size: st.Size(), Modified: st.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Key < found[j].Key })
	for _, in := range found {
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

func (s *fileStore) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Drop directories the delete left empty, up to the root (best effort: a concurrent Put
	// may have refilled one, and then Remove fails harmlessly).
	for dir := filepath.Dir(p); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// writeBody writes body to f: a body in memory (a chunk) in one write, any other in steps that
// stop when ctx ends (through io.Copy's 32 KiB buffer: a 256 KiB chunk took 8 writes).
func writeBody(ctx context.Context, f *os.File, body io.Reader) error {
	if b, ok := body.(*bytes.Reader); ok {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := b.WriteTo(f)
		return err
	}
	_, err := io.Copy(f, readerWithContext{ctx, body})
	return err
}

// readerWithContext stops a copy when ctx ends.
type readerWithContext struct {
	ctx context.Context
	r   io.Reader
}

func (r readerWithContext) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
