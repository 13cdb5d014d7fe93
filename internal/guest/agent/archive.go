package agent

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// frameData is an io.Writer of FrameData frames.
type frameData struct{ w *frameWriter }

func (d frameData) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += guest.DataChunk {
		if err := d.w.frame(guest.FrameData, p[off:min(off+guest.DataChunk, len(p))]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// opArchiveGet sends a tar of a directory's contents: directories, regular files and symlinks
// (as links, never followed); other files are left out.
func (a *Agent) opArchiveGet(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, root, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	started := false
	err = asUser(u, func() error {
		if err := isDir(root, root); err != nil {
			return err
		}
		if err := w.frame(guest.FrameResult, []byte("{}")); err != nil {
			return err
		}
		started = true
		stop := watchHost(st, fr)
		defer stop()
		bw := bufio.NewWriterSize(frameData{w}, guest.DataChunk)
		tw := tar.NewWriter(bw)
		count := 0
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return nil // unreadable or vanished meanwhile: send what we can
			}
			if count++; count > guest.MaxArchiveEntries {
				return gerr(guest.CodeInvalidArgument, fmt.Sprintf("more than %d entries", guest.MaxArchiveEntries))
			}
			return tarEntry(tw, root, p)
		})
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = bw.Flush()
		}
		return err
	})
	if err != nil {
		if !started || guest.ErrorCode(err) != "" {
			w.fail(err)
		}
		return // else the host went away
	}
	w.frame(guest.FrameEOF, nil)
}

// tarEntry writes p (below root) to tw.
func tarEntry(tw *tar.Writer, root, p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	link := ""
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return nil
		}
	case fi.IsDir(), fi.Mode().IsRegular():
	default:
		return nil // devices, FIFOs, sockets
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil
	}
	rel, _ := filepath.Rel(root, p)
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !fi.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil // unreadable: left out
	}
	defer f.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// The size in the header is what is sent: a file that grew is cut, one that shrank is padded.
	n, err := io.CopyN(tw, f, hdr.Size)
	if err != nil && err != io.EOF {
		return err
	}
	if n < hdr.Size {
		_, err = io.CopyN(tw, zeros{}, hdr.Size-n)
		return err
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// frameStream reads the FrameData frames of a stream up to its FrameEOF.
type frameStream struct {
	fr      *guest.FrameReader
	pending []byte
	eof     bool
}

// errNoEOF is a stream that ended without its FrameEOF: the host gave up.
var errNoEOF = errors.New("the host went away mid-stream")

func (s *frameStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.eof {
			return 0, io.EOF
		}
		typ, b, err := s.fr.Next()
		switch {
		case err != nil:
			var pe *guest.ProtocolError
			if errors.As(err, &pe) {
				return 0, gerr(guest.CodeInvalidArgument, pe.Error())
			}
			return 0, errNoEOF
		case typ == guest.FrameData:
			s.pending = b
		case typ == guest.FrameEOF:
			s.eof = true
		default:
			return 0, gerr(guest.CodeInvalidArgument, fmt.Sprintf("unexpected frame %q in an archive", typ))
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// opArchivePut unpacks a tar into a directory (see guest/filetree.go for the rules).
func (a *Agent) opArchivePut(fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, root, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	in := &frameStream{fr: fr}
	var res guest.ArchiveResult
	err = asUser(u, func() error {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		rfd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: root, Err: err}
		}
		defer unix.Close(rfd)
		x := &unpacker{root: rfd, rootPath: root, modes: map[string]uint32{}}
		tr := tar.NewReader(in)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if ge := (*guest.Error)(nil); errors.As(err, &ge) || err == errNoEOF {
					return err
				}
				return gerr(guest.CodeInvalidArgument, "not a tar archive: "+err.Error())
			}
			if res.Entries++; res.Entries > guest.MaxArchiveEntries {
				return gerr(guest.CodeInvalidArgument, fmt.Sprintf("more than %d entries", guest.MaxArchiveEntries))
			}
			n, err := x.entry(hdr, tr)
			res.Bytes += n
			if err != nil {
				return err
			}
		}
		io.Copy(io.Discard, in) // the tar's padding up to the FrameEOF
		return x.finish()
	})
	if err == errNoEOF {
		return
	}
	if err != nil {
		w.fail(err)
		return
	}
	w.json(guest.FrameResult, res)
}

// unpacker writes entries beneath root (an open directory): every path is resolved with
// RESOLVE_BENEATH, so neither a name nor a symlink on the way leads out of it.
type unpacker struct {
	root     int
	rootPath string
	modes    map[string]uint32 // directories' modes, set at the end (a read-only one still fills)
}

// entryName is a tar name made relative and clean; "" is the root itself.
func entryName(name string) (string, error) {
	bad := func(why string) error {
		return gerr(guest.CodeInvalidArgument, fmt.Sprintf("archive entry %q %s", name, why))
	}
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return "", bad("has an empty or NUL name")
	}
	if strings.HasPrefix(name, "/") {
		return "", bad("is an absolute path")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", bad(`has a ".." component`)
		}
	}
	n := path.Clean(name)
	if n == "." {
		return "", nil
	}
	return n, nil
}

// escapeErr names the entry whose path would leave the target.
func (x *unpacker) escapeErr(name string, err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return gerr(guest.CodeInvalidArgument, fmt.Sprintf("archive entry %q leads out of %s (through a symlink)", name, x.rootPath))
	}
	return &os.PathError{Op: "unpack", Path: filepath.Join(x.rootPath, name), Err: err}
}

// dir opens the directory rel beneath the root, making what is missing.
func (x *unpacker) dir(rel string) (int, error) {
	if rel == "." || rel == "" {
		return unix.Dup(x.root)
	}
	how := &unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(x.root, rel, how)
	if err != unix.ENOENT {
		return fd, err
	}
	parent, err := x.dir(path.Dir(rel))
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(parent, path.Base(rel), 0o755)
	unix.Close(parent)
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	return unix.Openat2(x.root, rel, how)
}

// clear removes what is at name in dir unless it is a directory (a tar entry replaces a file).
func clearEntry(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == unix.ENOENT || err == unix.EISDIR {
		return nil
	}
	return err
}

// entry applies one tar entry; it returns the bytes of file content written.
func (x *unpacker) entry(hdr *tar.Header, r io.Reader) (int64, error) {
	name, err := entryName(hdr.Name)
	if err != nil {
		return 0, err
	}
	mode := uint32(hdr.Mode) & 0o777
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			x.modes["."] = mode
		}
		return 0, nil
	}
	parent, err := x.dir(path.Dir(name))
	if err != nil {
		return 0, x.escapeErr(name, err)
	}
	defer unix.Close(parent)
	base := path.Base(name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(parent, base, 0o755); err != nil && err != unix.EEXIST {
			return 0, x.escapeErr(name, err)
		}
		fd, err := x.dir(name) // an existing symlink in its place must stay beneath the root
		if err != nil {
			return 0, x.escapeErr(name, err)
		}
		unix.Close(fd)
		x.modes[name] = mode
		return 0, nil
	case tar.TypeReg:
		if err := clearEntry(parent, base); err != nil {
			return 0, x.escapeErr(name, err)
		}
		fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, x.escapeErr(name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		n, err := io.Copy(f, r)
		if err == nil {
			err = unix.Fchmod(fd, mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			var ge *guest.Error
			if errors.As(err, &ge) || err == errNoEOF {
				return n, err
			}
			return n, x.escapeErr(name, err)
		}
		return n, nil
	case tar.TypeSymlink:
		// The link is made as it is; it is only ever followed beneath the root (later entries),
		// or by the sandbox's own programs, which may read anything the user may anyway.
		if err := clearEntry(parent, base); err != nil {
			return 0, x.escapeErr(name, err)
		}
		if err := unix.Symlinkat(hdr.Linkname, parent, base); err != nil {
			return 0, x.escapeErr(name, err)
		}
		return 0, nil
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil || target == "" {
			return 0, gerr(guest.CodeInvalidArgument, fmt.Sprintf("archive entry %q: a hard link must point inside the archive, not to %q", hdr.Name, hdr.Linkname))
		}
		tdir, err := x.dir(path.Dir(target))
		if err != nil {
			return 0, x.escapeErr(name, err)
		}
		defer unix.Close(tdir)
		if err := clearEntry(parent, base); err != nil {
			return 0, x.escapeErr(name, err)
		}
		// No AT_SYMLINK_FOLLOW: a symlink at the target is linked itself, never followed.
		if err := unix.Linkat(tdir, path.Base(target), parent, base, 0); err != nil {
			return 0, x.escapeErr(name, err)
		}
		return 0, nil
	default:
		return 0, gerr(guest.CodeInvalidArgument, fmt.Sprintf("archive entry %q: only directories, files, symlinks and hard links can be unpacked", hdr.Name))
	}
}

// finish sets the directories' modes.
func (x *unpacker) finish() error {
	for name, mode := range x.modes {
		fd, err := x.dir(name)
		if err != nil {
			return x.escapeErr(name, err)
		}
		err = unix.Fchmod(fd, mode)
		unix.Close(fd)
		if err != nil {
			return x.escapeErr(name, err)
		}
	}
	return nil
}
