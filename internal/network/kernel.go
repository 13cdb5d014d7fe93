package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/pandastack/pandastack/internal/network/nsrun"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, the place `ip netns` uses.
const NetnsDir = "/var/run/netns"

// prepareNetnsDir makes NetnsDir exist and be a shared mount point, as `ip netns add` does, so a
// namespace mounted there is also visible to processes in other mount namespaces.
func prepareNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return err
	}
	if unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "") == nil {
		return nil
	}
	// Not a mount point yet: bind it onto itself, then make it shared.
	if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", NetnsDir, err)
	}
	if err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", NetnsDir, err)
	}
	return nil
}

// createNamedNetns makes a new network namespace, mounts it at NetnsDir/name and runs setup on
// an OS thread inside it. The thread is never handed back to the Go scheduler (its goroutine
// exits locked, so the runtime ends it), hence nothing else can run in the new namespace by
// accident. It returns an open handle to the namespace.
func createNamedNetns(name string, setup func() error) (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: this thread's namespace is changed for good.
		h, err := func() (netns.NsHandle, error) {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return netns.None(), fmt.Errorf("unshare netns: %w", err)
			}
			path := filepath.Join(NetnsDir, name)
			f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
			if err != nil {
				return netns.None(), err
			}
			f.Close()
			if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
				os.Remove(path)
				return netns.None(), fmt.Errorf("mount %s: %w", path, err)
			}
			fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				removeNamedNetns(name)
				return netns.None(), err
			}
			h := netns.NsHandle(fd)
			if setup != nil {
				if err := setup(); err != nil {
					h.Close()
					removeNamedNetns(name)
					return netns.None(), err
				}
			}
			return h, nil
		}()
		res <- result{h, err}
	}()
	r := <-res
	return r.h, r.err
}

// removeNamedNetns unmounts and removes NetnsDir/name. The namespace itself goes away (with the
// devices in it) once no process, mount or open handle refers to it. A missing name is no error.
func removeNamedNetns(name string) error {
	path := filepath.Join(NetnsDir, name)
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// runIn runs fn on an OS thread inside ns (see nsrun.In).
func runIn(ns netns.NsHandle, fn func() error) error { return nsrun.In(ns, fn) }

// writeSysctl sets a sysctl (dotted name) in the calling thread's network namespace.
func writeSysctl(name, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	return os.WriteFile(path, []byte(value), 0o644)
}

// tapFlags are the flags the slot's tap is created and opened with: a TAP device (Ethernet
// frames), no packet-information prefix, and a virtio-net header in front of every frame, which
// is what QEMU's tap backend with virtio-net expects (and what it negotiates when it opens a tap
// by name itself, so a snapshot baked that way restores onto these taps).
const tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR

// createPersistentTap creates a persistent tap device called name in the calling thread's
// network namespace.
func createPersistentTap(name string, flags uint16) error {
	fd, err := openTunFd(name, flags)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("TUNSETPERSIST %s: %w", name, err)
	}
	return nil
}

// openTunFd opens /dev/net/tun and attaches it to (or creates) the tun/tap device name in the
// calling thread's network namespace.
func openTunFd(name string, flags uint16) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return fd, nil
}
