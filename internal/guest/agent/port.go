package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// device is the raw byte stream to the host. Read returns (0, nil) while no
// host is connected (virtio-serial semantics) and a non-nil error only when the
// device is gone for good.
type device interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	Close() error
}

// notifier is a device that can tell when a host connects (or sends), so a mux without a host
// waits for that instead of polling: after a snapshot restore the new host's hello is then read
// at once, not at the next poll of a backed-off loop.
type notifier interface {
	// watchHost turns host events on or off; on reports whether they work.
	watchHost(on bool) bool
	// hostEvents yields (at least) once after each host event while watching.
	hostEvents() <-chan os.Signal
}

// watchedPoll is how often a mux whose device signals host events reads again anyway (a
// variable so a test can make the events the only way out).
var watchedPoll = time.Second

// For freshPoll after its host left (or the agent started), a mux reads every freshPollEvery
// instead of waiting for host events. Every snapshot is taken inside that window (a bake's just
// after its host left, a fork's or a hibernation's with the host still there) and a restored
// guest's clock resumes where it stopped, so a new VM polls for its host. Under TCG that is the
// cheaper wake-up by far: a new QEMU has translated none of the guest's code, and the signal
// path of a host event (kernel signal delivery, the Go runtime's handler, os/signal, the
// scheduler) ran ~1,500 more guest blocks before the HELLO was read, ~25 ms of a ~130 ms
// handshake (measured with QEMU's translate_block trace). Past the window the guest waits for
// events, so a guest left without a host costs nothing. (A variable so a test can turn it off.)
var freshPoll = 10 * time.Second

const freshPollEvery = 2 * time.Millisecond

var (
	errHostGone = errors.New("host disconnected")
	errDetached = errors.New("port consumer detached")
	// errNoHost: a write found no host connected. Not terminal: the next host is a new one,
	// which would not understand what was meant for the last.
	errNoHost = errors.New("no host connected")
)

// portMux owns the single reader of a device and hands bytes to one consumer
// at a time (the handshake scanner, then a yamux session, then the scanner
// again...). A blocking device read cannot be interrupted, so a dead yamux
// session must not keep reading: only this goroutine reads, and a detached
// consumer simply stops being served. Unconsumed bytes stay for the next one.
type portMux struct {
	dev device

	freshPoll, watchedPoll time.Duration // the package's, when the mux was made

	mu      sync.Mutex
	cond    *sync.Cond
	scratch []byte
	buf     []byte // read but not yet consumed (aliases scratch)
	gone    bool   // host disconnected; not yet reported to a consumer
	away    bool   // the reader's last read found no host (written by the reader only)
	err     error  // device failed for good
	gen     uint64 // current consumer

	wmu sync.Mutex // one device write at a time, so lines and frames never interleave
}

func newPortMux(dev device) *portMux {
	m := &portMux{dev: dev, scratch: make([]byte, 64<<10), freshPoll: freshPoll, watchedPoll: watchedPoll}
	m.cond = sync.NewCond(&m.mu)
	go m.readLoop()
	return m
}

func (m *portMux) readLoop() {
	const maxIdle = 20 * time.Millisecond
	idle := time.Millisecond
	left := time.Now()
	notif, _ := m.dev.(notifier)
	watching, fallback := false, m.watchedPoll
	for {
		m.mu.Lock()
		for len(m.buf) > 0 && m.err == nil {
			m.cond.Wait()
		}
		if m.err != nil {
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()

		n, err := m.dev.Read(m.scratch)

		m.mu.Lock()
		switch {
		case err != nil:
			if m.err == nil {
				m.err = err
			}
		case n == 0:
			// No host: read returns 0 at once, so poll gently; report the
			// transition once so a live yamux session ends.
			if !m.away {
				m.gone, left = true, time.Now()
			}
			m.away = true
		default:
			m.away = false
			idle = time.Millisecond
			m.buf = m.scratch[:n]
		}
		m.cond.Broadcast()
		m.mu.Unlock()
		switch {
		case err == nil && n == 0 && time.Since(left) < m.freshPoll:
			time.Sleep(freshPollEvery)
		case err == nil && n == 0 && !watching && notif != nil && notif.watchHost(true):
			// Read once more before waiting: a host that came meanwhile raised no event.
			watching = true
		case err == nil && n == 0 && watching:
			t := time.NewTimer(fallback)
			select {
			case <-notif.hostEvents():
			case <-t.C:
			}
			t.Stop()
		case err == nil && n == 0:
			time.Sleep(idle)
			idle = min(idle*2, maxIdle)
		case n > 0 && watching:
			// A host is here: no events while it sends (each would be a signal).
			watching = !notif.watchHost(false)
		}
	}
}

// shutdown fails every consumer with err (used when serving stops).
func (m *portMux) shutdown(err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = err
	}
	m.cond.Broadcast()
	m.mu.Unlock()
	m.dev.Close()
}

// consumer is a handle that reads from the mux until it is detached.
type consumer struct {
	m   *portMux
	gen uint64
}

// attach makes a new consumer current; any older one is detached.
func (m *portMux) attach() *consumer {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.cond.Broadcast()
	return &consumer{m: m, gen: m.gen}
}

func (c *consumer) detach() {
	m := c.m
	m.mu.Lock()
	if m.gen == c.gen {
		m.gen++
		m.cond.Broadcast()
	}
	m.mu.Unlock()
}

// Read returns errHostGone once per host disconnect, errDetached after detach,
// or the device's terminal error.
func (c *consumer) Read(p []byte) (int, error) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if m.gen != c.gen {
			return 0, errDetached
		}
		if m.gone {
			m.gone = false
			return 0, errHostGone
		}
		if len(m.buf) > 0 {
			n := copy(p, m.buf)
			m.buf = m.buf[n:]
			if len(m.buf) == 0 {
				m.cond.Broadcast()
			}
			return n, nil
		}
		if m.err != nil {
			return 0, m.err
		}
		m.cond.Wait()
	}
}

// Write writes all of p unless the consumer has been detached.
func (c *consumer) Write(p []byte) (int, error) {
	m := c.m
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	cur, err := m.gen == c.gen, m.err
	m.mu.Unlock()
	if !cur {
		return 0, errDetached
	}
	if err != nil {
		return 0, err
	}
	return m.write(p)
}

// noHostPatience bounds how long a write that finds no host waits for one the reader has not
// seen leave.
const noHostPatience = time.Second

// write writes all of p (m.wmu held). A write that finds no host fails with errNoHost once the
// reader has seen the host leave; before that it waits for the host (at most noHostPatience).
// The port can hand the guest a new host's first bytes before it reports the host connected:
// the data and the "port open" control message travel on different queues, and the guest
// handles the control message later, on a workqueue. So a READY may find "no host" while the
// HELLO it answers is in hand.
func (m *portMux) write(p []byte) (int, error) {
	total := 0
	var waited time.Duration
	for total < len(p) {
		n, err := m.dev.Write(p[total:])
		total += n
		if errors.Is(err, errNoHost) {
			m.mu.Lock()
			away := m.away
			m.mu.Unlock()
			if !away && waited < noHostPatience {
				time.Sleep(time.Millisecond)
				waited += time.Millisecond
				continue
			}
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// announce writes p regardless of consumers, waiting for a host if none is connected.
func (m *portMux) announce(p []byte) {
	wait := 2 * time.Millisecond
	for len(p) > 0 {
		m.wmu.Lock()
		n, err := m.write(p)
		m.wmu.Unlock()
		p = p[n:]
		switch {
		case errors.Is(err, errNoHost):
			time.Sleep(wait)
			wait = min(2*wait, time.Second)
		case err != nil:
			return
		}
	}
}

// sessionConn is the io.ReadWriteCloser a yamux session runs on: bytes the
// scanner read past the GO line first, then the port.
type sessionConn struct {
	c    *consumer
	rest []byte
	// tail is the last bytes handed to yamux (up to a handshake line's length). A new host's
	// HELLO that lands in a session the guest did not see end (a VM restored from a snapshot
	// taken mid-session: its host left and came back while the VM was saved) breaks yamux with
	// a protocol error; the scanner then starts from these bytes and answers that very HELLO
	// instead of waiting for the host to resend it.
	tailMu  sync.Mutex
	tail    []byte
	retired bool
}

// retire appends tail to b and stops keeping: this session's reader may still be returning
// from a read, but it writes tail no more, so the next session can reuse tail's array.
func (s *sessionConn) retire(b []byte) []byte {
	s.tailMu.Lock()
	defer s.tailMu.Unlock()
	s.retired = true
	return append(b, s.tail...)
}

func (s *sessionConn) Read(p []byte) (int, error) {
	if len(s.rest) > 0 {
		n := copy(p, s.rest)
		s.rest = s.rest[n:]
		s.keep(p[:n])
		return n, nil
	}
	n, err := s.c.Read(p)
	if err == errHostGone || err == errDetached {
		err = io.EOF // quiet end of session
	}
	s.keep(p[:n])
	return n, err
}

// keep remembers b's end in tail, which never grows past guest.MaxHandshakeLine (so a tail made
// with that capacity is never reallocated).
func (s *sessionConn) keep(b []byte) {
	if len(b) == 0 {
		return
	}
	s.tailMu.Lock()
	defer s.tailMu.Unlock()
	if s.retired {
		return
	}
	if len(b) >= guest.MaxHandshakeLine {
		s.tail = append(s.tail[:0], b[len(b)-guest.MaxHandshakeLine:]...)
		return
	}
	if drop := len(s.tail) + len(b) - guest.MaxHandshakeLine; drop > 0 {
		s.tail = append(s.tail[:0], s.tail[drop:]...)
	}
	s.tail = append(s.tail, b...)
}

func (s *sessionConn) Write(p []byte) (int, error) { return s.c.Write(p) }

// Close detaches; the port itself stays open for the next session.
func (s *sessionConn) Close() error {
	s.c.detach()
	return nil
}

// virtioPort is the guest end of the virtio-serial port. Raw blocking
// syscalls: os.File would try the netpoller, which this char device does not
// support the way we need (read returns 0 while the host is away, and poll
// reports POLLHUP then). The port raises SIGIO (O_ASYNC) when the host connects
// or sends: that is how a reader without a host learns it may read again.
type virtioPort struct {
	fd     int
	events chan os.Signal
}

// watchHost turns SIGIO for the port on or off (F_SETOWN to this process once).
func (v *virtioPort) watchHost(on bool) bool {
	if v.events == nil {
		if _, err := unix.FcntlInt(uintptr(v.fd), unix.F_SETOWN, os.Getpid()); err != nil {
			return false
		}
		v.events = make(chan os.Signal, 1)
		signal.Notify(v.events, unix.SIGIO)
	}
	fl, err := unix.FcntlInt(uintptr(v.fd), unix.F_GETFL, 0)
	if err == nil {
		if on {
			fl |= unix.O_ASYNC
		} else {
			fl &^= unix.O_ASYNC
		}
		_, err = unix.FcntlInt(uintptr(v.fd), unix.F_SETFL, fl)
	}
	return err == nil
}

func (v *virtioPort) hostEvents() <-chan os.Signal { return v.events }

func (v *virtioPort) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(v.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, nil
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: "virtio port", Err: err}
		}
		return n, nil
	}
}

// Write fails with errNoHost when no host is connected. The port itself would block the write
// until the next host connects and then hand that host bytes meant for the last one: a session's
// last frames, written after its host left (a bake's host leaves right after its last call).
// Such a write, stuck in the kernel when the template was saved, completed in every VM restored
// from it, and its session's teardown ran then, ahead of the new host's HELLO. (A host that leaves
// between the poll and the write still leaves that write blocked: rare, and harmless.)
func (v *virtioPort) Write(p []byte) (int, error) {
	for {
		// POLLOUT: a host is connected and the port has room; POLLHUP: no host. Neither: a host
		// that is not reading yet, whom the poll waits for (or for its leaving).
		fds := []unix.PollFd{{Fd: int32(v.fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return 0, &os.PathError{Op: "poll", Path: "virtio port", Err: err}
		}
		switch {
		case fds[0].Revents&(unix.POLLOUT|unix.POLLERR|unix.POLLNVAL) != 0:
			// Writable, or broken (closed by shutdown): the write says which.
		case fds[0].Revents&unix.POLLHUP != 0:
			return 0, errNoHost
		default:
			continue // interrupted
		}
		n, err := unix.Write(v.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return max(n, 0), &os.PathError{Op: "write", Path: "virtio port", Err: err}
		}
		return n, nil
	}
}

func (v *virtioPort) Close() error { return unix.Close(v.fd) }

// findPort returns the /dev node of the virtio-serial port called name,
// creating the node from sysfs if devtmpfs did not.
func findPort(name string) (string, error) {
	const sys = "/sys/class/virtio-ports"
	entries, err := os.ReadDir(sys)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(sys, e.Name(), "name"))
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		dev := "/dev/" + e.Name()
		if _, err := os.Stat(dev); err == nil {
			return dev, nil
		}
		nums, err := os.ReadFile(filepath.Join(sys, e.Name(), "dev"))
		if err != nil {
			return "", err
		}
		maj, mnr, ok := strings.Cut(strings.TrimSpace(string(nums)), ":")
		ma, err1 := strconv.Atoi(maj)
		mi, err2 := strconv.Atoi(mnr)
		if !ok || err1 != nil || err2 != nil {
			return "", fmt.Errorf("bad dev numbers %q for %s", nums, e.Name())
		}
		if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", err
		}
		return dev, nil
	}
	return "", os.ErrNotExist
}

func openPort(path string) (*virtioPort, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &virtioPort{fd: fd}, nil
}

// connDevice adapts an accepted socket (test mode) to device: EOF is terminal.
type connDevice struct{ net.Conn }

func (c connDevice) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		return n, nil
	}
	if err == nil {
		return 0, nil
	}
	return 0, err
}
