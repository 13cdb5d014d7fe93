package agenttest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	guestproto "github.com/pandastack/pandastack/internal/guest"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Directory watches and archives over the fake's file map. A watch sees the changes made by the
// file calls (the toy exec writes no files): each call's changes are found by comparing the map
// before and after it (a move is one rename). Archives hold directories and files; the fake
// knows no symlinks, so a symlink entry is skipped, and a hard link copies its target.

// fakeWatch is one open watch stream.
type fakeWatch struct {
	dir       string
	recursive bool
	events    chan hostapi.WatchEvent
	lost      bool // events were dropped (told as an overflow event with the next one)
}

// sees reports whether the watch covers p.
func (w *fakeWatch) sees(p string) bool {
	if !strings.HasPrefix(p, strings.TrimSuffix(w.dir, "/")+"/") {
		return false
	}
	return w.recursive || path.Dir(p) == w.dir
}

func (w *fakeWatch) send(ev hostapi.WatchEvent) {
	if w.lost {
		select {
		case w.events <- hostapi.WatchEvent{Type: guestproto.WatchOverflow, Message: "events were dropped: the reader was too slow"}:
			w.lost = false
		default:
		}
	}
	select {
	case w.events <- ev:
	default:
		w.lost = true
	}
}

// notify tells the sandbox's watches what changed since before; renamed, when set, is a move.
func (sb *sandbox) notify(before memFS, renamed *[2]string) {
	inside := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	for _, w := range sb.watches {
		skip := func(string) bool { return false }
		if renamed != nil {
			from, to := renamed[0], renamed[1]
			skip = func(p string) bool { return inside(p, from) || inside(p, to) }
			switch ev := (hostapi.WatchEvent{Path: to, From: from, Dir: sb.fs.isDir(to)}); {
			case w.sees(from) && w.sees(to):
				ev.Type = guestproto.WatchRename
				w.send(ev)
			case w.sees(from):
				w.send(hostapi.WatchEvent{Type: guestproto.WatchRemove, Path: from, Dir: ev.Dir})
			case w.sees(to):
				w.send(hostapi.WatchEvent{Type: guestproto.WatchCreate, Path: to, Dir: ev.Dir})
			}
		}
		var changes []hostapi.WatchEvent
		for p, n := range sb.fs {
			old, had := before[p]
			switch {
			case skip(p) || !w.sees(p):
			case !had:
				changes = append(changes, hostapi.WatchEvent{Type: guestproto.WatchCreate, Path: p, Dir: n.dir})
			case !n.dir && !bytes.Equal(old.data, n.data):
				changes = append(changes, hostapi.WatchEvent{Type: guestproto.WatchWrite, Path: p})
			}
		}
		for p, n := range before {
			if _, has := sb.fs[p]; !has && !skip(p) && w.sees(p) {
				changes = append(changes, hostapi.WatchEvent{Type: guestproto.WatchRemove, Path: p, Dir: n.dir})
			}
		}
		// Parents before children when made, children before parents when removed.
		slices.SortFunc(changes, func(a, b hostapi.WatchEvent) int {
			if a.Type == guestproto.WatchRemove && b.Type == guestproto.WatchRemove {
				return strings.Compare(b.Path, a.Path)
			}
			return strings.Compare(a.Path, b.Path)
		})
		for _, ev := range changes {
			w.send(ev)
		}
	}
}

// watch streams ?path='s changes as NDJSON, ready first, until the client goes away.
func (a *Agent) watch(w http.ResponseWriter, r *http.Request) {
	recursive, perr := strconv.ParseBool(r.URL.Query().Get("recursive"))
	if r.URL.Query().Get("recursive") == "" {
		recursive, perr = false, nil
	}
	a.mu.Lock()
	var fw *fakeWatch
	var sb *sandbox
	p, err := pathArg(r.URL.Query().Get("path"))
	if err == nil && perr != nil {
		err = invalid("recursive: %v", perr)
	}
	if err == nil {
		sb, err = a.live(r)
	}
	if err == nil && !sb.fs.isDir(p) {
		err = sb.fs.notDir(p)
	}
	if err == nil {
		fw = &fakeWatch{dir: p, recursive: recursive, events: make(chan hostapi.WatchEvent, guestproto.WatchQueue)}
		sb.watches = append(sb.watches, fw)
	}
	a.mu.Unlock()
	if err != nil {
		writeErr(w, err)
		return
	}
	defer func() {
		a.mu.Lock()
		sb.watches = slices.DeleteFunc(sb.watches, func(x *fakeWatch) bool { return x == fw })
		a.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	enc.Encode(hostapi.WatchEvent{Type: guestproto.WatchReady, Path: p})
	rc.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-fw.events:
			enc.Encode(ev)
			rc.Flush()
		}
	}
}

// archiveGet is ?path= as a tar (or tar.gz): its directories and files, names relative to it.
func archiveGet(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "tar" && format != "tar.gz" {
		return nil, invalid("format must be tar or tar.gz")
	}
	if !sb.fs.isDir(p) {
		return nil, sb.fs.notDir(p)
	}
	var buf bytes.Buffer
	var out io.Writer = &buf
	var zw *gzip.Writer
	if format == "tar.gz" {
		zw = gzip.NewWriter(&buf)
		out = zw
	}
	tw := tar.NewWriter(out)
	for _, q := range sb.fs.under(p) {
		n := sb.fs[q]
		h := &tar.Header{Name: strings.TrimPrefix(q, strings.TrimSuffix(p, "/")+"/"), Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(n.data))}
		if n.dir {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		tw.WriteHeader(h)
		tw.Write(n.data)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes(), nil
}

// archivePut unpacks a tar or tar.gz into ?path=, refusing what the real agent refuses.
func archivePut(sb *sandbox, p string, r *http.Request) (any, *agentclient.Error) {
	var res hostapi.ArchiveResult
	return &res, sb.change(func(...string) *agentclient.Error {
		br := bufio.NewReader(r.Body)
		var in io.Reader = br
		if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
			zr, err := gzip.NewReader(br)
			if err != nil {
				return invalid("bad gzip stream: %v", err)
			}
			in = zr
		}
		if err := sb.fs.mkdir(p); err != nil {
			return err
		}
		tr := tar.NewReader(in)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return invalid("not a tar archive: %v", err)
			}
			res.Entries++
			name, bad := archiveName(h.Name)
			if bad != "" {
				return invalid("archive entry %q %s", h.Name, bad)
			}
			target := path.Join(p, name)
			switch h.Typeflag {
			case tar.TypeDir:
				err := sb.fs.mkdir(target)
				if err != nil {
					return err
				}
			case tar.TypeReg:
				b, rerr := io.ReadAll(tr)
				if rerr != nil {
					return invalid("not a tar archive: %v", rerr)
				}
				if err := sb.fs.write(target, b); err != nil {
					return err
				}
				res.Bytes += int64(len(b))
			case tar.TypeSymlink:
			case tar.TypeLink:
				ln, bad := archiveName(h.Linkname)
				if bad != "" || ln == "" {
					return invalid("archive entry %q: a hard link must point inside the archive, not to %q", h.Name, h.Linkname)
				}
				b, err := sb.fs.read(path.Join(p, ln))
				if err == nil {
					err = sb.fs.write(target, b)
				}
				if err != nil {
					return err
				}
			default:
				return invalid("archive entry %q: only directories, files, symlinks and hard links can be unpacked", h.Name)
			}
		}
	}, p)
}

// archiveName is a tar name made relative and clean ("" the root itself), or why it is refused.
func archiveName(name string) (string, string) {
	switch {
	case name == "":
		return "", "has an empty name"
	case strings.HasPrefix(name, "/"):
		return "", "is an absolute path"
	case slices.Contains(strings.Split(name, "/"), ".."):
		return "", `has a ".." component`
	}
	if n := path.Clean(name); n != "." {
		return n, ""
	}
	return "", ""
}
