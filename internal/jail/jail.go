// Package jail starts a VMM confined: in its own mount namespace whose root is an empty tmpfs
// holding only the files that VMM needs (bound at their host paths, so its command line needs no
// rewriting), joined to its cgroups, as an unprivileged uid/gid, with no descriptors beyond stdio
// and the ones it is handed.
//
// The launcher is this very binary, re-executed: Command starts /proc/self/exe with argv[0]
// "pandastack-jail", and this package's init sets up the jail and execs the VMM before any other
// code runs. A re-exec (rather than a separate helper binary) works the same in the agent, the
// bench and test binaries, and Go cannot run code between fork and exec.
package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const argv0 = "pandastack-jail"

// Spec says what one jailed process may see and be.
type Spec struct {
	// Root is an empty directory on the host; the jail's tmpfs root is mounted on it inside the
	// jail's own mount namespace only (the host never sees that mount).
	Root string `json:"root"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	// Mounts are the host files and directories the process needs, bound at the same path.
	Mounts []Mount `json:"mounts"`
	// Cgroups are cgroup directories the process joins before it execs (so everything the VMM
	// does is accounted there).
	Cgroups []string `json:"cgroups,omitempty"`
	// KeepFDs: descriptors 0..KeepFDs-1 survive the exec (stdio, plus e.g. a QMP socket and a tap); every
	// other one is closed.
	KeepFDs int      `json:"keep_fds"`
	Dir     string   `json:"dir"`
	Env     []string `json:"env,omitempty"`
}

// Mount is one path inside the jail.
type Mount struct {
	Path  string `json:"path"`
	Write bool   `json:"write,omitempty"`
	// Own: the file belongs to this jail alone (its disk clone, its run dir) and is given to its
	// uid. Other paths are shared (a template's kernel, a base RAM file) and are opened through
	// the jails' common gid; a jail sees only its own mounts, so the group grants no access to
	// anything outside it.
	Own bool `json:"own,omitempty"`
}

// systemPaths are what QEMU itself needs: its shared libraries, their loader and cache, and its
// firmware (qboot for microvm). Top-level symlinks of a merged-/usr system are recreated.
var systemPaths = []string{"/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
	"/usr/share/qemu", "/usr/share/seabios"}

var topLinks = []string{"/lib", "/lib64", "/bin", "/sbin"}

// devices are the only nodes in the jail's /dev.
var devices = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}

// Command returns a command that runs bin with args inside the jail spec describes. The caller
// sets Stdout, Stderr and ExtraFiles (KeepFDs must cover the latter) and starts it; the pid is
// the VMM's (the launcher execs it).
func Command(spec Spec, bin string, args ...string) (*exec.Cmd, error) {
	if spec.UID <= 0 || spec.GID <= 0 {
		return nil, fmt.Errorf("jail: uid and gid must be unprivileged (got %d:%d)", spec.UID, spec.GID)
	}
	if err := os.MkdirAll(spec.Root, 0o700); err != nil {
		return nil, err
	}
	blob, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", append([]string{string(blob), bin}, args...)...)
	cmd.Args[0] = argv0
	// A new mount namespace from birth: every mount the launcher makes stays its own. Own
	// session: the VMM outlives a restart of the agent, which re-adopts it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNS}
	cmd.Dir = "/"
	return cmd, nil
}

func init() {
	if len(os.Args) < 3 || os.Args[0] != argv0 {
		return
	}
	err := launch(os.Args[1], os.Args[2], os.Args[2:])
	fmt.Fprintf(os.Stderr, "pandastack-jail: %v\n", err)
	os.Exit(127)
}

// launch builds the jail and execs bin; it returns only on failure.
func launch(blob, bin string, argv []string) error {
	var spec Spec
	if err := json.Unmarshal([]byte(blob), &spec); err != nil {
		return fmt.Errorf("bad spec: %w", err)
	}
	bin, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return err
	}
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("jail root: %w", err)
	}
	for _, l := range topLinks {
		if target, err := os.Readlink(l); err == nil {
			if err := os.Symlink(target, root+l); err != nil {
				return err
			}
		}
	}
	seen := map[string]bool{}
	var binds []Mount
	for _, p := range append(systemPaths, bin) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil && !seen[real] {
			seen[real] = true
			binds = append(binds, Mount{Path: real})
		}
	}
	for _, m := range spec.Mounts {
		if err := grant(m, spec.UID, spec.GID); err != nil {
			return err
		}
		binds = append(binds, m)
	}
	sort.SliceStable(binds, func(i, j int) bool { return len(binds[i].Path) < len(binds[j].Path) })
	for _, m := range binds {
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if !m.Write {
			flags |= unix.MS_RDONLY
		}
		if err := bind(root, m.Path, flags); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(root+"/dev", 0o755); err != nil {
		return err
	}
	for _, d := range devices {
		if err := bind(root, d, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	// Join the cgroups while still root (the cgroup files are root's).
	for _, cg := range spec.Cgroups {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", cg, err)
		}
	}
	// Swap roots and drop the host's tree.
	old := root + "/.oldroot"
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	os.Remove("/.oldroot")
	if err := unix.Mount("", "/", "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("read-only jail root: %w", err)
	}
	if spec.Dir != "" {
		if err := unix.Chdir(spec.Dir); err != nil {
			return err
		}
	}
	// No core dumps (they would hold guest memory); no privilege gain through exec.
	unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Drop root: no supplementary groups, then gid, then uid (Go applies these to every thread).
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(spec.GID); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(spec.UID); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	if os.Geteuid() != spec.UID || os.Getegid() != spec.GID {
		return errors.New("privileges were not dropped")
	}
	// Whatever this process inherited or opened beyond the kept descriptors ends at exec.
	if err := unix.CloseRange(uint(max(spec.KeepFDs, 3)), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	return unix.Exec(bin, argv, spec.Env)
}

// bind mounts host path p at the same path under root, with flags (MS_RDONLY, MS_NOSUID, …).
func bind(root, p string, flags uintptr) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	target := root + p
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("jail: mount point for %s: %w", p, err)
	}
	if err := unix.Mount(p, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("jail: bind %s: %w", p, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
		return fmt.Errorf("jail: remount %s: %w", p, err)
	}
	return nil
}

// grant lets uid/gid open m: its own files become uid's, shared ones readable (or writable) by
// the jails' common group.
func grant(m Mount, uid, gid int) error {
	fi, err := os.Stat(m.Path)
	if err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if m.Own {
		if err := os.Chown(m.Path, uid, gid); err != nil {
			return fmt.Errorf("jail: chown %s: %w", m.Path, err)
		}
		return nil
	}
	var fs unix.Statfs_t
	if unix.Statfs(m.Path, &fs) == nil && fs.Type == unix.FUSE_SUPER_MAGIC {
		return nil // served over FUSE (a lazily served memory image): its server decides who opens it
	}
	mode := fi.Mode().Perm() | 0o040
	if m.Write {
		mode |= 0o020
	}
	if fi.IsDir() {
		mode |= 0o010
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Gid) != gid {
		if err := os.Chown(m.Path, -1, gid); err != nil {
			return fmt.Errorf("jail: chgrp %s: %w", m.Path, err)
		}
	}
	if mode != fi.Mode().Perm() {
		return os.Chmod(m.Path, mode)
	}
	return nil
}

// IsJailed reports whether the process pid runs in a mount namespace other than this one's (for
// tests and diagnostics).
func IsJailed(pid int) bool {
	mine, err1 := os.Readlink("/proc/self/ns/mnt")
	theirs, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	return err1 == nil && err2 == nil && !strings.EqualFold(mine, theirs)
}
