package agenttest

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
)

// memFS is a fake guest's file tree: every file and directory by absolute, clean path. Its
// methods answer the real agent's error codes for the same mistakes (a directory read as a file
// is invalid_request, a full directory removed without recursive is a conflict…). No owners,
// permissions, symlinks or times.
type memFS map[string]node

type node struct {
	dir  bool
	data []byte
}

// newFS is the tree of a fresh guest: the default user's home (the default cwd) and /tmp.
func newFS() memFS {
	f := memFS{"/": {dir: true}}
	f.mkdirs("/home/user")
	f.mkdirs("/tmp")
	return f
}

// clone copies the tree; contents are never changed in place, so they are shared.
func (f memFS) clone() memFS { return maps.Clone(f) }

func (f memFS) isDir(p string) bool  { return f[p].dir }
func (f memFS) isFile(p string) bool { n, ok := f[p]; return ok && !n.dir }

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

func (f memFS) stat(p string) (agentclient.Stat, bool) {
	n, ok := f[p]
	st := agentclient.Stat{Name: path.Base(p), Path: p, Type: "file", Size: int64(len(n.data)), Mode: "0644", MTime: "2026-01-01T00:00:00Z"}
	if n.dir {
		st.Type, st.Mode = "dir", "0755"
	}
	return st, ok
}

// under lists what is below directory p, at any depth, sorted.
func (f memFS) under(p string) []string {
	var out []string
	for q := range f {
		if strings.HasPrefix(q, strings.TrimSuffix(p, "/")+"/") {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}

// parentsOK reports a file where one of p's parents should be (ENOTDIR on a real guest).
func (f memFS) parentsOK(p string) *agentclient.Error {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if f.isFile(d) {
			return invalid("%s is not a directory", d)
		}
	}
	return nil
}

// mkdirs makes p and its parents (parentsOK checked).
func (f memFS) mkdirs(p string) {
	for ; p != "/"; p = path.Dir(p) {
		f[p] = node{dir: true}
	}
}

func (f memFS) mkdir(p string) *agentclient.Error {
	if f.isFile(p) {
		return conflict("%s exists and is not a directory", p)
	}
	err := f.parentsOK(p)
	if err == nil {
		f.mkdirs(p)
	}
	return err
}

func (f memFS) read(p string) ([]byte, *agentclient.Error) {
	switch n, ok := f[p]; {
	case !ok:
		return nil, notFound("no such file: %s", p)
	case n.dir:
		return nil, invalid("%s is a directory", p)
	}
	return append([]byte{}, f[p].data...), nil
}

// write replaces p's content, making its parents.
func (f memFS) write(p string, b []byte) *agentclient.Error {
	err := f.parentsOK(p)
	if f.isDir(p) {
		err = invalid("%s is a directory", p)
	}
	if err == nil {
		f.mkdirs(path.Dir(p))
		f[p] = node{data: b}
	}
	return err
}

// list walks directory p depth levels down: each directory's entries by name, a directory
// followed by its own entries (the real agent's order).
func (f memFS) list(p string, depth int) ([]agentclient.Stat, *agentclient.Error) {
	if n, ok := f[p]; !ok || !n.dir {
		return nil, f.notDir(p)
	}
	out := []agentclient.Stat{}
	var walk func(dir string, level int)
	walk = func(dir string, level int) {
		for _, q := range f.under(dir) {
			if path.Dir(q) == dir {
				st, _ := f.stat(q)
				out = append(out, st)
				if st.Type == "dir" && level < depth {
					walk(q, level+1)
				}
			}
		}
	}
	walk(p, 1)
	return out, nil
}

// notDir is the error for p where a directory is needed.
func (f memFS) notDir(p string) *agentclient.Error {
	if f.isFile(p) {
		return invalid("%s is not a directory", p)
	}
	return notFound("no such directory: %s", p)
}

func (f memFS) remove(p string, recursive bool) *agentclient.Error {
	switch _, ok := f[p]; {
	case p == "/":
		return invalid("refusing to remove /")
	case !ok:
		return notFound("no such file: %s", p)
	case len(f.under(p)) > 0 && f.isDir(p) && !recursive:
		return conflict("directory %s is not empty", p)
	}
	for _, q := range append(f.under(p), p) {
		delete(f, q)
	}
	return nil
}

// move renames a file or a directory tree like rename(2): to's parent must exist, a file does
// not replace a directory nor a directory a file, and a directory replaces only an empty one.
func (f memFS) move(from, to string) *agentclient.Error {
	src, ok := f[from]
	dst, exists := f[to]
	switch {
	case from == "/" || to == "/":
		return invalid("cannot move /")
	case !ok:
		return notFound("no such file: %s", from)
	case from == to:
		return nil
	case strings.HasPrefix(to, from+"/"):
		return invalid("cannot move %s into itself", from)
	case !f.isDir(path.Dir(to)):
		return f.notDir(path.Dir(to))
	case exists && src.dir != dst.dir:
		return invalid("cannot move %s over %s", from, to)
	case exists && len(f.under(to)) > 0:
		return conflict("directory %s is not empty", to)
	}
	for _, q := range append(f.under(from), from) {
		f[to+strings.TrimPrefix(q, from)] = f[q]
		delete(f, q)
	}
	return nil
}
