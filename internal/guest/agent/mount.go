package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/guest"
	"golang.org/x/sys/unix"
)

// mountDisk serves OpMount: a volume the host attached to a spare slot. Done with syscalls, not a
// shell script: on a software-emulated CPU every fork+exec costs tens of milliseconds.
func mountDisk(req *guest.Request) error {
	if req.Serial == "" || !filepath.IsAbs(req.Path) || req.SizeBytes <= 0 {
		return gerr(guest.CodeInvalidArgument, "mount needs serial, an absolute path and size_bytes")
	}
	dev, sysDir, err := diskBySerial(req.Serial)
	if err != nil {
		return err
	}
	// After the host swapped the file behind the slot, the new size arrives with a config-change
	// interrupt: wait for it, or ext4 would see the old (placeholder) size.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(sysDir, "size"))
		sectors, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && sectors*512 == req.SizeBytes {
			break
		}
		if time.Now().After(deadline) {
			return gerr(guest.CodeInternal, fmt.Sprintf("%s did not take the volume's size (%d bytes; sees %d)", dev, req.SizeBytes, sectors*512))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.MkdirAll(req.Path, 0o755); err != nil {
		return err
	}
	flags := uintptr(unix.MS_NOATIME | unix.MS_NODEV | unix.MS_NOSUID)
	if req.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(dev, req.Path, "ext4", flags, ""); err != nil {
		return gerr(guest.CodeInternal, fmt.Sprintf("mount %s at %s: %v", dev, req.Path, err))
	}
	if req.Grow && !req.ReadOnly {
		if out, err := exec.Command("resize2fs", dev).CombinedOutput(); err != nil {
			return gerr(guest.CodeInternal, fmt.Sprintf("resize2fs %s: %v: %s", dev, err, out))
		}
	}
	return nil
}

// diskBySerial finds the virtio disk whose serial is s.
func diskBySerial(s string) (dev, sysDir string, err error) {
	dirs, _ := filepath.Glob("/sys/block/vd*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "serial"))
		if err == nil && strings.TrimSpace(string(b)) == s {
			return "/dev/" + filepath.Base(d), d, nil
		}
	}
	return "", "", gerr(guest.CodeNotFound, "no disk with serial "+s)
}
