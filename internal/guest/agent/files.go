package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// maxListEntries bounds a list so a deep listing of / cannot run away.
const maxListEntries = 100000

// frameWriter serialises frames onto a stream.
type frameWriter struct {
	mu sync.Mutex
	st *yamux.Stream
}

func (w *frameWriter) frame(typ byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return guest.WriteFrame(w.st, typ, p)
}

func (w *frameWriter) json(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return w.frame(typ, b)
}

func (w *frameWriter) fail(err error) { w.json(guest.FrameError, toGuestError(err)) }

var pastDeadline = time.Unix(1, 0)

func (a *Agent) handleStream(st *yamux.Stream) {
	w := &frameWriter{st: st}
	defer st.Close()
	defer func() {
		if r := recover(); r != nil {
			a.log.Printf("panic in handler: %v\n%s", r, debug.Stack())
			w.fail(gerr(guest.CodeInternal, fmt.Sprint("agent panic: ", r)))
		}
	}()
	fr := guest.NewFrameReader(st)
	typ, p, err := fr.Next()
	if err != nil {
		var pe *guest.ProtocolError
		if errors.As(err, &pe) {
			w.fail(gerr(guest.CodeInvalidArgument, pe.Error()))
		}
		return
	}
	if typ != guest.FrameRequest {
		w.fail(gerr(guest.CodeInvalidArgument, "first frame must be a request"))
		return
	}
	var req guest.Request
	if err := json.Unmarshal(p, &req); err != nil {
		w.fail(gerr(guest.CodeInvalidArgument, "bad request JSON: "+err.Error()))
		return
	}
	switch req.Op {
	case guest.OpExec:
		a.opExec(st, fr, w, &req)
	case guest.OpRead:
		a.opRead(st, fr, w, &req)
	case guest.OpWrite:
		a.opWrite(fr, w, &req)
	case guest.OpList:
		a.opList(st, fr, w, &req)
	case guest.OpStat:
		a.opStat(w, &req)
	case guest.OpMkdir:
		a.opMkdir(w, &req)
	case guest.OpRemove:
		a.opRemove(w, &req)
	case guest.OpMove:
		a.opMove(w, &req)
	case guest.OpHealth:
		w.json(guest.FrameResult, guest.Health{
			OK: true, Version: guest.Version, UptimeMs: time.Since(a.start).Milliseconds(), BootID: a.bootID,
		})
	case guest.OpUsage:
		u, err := usage()
		if err != nil {
			w.fail(gerr(guest.CodeInternal, err.Error()))
			return
		}
		w.json(guest.FrameResult, u)
	case guest.OpSync:
		unix.Sync()
		w.frame(guest.FrameResult, []byte("{}"))
	case guest.OpMount:
		if err := mountDisk(&req); err != nil {
			w.fail(err)
			return
		}
		w.frame(guest.FrameResult, []byte("{}"))
	case guest.OpProcStart, guest.OpProcList, guest.OpProcOutput, guest.OpProcStdin, guest.OpProcSignal, guest.OpProcKill, guest.OpProcResize:
		a.opProcess(st, fr, w, &req)
	case guest.OpPTY:
		a.opPTY(st, fr, w, &req)
	case guest.OpWatch:
		a.opWatch(st, fr, w, &req)
	case guest.OpArchiveGet:
		a.opArchiveGet(st, fr, w, &req)
	case guest.OpArchivePut:
		a.opArchivePut(fr, w, &req)
	case guest.OpDial:
		opDial(st, w, &req)
	default:
		w.fail(gerr(guest.CodeInvalidArgument, fmt.Sprintf("unknown op %q", req.Op)))
	}
}

// watchHost reads the rest of the stream in the background: anything (or the
// host closing the stream) while we are still answering means the host gave
// up, so blocked writes are released. The returned stop ends the watcher.
func watchHost(st *yamux.Stream, fr *guest.FrameReader) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, _, err := fr.Next(); errors.Is(err, yamux.ErrTimeout) {
			return // our own stop
		}
		st.SetWriteDeadline(pastDeadline)
	}()
	return func() {
		st.SetReadDeadline(pastDeadline)
		<-done
	}
}

// userAndPath resolves the request's user and validates one path.
func (a *Agent) userAndPath(req *guest.Request) (*account, string, error) {
	p, err := cleanPath("path", req.Path)
	if err != nil {
		return nil, "", err
	}
	u, err := a.lookupUser(req.User)
	if err != nil {
		return nil, "", err
	}
	return u, p, nil
}

func statInfo(p string, st *unix.Stat_t) guest.FileInfo {
	fi := guest.FileInfo{
		Name:  filepath.Base(p),
		Path:  p,
		Size:  st.Size,
		Mode:  fmt.Sprintf("%04o", st.Mode&0o7777),
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fi.Type = "file"
	case unix.S_IFDIR:
		fi.Type = "dir"
	case unix.S_IFLNK:
		fi.Type = "symlink"
		if t, err := os.Readlink(p); err == nil {
			fi.Target = t
		}
	default:
		fi.Type = "other"
	}
	return fi
}

// lstatInfo describes p without following a final symlink.
func lstatInfo(p string) (guest.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return guest.FileInfo{}, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	return statInfo(p, &st), nil
}

func (a *Agent) opStat(w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	var fi guest.FileInfo
	if err := asUser(u, func() (err error) { fi, err = lstatInfo(p); return }); err != nil {
		w.fail(err)
		return
	}
	w.json(guest.FrameStat, fi)
}

func (a *Agent) opRead(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	var f *os.File
	// Only the open needs the user's identity; the fd carries the permission.
	// O_NONBLOCK keeps a FIFO from hanging the open; it is rejected below.
	err = asUser(u, func() (err error) { f, err = os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0); return })
	if err != nil {
		w.fail(err)
		return
	}
	defer f.Close()
	var sst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &sst); err != nil {
		w.fail(err)
		return
	}
	switch sst.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		w.fail(gerr(guest.CodeIsADirectory, p+" is a directory"))
		return
	default:
		w.fail(gerr(guest.CodeInvalidArgument, p+" is not a regular file"))
		return
	}
	if err := w.json(guest.FrameStat, statInfo(p, &sst)); err != nil {
		return
	}
	stop := watchHost(st, fr)
	defer stop()
	buf := make([]byte, guest.DataChunk)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if w.frame(guest.FrameData, buf[:n]) != nil {
				return // host went away
			}
		}
		if rerr == io.EOF {
			w.frame(guest.FrameEOF, nil)
			return
		}
		if rerr != nil {
			w.fail(rerr)
			return
		}
	}
}

func parseMode(s string) (uint32, error) {
	if s == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, gerr(guest.CodeInvalidArgument, fmt.Sprintf("bad mode %q", s))
	}
	if m == 0 {
		m = 0o644
	}
	return uint32(m), nil
}

// createTemp makes the temp file next to target, so the final rename is
// atomic and a failed write never leaves a half-written target. An error names
// target, the path the caller gave, not the temp file it never saw.
func createTemp(target string) (*os.File, string, error) {
	dir, base := filepath.Dir(target), filepath.Base(target)
	if len(base) > 200 {
		base = base[:200]
	}
	var rb [8]byte
	for range 10 {
		rand.Read(rb[:])
		name := filepath.Join(dir, "."+base+".pandastack-"+hex.EncodeToString(rb[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, name, onTarget(err, name, target)
	}
	return nil, "", gerr(guest.CodeInternal, "could not create a temp file")
}

// onTarget rewrites an error about the temp file tmp into one about target.
func onTarget(err error, tmp, target string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == tmp {
		return &fs.PathError{Op: pe.Op, Path: target, Err: pe.Err}
	}
	var le *os.LinkError
	if errors.As(err, &le) && le.Old == tmp {
		return &fs.PathError{Op: "write", Path: target, Err: le.Err}
	}
	return err
}

func (a *Agent) opWrite(fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	mode, err := parseMode(req.Mode)
	if err != nil {
		w.fail(err)
		return
	}
	var f *os.File
	var tmp string
	err = asUser(u, func() error {
		if fi, err := os.Lstat(p); err == nil {
			if fi.IsDir() {
				return gerr(guest.CodeIsADirectory, p+" is a directory")
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				// Write through a symlink (like a plain write would), not over it.
				if r, err := filepath.EvalSymlinks(p); err == nil {
					if ri, err := os.Stat(r); err == nil && ri.IsDir() {
						return gerr(guest.CodeIsADirectory, p+" is a directory")
					}
					p = r
				}
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		var err error
		f, tmp, err = createTemp(p)
		return err
	})
	if err != nil {
		w.fail(err)
		return
	}
	done, closed := false, false
	defer func() {
		if done {
			return
		}
		if !closed {
			f.Close()
		}
		asUser(u, func() error { return os.Remove(tmp) })
	}()
	for {
		typ, payload, err := fr.Next()
		if err != nil {
			var pe *guest.ProtocolError
			if errors.As(err, &pe) {
				w.fail(gerr(guest.CodeInvalidArgument, pe.Error()))
			}
			return // host went away before data-EOF: drop the temp file
		}
		switch typ {
		case guest.FrameData:
			if _, err := f.Write(payload); err != nil {
				w.fail(onTarget(err, tmp, p))
				return
			}
			continue
		case guest.FrameEOF:
		default:
			w.fail(gerr(guest.CodeInvalidArgument, fmt.Sprintf("unexpected frame %q in write", typ)))
			return
		}
		break
	}
	if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
		w.fail(err)
		return
	}
	closed = true
	if err := f.Close(); err != nil { // delayed allocation errors (ENOSPC) can surface here
		w.fail(onTarget(err, tmp, p))
		return
	}
	var fi guest.FileInfo
	err = asUser(u, func() error {
		if err := os.Rename(tmp, p); err != nil {
			return onTarget(err, tmp, p)
		}
		var err error
		fi, err = lstatInfo(p)
		return err
	})
	if err != nil {
		w.fail(err) // the deferred cleanup removes the temp file
		return
	}
	done = true
	w.json(guest.FrameStat, fi)
}

func (a *Agent) opList(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	depth := req.Depth
	if depth <= 0 {
		depth = guest.DefaultDepth
	}
	depth = min(depth, guest.MaxDepth)
	stop := watchHost(st, fr)
	defer stop()
	errHostGone := errors.New("host went away")
	count := 0
	var walk func(dir string, level int, top bool) error
	walk = func(dir string, level int, top bool) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if top {
				return err
			}
			return nil // unreadable subdirectory: list what we can
		}
		for _, e := range entries {
			child := filepath.Join(dir, e.Name())
			fi, err := lstatInfo(child)
			if err != nil {
				continue // vanished meanwhile
			}
			if count++; count > maxListEntries {
				return gerr(guest.CodeInvalidArgument, fmt.Sprintf("more than %d entries; use a smaller depth", maxListEntries))
			}
			if w.json(guest.FrameStat, fi) != nil {
				return errHostGone
			}
			if fi.Type == "dir" && level < depth {
				if err := walk(child, level+1, false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err = asUser(u, func() error {
		if err := isDir(p, p); err != nil { // a symlink to a directory lists the directory
			return err
		}
		return walk(p, 1, true)
	})
	if err == errHostGone {
		return
	}
	if err != nil {
		w.fail(err)
		return
	}
	w.frame(guest.FrameEOF, nil)
}

func (a *Agent) opMkdir(w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	err = asUser(u, func() error {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return gerr(guest.CodeAlreadyExists, p+" exists and is not a directory")
		}
		return os.MkdirAll(p, 0o755)
	})
	if err != nil {
		w.fail(err)
		return
	}
	w.frame(guest.FrameResult, []byte("{}"))
}

func (a *Agent) opRemove(w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	if p == "/" {
		w.fail(gerr(guest.CodeInvalidArgument, "refusing to remove /"))
		return
	}
	err = asUser(u, func() error {
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		if req.Recursive {
			return os.RemoveAll(p)
		}
		return os.Remove(p)
	})
	if err != nil {
		w.fail(err)
		return
	}
	w.frame(guest.FrameResult, []byte("{}"))
}

func (a *Agent) opMove(w *frameWriter, req *guest.Request) {
	from, err := cleanPath("from", req.From)
	if err != nil {
		w.fail(err)
		return
	}
	to, err := cleanPath("to", req.To)
	if err != nil {
		w.fail(err)
		return
	}
	if from == "/" || to == "/" {
		w.fail(gerr(guest.CodeInvalidArgument, "cannot move /"))
		return
	}
	u, err := a.lookupUser(req.User)
	if err != nil {
		w.fail(err)
		return
	}
	err = asUser(u, func() error {
		err := os.Rename(from, to)
		if !errors.Is(err, unix.EXDEV) {
			return err
		}
		// Different filesystems (e.g. /tmp is tmpfs): copy, then delete the source.
		if err := copyTree(from, to); err != nil {
			return err
		}
		return os.RemoveAll(from)
	})
	if err != nil {
		w.fail(err)
		return
	}
	w.frame(guest.FrameResult, []byte("{}"))
}

// copyTree copies a file, symlink or directory tree for a cross-device move.
// Files land via temp+rename so the destination is never half written.
func copyTree(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	perm := uint32(fi.Mode().Perm())
	if sys, ok := fi.Sys().(*unix.Stat_t); ok {
		perm = sys.Mode & 0o7777
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(t, to)
	case fi.IsDir():
		if err := os.Mkdir(to, 0o700); err != nil {
			return err
		}
		entries, err := os.ReadDir(from)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
		return os.Chmod(to, fs.FileMode(perm&0o777))
	case fi.Mode().IsRegular():
		src, err := os.Open(from)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, tmp, err := createTemp(to)
		if err != nil {
			return err
		}
		_, err = io.Copy(dst, src)
		if err == nil {
			err = unix.Fchmod(int(dst.Fd()), perm)
		}
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, to)
		}
		if err != nil {
			os.Remove(tmp)
		}
		return err
	default:
		return gerr(guest.CodeInvalidArgument, from+" is not a file, directory or symlink")
	}
}

// isDir checks that p, followed if a symlink, is a directory: its stat error, or CodeNotADirectory
// with "<name> is not a directory".
func isDir(p, name string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return gerr(guest.CodeNotADirectory, name+" is not a directory")
	}
	return nil
}
