package client

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// WatchFiles follows GET …/files/watch, calling each for every event (the first is "ready": the
// watch is in place) until each returns true or an error, or ctx ends (nil then).
func (c *Client) WatchFiles(ctx context.Context, id, path string, recursive bool, each func(ev v1.WatchEvent) (done bool, err error)) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	err := c.streamRequest(ctx, "GET", sbPath(id, "/files/watch"), q, nil, -1, "", "the watch stream ended", 1<<20,
		func(line []byte, rid string) (bool, error) {
			var ev v1.WatchEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return false, fmt.Errorf("bad line in the watch stream: %w", err)
			}
			if ev.Error != nil {
				return true, streamError(ev.Error, rid)
			}
			return each(ev)
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// DownloadArchive opens a directory of the sandbox as a tar (gzipped: a tar.gz); the caller
// closes it. A read error means the archive was cut.
func (c *Client) DownloadArchive(ctx context.Context, id, path string, gzipped bool) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if gzipped {
		q.Set("format", "tar.gz")
	}
	resp, err := c.Do(ctx, "GET", sbPath(id, "/files/archive"), q, nil, -1, "", "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadArchive unpacks a tar or tar.gz stream into a directory of the sandbox (made if
// missing); size < 0 sends it chunked.
func (c *Client) UploadArchive(ctx context.Context, id, path string, r io.Reader, size int64) (v1.ArchiveResult, error) {
	var out v1.ArchiveResult
	return out, c.endpoint().Upload(ctx, "PUT", sbPath(id, "/files/archive"), url.Values{"path": {path}}, r, size, &out)
}

// UploadDir packs the local directory local (directories, regular files and symlinks, as links)
// into a tar.gz streamed to the sandbox's directory remote.
func (c *Client) UploadDir(ctx context.Context, id, local, remote string) (v1.ArchiveResult, error) {
	if fi, err := os.Stat(local); err != nil {
		return v1.ArchiveResult{}, err
	} else if !fi.IsDir() {
		return v1.ArchiveResult{}, fmt.Errorf("%s is not a directory", local)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(packDir(pw, local)) }()
	defer pr.Close()
	return c.UploadArchive(ctx, id, remote, pr, -1)
}

// packDir writes a tar.gz of dir's contents to w.
func packDir(w io.Writer, dir string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil // devices, FIFOs, sockets
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	return err
}

// DownloadDir unpacks the sandbox's directory remote into the local directory local (made if
// missing). What the sandbox sends is not trusted: entries are confined to local (os.Root, so
// neither a name with ".." nor a symlink leads out of it) and only directories, files and
// symlinks are made.
func (c *Client) DownloadDir(ctx context.Context, id, remote, local string) (entries int, err error) {
	body, err := c.DownloadArchive(ctx, id, remote, true)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if err := os.MkdirAll(local, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	zr, err := gzip.NewReader(body)
	if err != nil {
		return 0, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries, nil
		}
		if err != nil {
			return entries, err
		}
		entries++
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		if strings.HasPrefix(h.Name, "/") || slices.Contains(strings.Split(h.Name, "/"), "..") {
			return entries, fmt.Errorf("archive entry %q leads out of %s", h.Name, local)
		}
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return entries, err
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return entries, err
			}
			root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			root.Remove(name) // a symlink in its place is replaced, not written through
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return entries, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return entries, err
			}
		case tar.TypeSymlink:
			root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return entries, err
			}
		}
	}
}
