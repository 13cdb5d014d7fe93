package network

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestQEMUTapFd hands a slot's tap to QEMU the way the runtime does (ExtraFiles + fd=3; QEMU
// stays in the host namespace) and checks QEMU takes it, with the virtio-net header. The VM is
// never started (-S), so no guest kernel is needed.
func TestQEMUTapFd(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	e := newEnv(t)
	p := e.open(Config{Ready: -1, DNS: netip.MustParseAddr("198.18.255.53")})
	s := e.acquire(p, Policy{})
	tap, err := s.OpenTap()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qemu, "-M", "microvm", "-accel", "tcg", "-S", "-nodefaults", "-display", "none",
		"-monitor", "stdio",
		"-netdev", "tap,id=n0,fd=3",
		"-device", "virtio-net-device,netdev=n0,mac="+GuestMAC.String())
	cmd.ExtraFiles = []*os.File{tap}
	cmd.Stdin = strings.NewReader("info network\nquit\n")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("qemu did not quit")
	}
	tap.Close()
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "n0: index=0,type=tap,fd=3") {
		t.Errorf("qemu did not take the tap:\n%s", out)
	}
}
