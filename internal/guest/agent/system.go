package agent

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setSystemClock sets CLOCK_REALTIME (needs CAP_SYS_TIME).
func setSystemClock(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// urandomFD is /dev/urandom, kept open once opened: a handshake after a restore then runs no
// path lookup or open (under TCG every code path the restored guest runs first is translated
// anew, ~500 guest blocks for the open alone). A failed open is not kept: the next handshake
// tries again, as each did when every handshake opened the device.
var urandomFD struct {
	mu   sync.Mutex
	fd   int
	open bool
}

func urandom() (int, error) {
	urandomFD.mu.Lock()
	defer urandomFD.mu.Unlock()
	if !urandomFD.open {
		fd, err := unix.Open("/dev/urandom", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		urandomFD.fd, urandomFD.open = fd, true
	}
	return urandomFD.fd, nil
}

// mixKernelSeed mixes host randomness into the kernel RNG and forces a CRNG
// reseed, so clones restored from one snapshot stop sharing RNG state.
// The write works unprivileged; the ioctls need CAP_SYS_ADMIN (errors ignored by callers).
func mixKernelSeed(seed []byte) error {
	fd, err := urandom()
	if err != nil {
		return err
	}
	_, werr := unix.Write(fd, seed)
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	b := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(seed)*8))
	binary.NativeEndian.PutUint32(b[4:8], uint32(len(seed)))
	copy(b[8:], seed)
	var ierr error
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&b[0]))); e != 0 {
		ierr = fmt.Errorf("RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDRESEEDCRNG, 0); e != 0 && ierr == nil {
		ierr = fmt.Errorf("RNDRESEEDCRNG: %w", e)
	}
	return errors.Join(werr, ierr)
}

// RunInit does what PID 1 must in the sandbox VM: finish the mounts the
// initramfs did not do, set the hostname, bring up lo, then run `self serve`
// as a child, restart it whenever it exits, and reap every zombie. It only
// returns if it cannot start at all.
func RunInit(self string) error {
	console := consoleFile()
	lg := log.New(console, "pandastack-init: ", log.LstdFlags|log.Lmicroseconds)
	// Handled (not ignored) signals: ignored dispositions would be inherited
	// by the agent and every user process; handled ones reset to default on exec.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGHUP, unix.SIGINT, unix.SIGTERM, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for s := range sigs {
			lg.Printf("ignoring signal %v", s)
		}
	}()
	unix.Umask(0o022)
	for _, step := range []struct {
		what string
		fn   func() error
	}{
		{"mount /dev/pts", func() error {
			return mountIfMissing("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "gid=5,mode=620,ptmxmode=666", 0o755)
		}},
		{"mount /dev/shm", func() error {
			return mountIfMissing("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777", 0o1777)
		}},
		{"mount /run", func() error {
			return mountIfMissing("run", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755", 0o755)
		}},
		{"/dev links", devLinks},
		{"hostname", func() error { return unix.Sethostname([]byte("sandbox")) }},
		{"lo up", loopbackUp},
	} {
		if err := step.fn(); err != nil {
			lg.Printf("%s: %v", step.what, err) // keep going: a partial system beats a dead VM
		}
	}
	os.MkdirAll("/run/lock", 0o1777)
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", defaultPath)
	}
	os.Setenv("HOME", "/root")

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	child := 0
	var childStart time.Time
	backoff := 100 * time.Millisecond
	start := func() {
		for {
			p, err := os.StartProcess(self, []string{self, "serve"}, &os.ProcAttr{
				Files: []*os.File{devnull, console, console},
				// No asynchronous preemption in the agent: under TCG a goroutine often runs past the
				// runtime's 10 ms slice while its code is translated, and each preemption is a
				// signal whose delivery path (kernel, the runtime's handler) a restored guest runs
				// cold: ~800 guest blocks before a restored agent read its first HELLO. The agent
				// has no loops that need it; commands get their own environment (buildEnv).
				Env: append(os.Environ(), "GODEBUG=asyncpreemptoff=1"),
				Sys: &unix.SysProcAttr{Setsid: true},
			})
			if err == nil {
				child, childStart = p.Pid, time.Now()
				p.Release() // we reap with wait4(-1) ourselves
				lg.Printf("started agent pid %d", child)
				return
			}
			lg.Printf("start agent: %v", err)
			time.Sleep(time.Second)
		}
	}
	start()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD cannot last: the agent is our child
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if pid != child {
			continue // an orphan: reaped
		}
		lg.Printf("agent pid %d exited (%s); restarting", pid, describeWait(ws))
		if time.Since(childStart) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 5*time.Second)
		start()
	}
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("status %d", ws.ExitStatus())
}

func consoleFile() *os.File {
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0); err == nil {
		return f
	}
	return os.Stderr
}

// mounted reports whether path is a mount point (from /proc/self/mountinfo).
func mounted(path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 && fs[4] == path {
			return true
		}
	}
	return false
}

func mountIfMissing(src, target, fstype string, flags uintptr, data string, mode os.FileMode) error {
	if mounted(target) {
		return nil
	}
	if err := os.MkdirAll(target, mode); err != nil {
		return err
	}
	if err := unix.Mount(src, target, fstype, flags, data); err != nil && err != unix.EBUSY {
		return err
	}
	return nil
}

// devLinks adds the /dev symlinks devtmpfs does not create (bash process
// substitution needs /dev/fd).
func devLinks() error {
	var errs []error
	for link, target := range map[string]string{
		"/dev/fd":     "/proc/self/fd",
		"/dev/stdin":  "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1",
		"/dev/stderr": "/proc/self/fd/2",
	} {
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(target, link); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := os.Lstat("/dev/ptmx"); err != nil {
		if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
