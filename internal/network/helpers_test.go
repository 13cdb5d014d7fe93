package network

// Test scaffolding. Every test makes its own names (a random prefix "pt…"), its own slot CIDR
// (a free random /22 in 10.201–250.x.x) and its own "outside world" (nettest.NewOutside, which
// describes it), and sends traffic only to addresses inside namespaces it made (or to the host's
// addresses on veths it made). The pieces that do not depend on this package live in package
// nettest, for other packages' tests too; what is here needs package network's internals.
//
// The guest stand-in, without a VM: a namespace "<prefix>-guest-<index>-<n>" holding a tap "eth0"
// configured exactly like the guest (10.0.2.15/24, MAC 52:54:00:12:34:56, default via
// 10.0.2.1). The test opens the slot's tap0 with Slot.OpenTap — the very fd QEMU would get,
// virtio-net header and all — and the guest's eth0, and copies frames between the two in
// userspace (stripping / prepending the 10-byte virtio-net header). So every packet takes the
// path a real guest's would: into tap0 through the fd, then the slot namespace's NAT and
// forward/egress chains, the veth, and the host's rules.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// leftovers lists what carries prefix: namespaces, host links, host nftables tables.
func leftovers(prefix string) []string {
	var left []string
	for _, l := range strings.Split(nettest.Output("ip", "netns", "list"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left = append(left, "netns "+f[0])
		}
	}
	if links, err := netlink.LinkList(); err == nil {
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, prefix+"-") {
				left = append(left, "link "+l.Attrs().Name)
			}
		}
	}
	for _, l := range strings.Split(nettest.Output("nft", "list", "tables"), "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), nftTable+"-"+prefix) {
			left = append(left, strings.TrimSpace(l))
		}
	}
	return left
}

// poolLeftovers is leftovers without the test's own outside world (namespace and host link)
// and guest namespaces.
func poolLeftovers(prefix string) []string {
	var left []string
	for _, l := range leftovers(prefix) {
		if !strings.Contains(l, prefix+"-outside-") && !strings.Contains(l, prefix+"-guest-") && !strings.HasSuffix(l, prefix+"-o0") {
			left = append(left, l)
		}
	}
	return left
}

// sweep deletes anything carrying prefix, whatever state a failed test left.
func sweep(prefix string) {
	for _, l := range leftovers(prefix) {
		f := strings.Fields(l)
		switch f[0] {
		case "netns":
			exec.Command("ip", "netns", "del", f[1]).Run()
		case "link":
			exec.Command("ip", "link", "del", f[1]).Run()
		case "table":
			exec.Command("nft", "delete", "table", f[1], f[2]).Run()
		}
	}
}

// testEnv is one test's names and clean-up.
type testEnv struct {
	t      testing.TB
	prefix string
	cidr   netip.Prefix
}

func newEnv(t testing.TB) *testEnv {
	nettest.NeedRoot(t)
	e := &testEnv{t: t, prefix: nettest.NewPrefix(), cidr: nettest.FreeCIDR(t, 22)}
	t.Cleanup(func() {
		if left := leftovers(e.prefix); len(left) > 0 {
			t.Logf("sweeping leftovers: %v", left)
			sweep(e.prefix)
		}
	})
	return e
}

func (e *testEnv) open(cfg Config) *Pool {
	e.t.Helper()
	cfg.Prefix = e.prefix
	if !cfg.CIDR.IsValid() {
		cfg.CIDR = e.cidr
	}
	p, err := Open(cfg)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

func (e *testEnv) acquire(p *Pool, pol Policy) *Slot {
	e.t.Helper()
	s, err := p.Acquire(context.Background(), pol)
	if err != nil {
		e.t.Fatalf("Acquire: %v", err)
	}
	e.t.Cleanup(func() { s.Release() })
	return s
}

var guestSeq atomic.Int64

const vnetHdrLen = 10 // struct virtio_net_hdr, the default TUNSETVNETHDRSZ

type guest struct {
	ns    string
	h     netns.NsHandle
	close func() // detaches the stand-in from the slot's tap (also done at the end of the test)
}

// newGuest makes the guest stand-in for slot s (see the top of this file) and wires it to the
// slot's tap until the test ends.
func (e *testEnv) newGuest(s *Slot) *guest {
	t := e.t
	t.Helper()
	g := &guest{ns: fmt.Sprintf("%s-guest-%d-%d", e.prefix, s.Index, guestSeq.Add(1))}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", g.ns).Run() })
	for _, c := range [][]string{
		{"ip", "netns", "add", g.ns},
		{"ip", "-n", g.ns, "link", "set", "lo", "up"},
		{"ip", "-n", g.ns, "tuntap", "add", "dev", "eth0", "mode", "tap"},
		{"ip", "-n", g.ns, "link", "set", "eth0", "address", GuestMAC.String()},
		{"ip", "-n", g.ns, "addr", "add", GuestAddr.String() + "/24", "dev", "eth0"},
		{"ip", "-n", g.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", g.ns, "route", "add", "default", "via", TapAddr.Addr().String()},
	} {
		nettest.Run(t, c...)
	}
	g.h = nettest.NsHandle(t, g.ns)
	var gfd int
	if err := runIn(g.h, func() (err error) { gfd, err = openTunFd("eth0", unix.IFF_TAP|unix.IFF_NO_PI); return }); err != nil {
		t.Fatalf("open guest tap: %v", err)
	}
	tap, err := s.OpenTap()
	if err != nil {
		unix.Close(gfd)
		t.Fatalf("OpenTap: %v", err)
	}
	sfd := int(tap.Fd())
	sfd, err = unix.Dup(sfd)
	tap.Close()
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(gfd, true)
	unix.SetNonblock(sfd, true)
	gf := os.NewFile(uintptr(gfd), "guest-eth0")
	sf := os.NewFile(uintptr(sfd), "slot-tap0")
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // slot → guest: drop the virtio-net header
		defer wg.Done()
		buf := make([]byte, 65536+vnetHdrLen)
		for {
			n, err := sf.Read(buf)
			if err != nil {
				return
			}
			if n > vnetHdrLen {
				gf.Write(buf[vnetHdrLen:n])
			}
		}
	}()
	go func() { // guest → slot: add an all-zero virtio-net header (no offloads)
		defer wg.Done()
		buf := make([]byte, 65536+vnetHdrLen)
		for {
			n, err := gf.Read(buf[vnetHdrLen:])
			if err != nil {
				return
			}
			clear(buf[:vnetHdrLen])
			sf.Write(buf[:vnetHdrLen+n])
		}
	}()
	var once sync.Once
	g.close = func() { once.Do(func() { gf.Close(); sf.Close(); wg.Wait() }) }
	t.Cleanup(g.close)
	return g
}

// udpExchange sends msg from namespace ns to addr and returns the reply.
func udpExchange(ns netns.NsHandle, addr, msg string, timeout time.Duration) (string, error) {
	c, err := nettest.DialIn(ns, "udp4", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

const (
	okTimeout   = 3 * time.Second
	failTimeout = 700 * time.Millisecond
)

// expectGet asserts that an HTTP GET from ns to addr works (want != "") with a body starting
// with want, or fails (want == "").
func expectGet(t testing.TB, ns netns.NsHandle, addr, want string) string {
	t.Helper()
	timeout := okTimeout
	if want == "" {
		timeout = failTimeout
	}
	body, err := nettest.HTTPGet(ns, addr, timeout)
	switch {
	case want == "" && err == nil:
		t.Errorf("GET %s: reached (%q), want blocked", addr, body)
	case want != "" && err != nil:
		t.Errorf("GET %s: %v, want reached", addr, err)
	case want != "" && !strings.HasPrefix(body, want):
		t.Errorf("GET %s: body %q, want prefix %q", addr, body, want)
	}
	return body
}
