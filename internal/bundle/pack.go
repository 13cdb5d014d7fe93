package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// Pack writes the directory dir as a .tar.gz bundle, leaving out .git and what the directory's
// .gitignore files ignore; more than MaxBytes (compressed) is errdefs.TooLarge.
func Pack(dir string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	ign := &ignorer{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return ign.load(dir, "")
		}
		if d.Name() == ".git" || ign.ignored(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := ign.load(p, rel); err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: info.ModTime()})
		case !info.Mode().IsRegular():
			return nil // links, sockets: not part of a bundle
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Size: int64(len(data)), Typeflag: tar.TypeReg,
			ModTime: info.ModTime()}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
		if buf.Len() > MaxBytes {
			return errdefs.New(errdefs.TooLarge, "%s packs to more than %d bytes (32 MiB): add build outputs and dependencies to .gitignore", dir, MaxBytes)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > MaxBytes {
		return nil, errdefs.New(errdefs.TooLarge, "%s packs to more than %d bytes (32 MiB): add build outputs and dependencies to .gitignore", dir, MaxBytes)
	}
	return buf.Bytes(), nil
}

// ignorer holds the .gitignore rules seen so far (git's common forms: comments, !negation,
// a trailing / for directories, a / anchoring to the file's directory, *, ? and **).
type ignorer struct{ rules []rule }

type rule struct {
	base    string // the directory of the .gitignore, relative ("" at the top)
	pattern string
	negate  bool
	dirOnly bool
	anchor  bool
}

func (g *ignorer) load(dir, rel string) error {
	b, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, " \r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := rule{base: rel}
		if strings.HasPrefix(line, "!") {
			r.negate, line = true, line[1:]
		}
		if strings.HasSuffix(line, "/") {
			r.dirOnly, line = true, strings.TrimSuffix(line, "/")
		}
		if strings.Contains(line, "/") {
			r.anchor, line = true, strings.TrimPrefix(line, "/")
		}
		r.pattern = line
		g.rules = append(g.rules, r)
	}
	return nil
}

// ignored says whether the path rel (from the top) is ignored; the last matching rule wins.
func (g *ignorer) ignored(rel string, dir bool) bool {
	out := false
	for _, r := range g.rules {
		sub := rel
		if r.base != "" {
			var ok bool
			if sub, ok = strings.CutPrefix(rel, r.base+"/"); !ok {
				continue
			}
		}
		if r.dirOnly && !dir {
			continue
		}
		if r.match(sub) {
			out = !r.negate
		}
	}
	return out
}

func (r rule) match(sub string) bool {
	if !r.anchor {
		return globMatch(r.pattern, path.Base(sub))
	}
	return globMatch(r.pattern, sub)
}

// globMatch matches name against pattern, where ** spans directories.
func globMatch(pattern, name string) bool {
	if !strings.Contains(pattern, "**") {
		ok, _ := path.Match(pattern, name)
		return ok
	}
	pre, post, _ := strings.Cut(pattern, "**")
	pre = strings.TrimSuffix(pre, "/")
	post = strings.TrimPrefix(post, "/")
	if pre != "" {
		parts := strings.Split(name, "/")
		for i := 1; i <= len(parts); i++ {
			if ok, _ := path.Match(pre, strings.Join(parts[:i], "/")); ok {
				rest := strings.Join(parts[i:], "/")
				if post == "" || globTail(post, rest) {
					return true
				}
			}
		}
		return false
	}
	return post == "" || globTail(post, name)
}

// globTail says whether some suffix of name (at a / boundary) matches pattern.
func globTail(pattern, name string) bool {
	parts := strings.Split(name, "/")
	for i := range parts {
		if globMatch(pattern, strings.Join(parts[i:], "/")) {
			return true
		}
	}
	return false
}
