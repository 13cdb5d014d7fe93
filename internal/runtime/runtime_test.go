package runtime

import "testing"

func TestIdentityCanRestore(t *testing.T) {
	base := Identity{VMM: "qemu", Version: "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)", Machine: "microvm", CPU: "max", Accel: "tcg"}
	if !base.CanRestore(base) {
		t.Fatal("an identity must restore under itself")
	}
	other := func(f func(*Identity)) Identity { i := base; f(&i); return i }
	for name, cur := range map[string]Identity{
		"vmm":              other(func(i *Identity) { i.VMM = "firecracker" }),
		"version":          other(func(i *Identity) { i.Version = "8.2.2" }),
		"package revision": other(func(i *Identity) { i.Version = "7.2.22 (Debian 1:7.2+dfsg-7+deb12u19)" }),
		"machine":          other(func(i *Identity) { i.Machine = "q35" }),
		"cpu":              other(func(i *Identity) { i.CPU = "max (host AMD EPYC 7B13)" }),
		"accel":            other(func(i *Identity) { i.Accel = "kvm" }),
		"devices":          other(func(i *Identity) { i.Devices = "2" }),
	} {
		if base.CanRestore(cur) || cur.CanRestore(base) {
			t.Errorf("%s differs: %v must not restore under %v", name, base, cur)
		}
	}
	if base.IsZero() || !(Identity{}).IsZero() {
		t.Error("IsZero")
	}
}
