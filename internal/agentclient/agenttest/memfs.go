package agenttest

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// memFS is a fake guest's file tree: file contents and directories by absolute, clean path. Its
// methods answer with the real agent's error codes for the same mistakes (a directory read as a
// file is invalid_request, a full directory removed without recursive is a conflict…). No owners,
// permissions, symlinks or times.
type memFS struct {
	files map[string][]byte
	dirs  map[string]bool
}

// newFS is the tree of a fresh guest: the default user's home (the default cwd) and /tmp.
func newFS() *memFS {
	f := &memFS{files: map[string][]byte{}, dirs: map[string]bool{"/": true}}
	f.mkdirs("/home/user")
	f.mkdirs("/tmp")
	return f
}

func (f *memFS) clone() *memFS {
	out := &memFS{files: make(map[string][]byte, len(f.files)), dirs: maps.Clone(f.dirs)}
	for p, b := range f.files {
		out.files[p] = slices.Clone(b)
	}
	return out
}

// absPath is the clean form of an absolute path p (false: p is empty or relative).
func absPath(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	return path.Clean(p), true
}

func pathArg(p string) (string, *agentclient.Error) {
	if cp, ok := absPath(p); ok {
		return cp, nil
	}
	return "", invalid("path %q must be absolute", p)
}

func (f *memFS) stat(p string) (agentclient.Stat, bool) {
	st := agentclient.Stat{Name: path.Base(p), Path: p, MTime: "2026-01-01T00:00:00Z"}
	if b, ok := f.files[p]; ok {
		st.Type, st.Size, st.Mode = "file", int64(len(b)), "0644"
		return st, true
	}
	if f.dirs[p] {
		st.Type, st.Mode = "dir", "0755"
		return st, true
	}
	return agentclient.Stat{}, false
}

func (f *memFS) isFile(p string) bool { _, ok := f.files[p]; return ok }
func (f *memFS) exists(p string) bool { return f.dirs[p] || f.isFile(p) }

// under lists p's entries (files and directories, any depth), sorted.
func (f *memFS) under(p string) []string {
	var out []string
	for _, m := range []map[string]bool{f.dirs, boolKeys(f.files)} {
		for q := range m {
			if strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
				out = append(out, q)
			}
		}
	}
	slices.Sort(out)
	return out
}

func boolKeys[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// parentsOK reports a file where one of p's parents should be (ENOTDIR on a real guest).
func (f *memFS) parentsOK(p string) *agentclient.Error {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if f.isFile(d) {
			return invalid("%s is not a directory", d)
		}
	}
	return nil
}

// mkdirs makes p and its parents (parentsOK checked).
func (f *memFS) mkdirs(p string) {
	for ; p != "/"; p = path.Dir(p) {
		f.dirs[p] = true
	}
}

func (f *memFS) mkdir(p string) *agentclient.Error {
	if f.isFile(p) {
		return conflict("%s exists and is not a directory", p)
	}
	if err := f.parentsOK(p); err != nil {
		return err
	}
	f.mkdirs(p)
	return nil
}

func (f *memFS) read(p string) ([]byte, *agentclient.Error) {
	if f.dirs[p] {
		return nil, invalid("%s is a directory", p)
	}
	b, ok := f.files[p]
	if !ok {
		return nil, notFound("no such file: %s", p)
	}
	return b, nil
}

// write replaces p's content, making its parents.
func (f *memFS) write(p string, b []byte) *agentclient.Error {
	if f.dirs[p] {
		return invalid("%s is a directory", p)
	}
	if err := f.parentsOK(p); err != nil {
		return err
	}
	f.mkdirs(path.Dir(p))
	f.files[p] = b
	return nil
}

// list walks directory p depth levels down: each directory's entries by name, a directory
// followed by its own entries (the real agent's order).
func (f *memFS) list(p string, depth int) ([]agentclient.Stat, *agentclient.Error) {
	if f.isFile(p) {
		return nil, invalid("%s is not a directory", p)
	}
	if !f.dirs[p] {
		return nil, notFound("no such directory: %s", p)
	}
	out := []agentclient.Stat{}
	var walk func(dir string, level int)
	walk = func(dir string, level int) {
		for _, q := range f.under(dir) {
			if path.Dir(q) != dir {
				continue
			}
			st, _ := f.stat(q)
			out = append(out, st)
			if st.Type == "dir" && level < depth {
				walk(q, level+1)
			}
		}
	}
	walk(p, 1)
	return out, nil
}

func (f *memFS) remove(p string, recursive bool) *agentclient.Error {
	switch {
	case p == "/":
		return invalid("refusing to remove /")
	case !f.exists(p):
		return notFound("no such file: %s", p)
	case len(f.under(p)) > 0 && f.dirs[p] && !recursive:
		return conflict("directory %s is not empty", p)
	}
	for _, q := range append(f.under(p), p) {
		delete(f.files, q)
		delete(f.dirs, q)
	}
	return nil
}

// move renames a file or a directory tree like rename(2): to's parent must exist, a file does
// not replace a directory nor a directory a file, and a directory replaces only an empty one.
func (f *memFS) move(from, to string) *agentclient.Error {
	switch {
	case from == "/" || to == "/":
		return invalid("cannot move /")
	case !f.exists(from):
		return notFound("no such file: %s", from)
	case from == to:
		return nil
	case strings.HasPrefix(to, from+"/"):
		return invalid("cannot move %s into itself", from)
	}
	if err := f.parentsOK(to); err != nil {
		return err
	}
	if !f.dirs[path.Dir(to)] {
		return notFound("no such directory: %s", path.Dir(to))
	}
	switch {
	case f.dirs[to] && !f.dirs[from], f.isFile(to) && f.dirs[from]:
		return invalid("cannot move %s over %s", from, to)
	case f.dirs[to] && len(f.under(to)) > 0:
		return conflict("directory %s is not empty", to)
	}
	delete(f.dirs, to)
	for _, q := range append(f.under(from), from) {
		nq := to + strings.TrimPrefix(q, from)
		if b, ok := f.files[q]; ok {
			f.files[nq] = b
			delete(f.files, q)
		} else {
			f.dirs[nq] = true
			delete(f.dirs, q)
		}
	}
	return nil
}
