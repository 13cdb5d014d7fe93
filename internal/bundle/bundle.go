// Package bundle reads uploaded code archives (.zip or .tar.gz) safely — size limits, no
// absolute paths, "..", links or devices — and writes their files out again as one plain tar
// (what a sandbox unpacks). Functions' deploys and apps' tarball deploys use it.
package bundle

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

// Limits of a bundle.
const (
	MaxBytes         = 32 << 20  // the archive as uploaded
	MaxUnpackedBytes = 256 << 20 // its files, unpacked
	MaxEntries       = 20000
)

// File is one regular file or directory of a bundle.
type File struct {
	Name string // clean, relative, "/"-separated
	Dir  bool
	Mode int64
	Data []byte
}

// Read reads a .zip or .tar.gz archive into its files, refusing what is not an archive,
// too large, or unsafe (absolute paths, "..", links, devices). Problems are errdefs.Invalid
// (or TooLarge) naming them.
func Read(b []byte) ([]File, error) {
	switch {
	case len(b) > MaxBytes:
		return nil, errdefs.New(errdefs.TooLarge, "bundle is %d bytes; the limit is %d (32 MiB)", len(b), MaxBytes)
	case bytes.HasPrefix(b, []byte("PK\x03\x04")) || bytes.HasPrefix(b, []byte("PK\x05\x06")):
		return readZip(b)
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return readTarGz(b)
	}
	return nil, errdefs.Invalidf("bundle is not a .zip or .tar.gz archive")
}

type collector struct {
	files []File
	total int64
	seen  map[string]bool
}

func (c *collector) add(name string, dir bool, mode int64, r io.Reader) error {
	clean := path.Clean(strings.TrimPrefix(strings.ReplaceAll(name, "\\", "/"), "./"))
	switch {
	case strings.HasPrefix(name, "/") || clean == ".." || strings.HasPrefix(clean, "../"):
		return errdefs.Invalidf("bundle entry %q leaves the bundle (absolute or ..)", Trunc(name))
	case clean == ".":
		return nil
	case len(c.files) >= MaxEntries:
		return errdefs.Invalidf("bundle has more than %d entries", MaxEntries)
	case c.seen[clean]:
		return nil
	}
	f := File{Name: clean, Dir: dir, Mode: mode & 0o755}
	if !dir {
		lr := io.LimitReader(r, MaxUnpackedBytes-c.total+1)
		data, err := io.ReadAll(lr)
		if err != nil {
			return errdefs.Invalidf("bundle entry %q cannot be read: %v", Trunc(name), err)
		}
		c.total += int64(len(data))
		if c.total > MaxUnpackedBytes {
			return errdefs.New(errdefs.TooLarge, "bundle unpacks to more than %d bytes (256 MiB)", MaxUnpackedBytes)
		}
		f.Data = data
	}
	c.seen[clean] = true
	c.files = append(c.files, f)
	return nil
}

func readZip(b []byte) ([]File, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, errdefs.Invalidf("bundle is not a valid .zip archive: %v", err)
	}
	c := &collector{seen: map[string]bool{}}
	for _, zf := range zr.File {
		mode := zf.Mode()
		if mode.Type() != 0 && !mode.IsDir() { // symlinks, devices, …
			return nil, errdefs.Invalidf("bundle entry %q is not a regular file or directory", Trunc(zf.Name))
		}
		var r io.Reader
		if !mode.IsDir() {
			rc, err := zf.Open()
			if err != nil {
				return nil, errdefs.Invalidf("bundle entry %q cannot be read: %v", Trunc(zf.Name), err)
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

func readTarGz(b []byte) ([]File, error) {
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
			return nil, errdefs.Invalidf("bundle entry %q is not a regular file or directory", Trunc(h.Name))
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

// Tar writes files as one uncompressed tar (what a sandbox unpacks), adding extra files (e.g.
// a package.json) that the bundle lacks.
func Tar(files []File, extra map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(0, 0)
	for name, content := range extra {
		files = append(files, File{Name: name, Mode: 0o644, Data: []byte(content)})
	}
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode | 0o644, Size: int64(len(f.Data)), ModTime: mt, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if f.Dir {
			h = &tar.Header{Name: f.Name + "/", Mode: 0o755, ModTime: mt, Typeflag: tar.TypeDir, Format: tar.FormatPAX}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Has says whether files has the regular file name.
func Has(files []File, name string) bool {
	for _, f := range files {
		if f.Name == name && !f.Dir {
			return true
		}
	}
	return false
}

// Trunc shortens user-supplied text quoted in a message.
func Trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
