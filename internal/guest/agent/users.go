package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// account is a passwd entry plus its supplementary groups.
type account struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Shell  string
	Groups []uint32 // primary first
}

// lookupUser resolves a request's user: "" → the default ("user"); any name
// in passwd is allowed; unknown names are an error.
func (a *Agent) lookupUser(name string) (*account, error) {
	if name == "" {
		name = a.opts.DefaultUser
	}
	if strings.ContainsAny(name, ":\n\x00") {
		return nil, gerr(guest.CodeInvalidArgument, "invalid user name")
	}
	u, err := readPasswd(a.opts.PasswdFile, name)
	if err != nil {
		return nil, err
	}
	if u == nil {
		if name == "root" { // never lock root out over a broken passwd file
			return &account{Name: "root", Home: "/root", Shell: "/bin/sh", Groups: []uint32{0}}, nil
		}
		return nil, gerr(guest.CodeInvalidArgument, fmt.Sprintf("unknown user %q", name))
	}
	u.Groups = append([]uint32{u.GID}, readGroups(a.opts.GroupFile, name, u.GID)...)
	return u, nil
}

func readPasswd(path, name string) (*account, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, gerr(guest.CodeInternal, "reading passwd: "+err.Error())
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 7 || fs[0] != name {
			continue
		}
		uid, err1 := strconv.ParseUint(fs[2], 10, 32)
		gid, err2 := strconv.ParseUint(fs[3], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, gerr(guest.CodeInternal, "bad passwd entry for "+name)
		}
		return &account{Name: name, UID: uint32(uid), GID: uint32(gid), Home: fs[5], Shell: fs[6]}, nil
	}
	return nil, nil
}

func readGroups(path, name string, primary uint32) []uint32 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []uint32
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 4 {
			continue
		}
		gid, err := strconv.ParseUint(fs[2], 10, 32)
		if err != nil || uint32(gid) == primary {
			continue
		}
		if slices.Contains(strings.Split(fs[3], ","), name) {
			out = append(out, uint32(gid))
		}
	}
	return out
}

// asUser runs fn with u's filesystem identity so the kernel does the
// permission checks. fsuid/fsgid and the raw setgroups(2) syscall are
// per-thread on Linux, so fn runs on a locked OS thread of its own; if the
// identity cannot be restored the thread is left locked and dies with the goroutine.
func asUser(u *account, fn func() error) error {
	euid, egid := os.Geteuid(), os.Getegid()
	if euid != 0 {
		if uint32(euid) == u.UID {
			return fn()
		}
		return gerr(guest.CodePermissionDenied, fmt.Sprintf("agent is not root and cannot act as %q", u.Name))
	}
	if u.UID == 0 {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if r := recover(); r != nil {
				errc <- gerr(guest.CodeInternal, fmt.Sprint("panic: ", r))
			}
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		orig, err := unix.Getgroups()
		if err != nil {
			errc <- err
			restored = true
			return
		}
		gs := make([]int, len(u.Groups))
		for i, g := range u.Groups {
			gs[i] = int(g)
		}
		if err := unix.Setgroups(gs); err != nil {
			errc <- fmt.Errorf("setgroups: %w", err)
			restored = unix.Setgroups(orig) == nil
			return
		}
		unix.Setfsgid(int(u.GID))
		unix.Setfsuid(int(u.UID))
		// setfsuid reports no errors; an invalid id (-1) just returns the current one.
		var res error
		if cur, _ := unix.SetfsuidRetUid(-1); cur != int(u.UID) {
			res = errors.New("setfsuid did not take effect")
		} else {
			res = fn()
		}
		unix.Setfsuid(euid) // back to 0 also restores the fs capabilities
		unix.Setfsgid(egid)
		err = unix.Setgroups(orig)
		cu, _ := unix.SetfsuidRetUid(-1)
		cg, _ := unix.SetfsgidRetGid(-1)
		restored = err == nil && cu == euid && cg == egid
		// Answer only now: the caller (and a test looking at every thread) sees this thread as
		// it is again. A thread that could not be restored ends with its goroutine (still locked).
		errc <- res
	}()
	return <-errc
}
