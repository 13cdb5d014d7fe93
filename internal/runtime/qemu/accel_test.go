package qemu

import (
	"slices"
	"testing"

	"github.com/pandastack/pandastack/internal/runtime"
)

// TestTCGCodeCacheBounded: under TCG every VMM is started with its translated-code buffer bounded
// (QEMU's default, 1 GiB, outgrew the VMM's cgroup allowance); KVM has no such buffer.
func TestTCGCodeCacheBounded(t *testing.T) {
	spec := runtime.Spec{VCPUs: 1, MemoryMiB: 256}
	for accel, want := range map[string]string{"tcg": "tcg,tb-size=256", "kvm": "kvm"} {
		d := &Driver{accel: accel, cpu: DefaultCPU}
		args := d.args(t.TempDir(), spec, "ram", false, false)
		i := slices.Index(args, "-accel")
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("%s: no -accel in %v", accel, args)
		}
		if args[i+1] != want {
			t.Fatalf("%s: -accel %q, want %q", accel, args[i+1], want)
		}
	}
}
