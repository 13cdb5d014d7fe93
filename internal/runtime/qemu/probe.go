package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ProbeAccel picks the accelerator: "kvm" only if a real boot of this guest kernel reaches its
// initramfs under KVM within timeout. Some hosts expose a /dev/kvm that cannot run a stock kernel
// (PVM-based KVM hangs it), so the presence of /dev/kvm proves nothing; a boot that does not
// finish is killed and TCG is used. The reason says why, for the log.
func ProbeAccel(ctx context.Context, kernel, initrd, scratch string, timeout time.Duration) (accel, reason string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", "no usable /dev/kvm (" + err.Error() + ")"
	}
	f.Close()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "tcg", err.Error()
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "tcg", err.Error()
	}
	console := filepath.Join(scratch, "probe-console.log")
	os.Remove(console)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-M", "microvm", "-accel", "kvm", "-cpu", "host", "-m", "256M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:"+console, "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet pandastack.probe=1")
	out, err := cmd.CombinedOutput()
	data, _ := os.ReadFile(console)
	if strings.Contains(string(data), "PANDASTACK-PROBE-OK") {
		return "kvm", "a stock guest kernel boots under KVM"
	}
	if ctx.Err() != nil {
		return "tcg", fmt.Sprintf("a guest kernel did not boot under KVM within %s (PVM-only KVM?)", timeout)
	}
	return "tcg", fmt.Sprintf("KVM boot failed: %v %s", err, strings.TrimSpace(string(out)))
}
