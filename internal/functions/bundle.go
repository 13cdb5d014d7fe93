package functions

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// Bundle limits.
const (
	MaxBundleBytes   = 32 << 20  // the archive as uploaded
	MaxUnpackedBytes = 256 << 20 // its files, unpacked
	MaxBundleEntries = 20000
)

// file is one regular file or directory of a bundle.
type file struct {
	name string // clean, relative, "/"-separated
	dir  bool
	mode int64
	data []byte
}

// readBundle reads a .zip or .tar.gz archive into its files, refusing what is not an archive,
// too large, or unsafe (absolute paths, "..", links, devices). Problems are errdefs.Invalid
// (or TooLarge) naming them.
func readBundle(b []byte) ([]file, error) {
	switch {
	case len(b) > MaxBundleBytes:
		return nil, errdefs.New(errdefs.TooLarge, "bundle is %d bytes; the limit is %d (32 MiB)", len(b), MaxBundleBytes)
	case bytes.HasPrefix(b, []byte("PK\x03\x04")) || bytes.HasPrefix(b, []byte("PK\x05\x06")):
		return readZip(b)
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return readTarGz(b)
	}
	return nil, errdefs.Invalidf("bundle is not a .zip or .tar.gz archive")
}

type collector struct {
	files []file
	total int64
	seen  map[string]bool
}

func (c *collector) add(name string, dir bool, mode int64, r io.Reader) error {
	clean := path.Clean(strings.TrimPrefix(strings.ReplaceAll(name, "\\", "/"), "./"))
	switch {
	case strings.HasPrefix(name, "/") || clean == ".." || strings.HasPrefix(clean, "../"):
		return errdefs.Invalidf("bundle entry %q leaves the bundle (absolute or ..)", trunc(name))
	case clean == ".":
		return nil
	case len(c.files) >= MaxBundleEntries:
		return errdefs.Invalidf("bundle has more than %d entries", MaxBundleEntries)
	case c.seen[clean]:
		return nil
	}
	f := file{name: clean, dir: dir, mode: mode & 0o755}
	if !dir {
		lr := io.LimitReader(r, MaxUnpackedBytes-c.total+1)
		data, err := io.ReadAll(lr)
		if err != nil {
			return errdefs.Invalidf("bundle entry %q cannot be read: %v", trunc(name), err)
		}
		c.total += int64(len(data))
		if c.total > MaxUnpackedBytes {
			return errdefs.New(errdefs.TooLarge, "bundle unpacks to more than %d bytes (256 MiB)", MaxUnpackedBytes)
		}
		f.data = data
	}
	c.seen[clean] = true
	c.files = append(c.files, f)
	return nil
}

func readZip(b []byte) ([]file, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, errdefs.Invalidf("bundle is not a valid .zip archive: %v", err)
	}
	c := &collector{seen: map[string]bool{}}
	for _, zf := range zr.File {
		mode := zf.Mode()
		if mode.Type() != 0 && !mode.IsDir() { // symlinks, devices, …
			return nil, errdefs.Invalidf("bundle entry %q is not a regular file or directory", trunc(zf.Name))
		}
		var r io.Reader
		if !mode.IsDir() {
			rc, err := zf.Open()
			if err != nil {
				return nil, errdefs.Invalidf("bundle entry %q cannot be read: %v", trunc(zf.Name), err)
			}
			defer rc.Close()
			r = rc
		}
		if err := c.add(zf.Name, mode.IsDir(), int64(mode.Perm()), r); err != nil {
			return nil, err
		}
	}
	return c.files, nil
}

func readTarGz(b []byte) ([]file, error) {
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, errdefs.Invalidf("bundle is not a valid .tar.gz archive: %v", err)
	}
	tr := tar.NewReader(gz)
	c := &collector{seen: map[string]bool{}}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errdefs.Invalidf("bundle is not a valid .tar.gz archive: %v", err)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeXGlobalHeader:
			continue
		default:
			return nil, errdefs.Invalidf("bundle entry %q is not a regular file or directory", trunc(h.Name))
		}
		if err := c.add(h.Name, h.Typeflag == tar.TypeDir, h.Mode, tr); err != nil {
			return nil, err
		}
	}
	if len(c.files) == 0 {
		return nil, errdefs.Invalidf("bundle is empty")
	}
	return c.files, nil
}

// handlerFiles are the files that can hold a handler's module, first match wins.
func handlerFiles(runtime, handler string) []string {
	mod, _, _ := strings.Cut(handler, ".")
	if i := strings.LastIndex(handler, "."); i > 0 {
		mod = handler[:i]
	}
	switch runtime {
	case "python3":
		p := strings.ReplaceAll(mod, ".", "/")
		return []string{p + ".py", p + "/__init__.py"}
	default:
		return []string{mod + ".mjs", mod + ".js", mod + ".cjs"}
	}
}

// checkHandler says which file of the bundle holds the handler's module, or an error naming the
// files it looked for.
func checkHandler(files []file, runtime, handler string) error {
	want := handlerFiles(runtime, handler)
	for _, f := range files {
		for _, w := range want {
			if !f.dir && f.name == w {
				return nil
			}
		}
	}
	return errdefs.Invalidf("handler %q needs %s at the top level of the bundle; it has none", handler, strings.Join(want, " or "))
}

// normalise writes files as one uncompressed tar (what the bake unpacks in the VM), adding
// extra files (e.g. a package.json) that the bundle lacks.
func normalise(files []file, extra map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(0, 0)
	for name, content := range extra {
		files = append(files, file{name: name, mode: 0o644, data: []byte(content)})
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode | 0o644, Size: int64(len(f.data)), ModTime: mt, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if f.dir {
			h = &tar.Header{Name: f.name + "/", Mode: 0o755, ModTime: mt, Typeflag: tar.TypeDir, Format: tar.FormatPAX}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func hasFile(files []file, name string) bool {
	for _, f := range files {
		if f.name == name && !f.dir {
			return true
		}
	}
	return false
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
