package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hashicorp/yamux"
	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// watches counts the open watch streams (guest.MaxWatches).
var watches atomic.Int32

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watcher is one watch stream: an inotify instance over a directory (and, recursive, the
// directories below it as they appear), feeding a bounded queue the stream writer drains.
type watcher struct {
	u         *account
	f         *os.File // the inotify instance (non-blocking, so Close wakes a Read)
	recursive bool
	q         chan guest.WatchEvent
	lost      atomic.Bool // events were dropped since the last overflow event

	mu   sync.Mutex
	dirs map[int32]string // watch descriptor → directory
	full bool             // MaxWatchDirs reached (told once)
}

func (a *Agent) opWatch(st *yamux.Stream, fr *guest.FrameReader, w *frameWriter, req *guest.Request) {
	u, p, err := a.userAndPath(req)
	if err != nil {
		w.fail(err)
		return
	}
	if watches.Add(1) > guest.MaxWatches {
		watches.Add(-1)
		w.fail(gerr(guest.CodeConflict, fmt.Sprintf("%d watches are open already (the most the agent keeps)", guest.MaxWatches)))
		return
	}
	defer watches.Add(-1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		w.fail(fmt.Errorf("inotify: %w", err))
		return
	}
	wt := &watcher{u: u, f: os.NewFile(uintptr(fd), "inotify"), recursive: req.Recursive,
		q: make(chan guest.WatchEvent, guest.WatchQueue), dirs: map[int32]string{}}
	defer wt.f.Close()
	err = asUser(u, func() error {
		if err := isDir(p, p); err != nil {
			return err
		}
		return wt.add(p, false)
	})
	if err != nil {
		w.fail(err)
		return
	}
	if w.json(guest.FrameResult, guest.WatchEvent{Type: guest.WatchReady, Path: p}) != nil {
		return
	}
	// The host closing the stream (or sending anything) ends the watch.
	gone := make(chan struct{})
	go func() {
		fr.Next()
		close(gone)
		wt.f.Close()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wt.read()
	}()
	defer func() {
		st.SetReadDeadline(pastDeadline)
		<-gone
		<-done
	}()
	for {
		select {
		case <-gone:
			return
		case <-done:
			// The inotify instance failed: drain, then end the stream.
			for {
				select {
				case ev := <-wt.q:
					if w.json(guest.FrameResult, ev) != nil {
						return
					}
				default:
					w.fail(gerr(guest.CodeInternal, "the watch ended"))
					return
				}
			}
		case ev := <-wt.q:
			if w.json(guest.FrameResult, ev) != nil {
				return
			}
			if wt.lost.Swap(false) {
				if w.json(guest.FrameResult, guest.WatchEvent{Type: guest.WatchOverflow, Message: "events were dropped: the reader was too slow"}) != nil {
					return
				}
			}
		}
	}
}

// emit queues ev, dropping it (and remembering the loss) when the queue is full.
func (wt *watcher) emit(ev guest.WatchEvent) {
	select {
	case wt.q <- ev:
	default:
		wt.lost.Store(true)
	}
}

// add watches dir and, recursive, the directories below it; existing tells their entries as
// created (a directory that appeared: what was made in it before its watch was in place).
// Runs with the user's identity.
func (wt *watcher) add(dir string, existing bool) error {
	wt.mu.Lock()
	if len(wt.dirs) >= guest.MaxWatchDirs {
		full := wt.full
		wt.full = true
		wt.mu.Unlock()
		if !full {
			wt.emit(guest.WatchEvent{Type: guest.WatchOverflow, Path: dir,
				Message: fmt.Sprintf("more than %d directories: the ones after this are not watched", guest.MaxWatchDirs)})
		}
		return nil
	}
	wd, err := unix.InotifyAddWatch(int(wt.f.Fd()), dir, watchMask)
	if err == nil {
		wt.dirs[int32(wd)] = dir
	}
	wt.mu.Unlock()
	if err != nil {
		return &os.PathError{Op: "watch", Path: dir, Err: err}
	}
	if !wt.recursive && !existing {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone or unreadable meanwhile: what is watched stays
	}
	for _, e := range entries {
		child := filepath.Join(dir, e.Name())
		if existing {
			wt.emit(guest.WatchEvent{Type: guest.WatchCreate, Path: child, Dir: e.IsDir()})
		}
		if e.IsDir() && wt.recursive {
			if err := wt.add(child, existing); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				return err
			}
		}
	}
	return nil
}

// read turns inotify events into watch events until the instance is closed. A rename's two
// halves may arrive in two reads: a move-from without its move-to waits for the next read (at
// most renamePairing) before it counts as a move out of the tree.
func (wt *watcher) read() {
	buf := make([]byte, 64<<10)
	pending := map[uint32]moveFrom{}
	var order []uint32
	for {
		if len(pending) == 0 {
			order = order[:0]
		} else {
			fds := []unix.PollFd{{Fd: int32(wt.f.Fd()), Events: unix.POLLIN}}
			if n, _ := unix.Poll(fds, int(renamePairing.Milliseconds())); n <= 0 {
				for _, c := range order {
					if m, ok := pending[c]; ok {
						wt.emit(guest.WatchEvent{Type: guest.WatchRemove, Path: m.path, Dir: m.dir})
					}
				}
				clear(pending)
				order = order[:0]
			}
		}
		n, err := wt.f.Read(buf)
		if err != nil {
			return
		}
		order = wt.batch(buf[:n], pending, order)
	}
}

// renamePairing is how long a move-from waits for its move-to (the kernel queues both in one
// rename call; a reader woken between the two sees the second very soon).
const renamePairing = 50 * time.Millisecond

type moveFrom struct {
	path string
	dir  bool
}

// batch handles one read's events: renames pair by cookie (pending holds the move-froms not
// paired yet, order their cookies); repeated writes to one file collapse into one event.
func (wt *watcher) batch(b []byte, pending map[uint32]moveFrom, order []uint32) []uint32 {
	lastWrite := ""
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		size := unix.SizeofInotifyEvent + int(raw.Len)
		if size > len(b) {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:size]), "\x00")
		b = b[size:]
		mask := raw.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			wt.emit(guest.WatchEvent{Type: guest.WatchOverflow, Message: "the kernel's event queue overflowed"})
			continue
		}
		wt.mu.Lock()
		dir, ok := wt.dirs[raw.Wd]
		if mask&unix.IN_IGNORED != 0 {
			delete(wt.dirs, raw.Wd)
		}
		wt.mu.Unlock()
		if !ok || name == "" {
			continue // the watched directory itself: its parent's watch tells (or the root went)
		}
		p := filepath.Join(dir, name)
		isDir := mask&unix.IN_ISDIR != 0
		if mask&unix.IN_MODIFY == 0 {
			lastWrite = ""
		}
		switch {
		case mask&unix.IN_CREATE != 0:
			wt.created(p, isDir)
		case mask&unix.IN_MODIFY != 0:
			if lastWrite != p {
				wt.emit(guest.WatchEvent{Type: guest.WatchWrite, Path: p})
			}
			lastWrite = p
		case mask&unix.IN_DELETE != 0:
			wt.emit(guest.WatchEvent{Type: guest.WatchRemove, Path: p, Dir: isDir})
		case mask&unix.IN_MOVED_FROM != 0:
			pending[raw.Cookie] = moveFrom{p, isDir}
			order = append(order, raw.Cookie)
		case mask&unix.IN_MOVED_TO != 0:
			if m, ok := pending[raw.Cookie]; ok {
				delete(pending, raw.Cookie)
				wt.emit(guest.WatchEvent{Type: guest.WatchRename, Path: p, From: m.path, Dir: isDir})
				if isDir {
					wt.moved(m.path, p)
				}
				continue
			}
			wt.created(p, isDir)
		}
	}
	return order
}

// created tells of a new entry; a new directory of a recursive watch is watched too, and what
// was made in it before is told.
func (wt *watcher) created(p string, isDir bool) {
	wt.emit(guest.WatchEvent{Type: guest.WatchCreate, Path: p, Dir: isDir})
	if isDir && wt.recursive {
		asUser(wt.u, func() error { return wt.add(p, true) })
	}
}

// moved renames the watched directories at or below from (the watches follow the inodes).
func (wt *watcher) moved(from, to string) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for wd, d := range wt.dirs {
		if d == from || strings.HasPrefix(d, from+"/") {
			wt.dirs[wd] = to + strings.TrimPrefix(d, from)
		}
	}
}
