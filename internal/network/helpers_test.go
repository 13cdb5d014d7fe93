package network

// Test scaffolding. Every test makes its own names (a random prefix "pt…"), its own slot CIDR
// (a free random /22 in 10.201–250.x.x) and its own "outside world", and sends traffic only to
// addresses inside namespaces it made (or to the host's addresses on veths it made).
//
// The outside world: a namespace "<prefix>-outside-0" joined to the host by a veth pair,
// 198.18.X.1/30 on the host side (so it is also one of the host's own addresses) and 198.18.X.2
// inside, plus 198.19.Y.10 on its loopback, routed from the host via 198.18.X.2 (198.18.0.0/15
// is the benchmarking range: nothing real lives there). It serves HTTP on :8080, answering with
// the address it saw the request come from, and echoes UDP on :53 (a stand-in resolver).
//
// The guest stand-in, without a VM: a namespace "<prefix>-guest-<index>" holding a tap "eth0"
// configured exactly like the guest (10.0.2.15/24, MAC 52:54:00:12:34:56, default via
// 10.0.2.1). The test opens the slot's tap0 with Slot.OpenTap — the very fd QEMU would get,
// virtio-net header and all — and the guest's eth0, and copies frames between the two in
// userspace (stripping / prepending the 10-byte virtio-net header). So every packet takes the
// path a real guest's would: into tap0 through the fd, then the slot namespace's NAT and
// forward/egress chains, the veth, and the host's rules.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network tests need root (namespaces, nftables)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	for _, bin := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (the tests use it for set-up and assertions)", bin)
		}
	}
}

func randInt(n int) int {
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(err)
	}
	return int(v.Int64())
}

func newPrefix() string {
	b := make([]byte, 2)
	rand.Read(b)
	return "pt" + hex.EncodeToString(b)
}

// overlapsRoute says whether p overlaps any IPv4 route or address in the host namespace.
func overlapsRoute(p netip.Prefix) bool {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return true
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // default route
		}
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		if ones > 0 && netip.PrefixFrom(a.Unmap(), ones).Overlaps(p) {
			return true
		}
	}
	return false
}

// freeCIDR picks an unused random /bits inside 10.201.0.0–10.250.255.255.
func freeCIDR(t testing.TB, bits int) netip.Prefix {
	t.Helper()
	for range 100 {
		size := 1 << (32 - bits)
		n := uint32(10)<<24 | uint32(201+randInt(50))<<16 | uint32(randInt(65536/size)*size)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), bits)
		if !overlapsRoute(p) {
			return p
		}
	}
	t.Fatal("no free test CIDR")
	return netip.Prefix{}
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func output(args ...string) string {
	out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
	return string(out)
}

// leftovers lists what carries prefix: namespaces, host links, host nftables tables.
func leftovers(prefix string) []string {
	var left []string
	for _, l := range strings.Split(output("ip", "netns", "list"), "\n") {
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
	for _, l := range strings.Split(output("nft", "list", "tables"), "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), nftTable+"-"+prefix) {
			left = append(left, strings.TrimSpace(l))
		}
	}
	return left
}

// poolLeftovers is leftovers without the test's own outside and guest namespaces.
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
	needRoot(t)
	e := &testEnv{t: t, prefix: newPrefix(), cidr: freeCIDR(t, 22)}
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

func nsHandle(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// listenIn opens a listener inside namespace ns and serves h on it until the test ends.
func listenIn(t testing.TB, ns netns.NsHandle, addr string, h http.Handler) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := runIn(ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln
}

// whoHandler answers "<name> <remote ip>".
func whoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s %s", name, host)
	})
}

type outside struct {
	ns       string
	h        netns.NsHandle
	hostAddr netip.Addr // host end of the outside veth: one of the host's own addresses
	addr     netip.Addr // the outside server
	other    netip.Addr // a second outside address, in another range
}

func (e *testEnv) newOutside() *outside {
	t := e.t
	t.Helper()
	var x, y int
	for {
		x, y = randInt(64)*4, randInt(256)
		if !overlapsRoute(netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/30", x))) &&
			!overlapsRoute(netip.MustParsePrefix(fmt.Sprintf("198.19.%d.0/24", y))) {
			break
		}
	}
	o := &outside{
		ns:       e.prefix + "-outside-0",
		hostAddr: netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", x)),
		addr:     netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", x)),
		other:    netip.MustParseAddr(fmt.Sprintf("198.19.%d.10", y)),
	}
	link := e.prefix + "-o0"
	t.Cleanup(func() {
		exec.Command("ip", "route", "del", fmt.Sprintf("198.19.%d.0/24", y)).Run()
		exec.Command("ip", "link", "del", link).Run()
		exec.Command("ip", "netns", "del", o.ns).Run()
	})
	for _, c := range [][]string{
		{"ip", "netns", "add", o.ns},
		{"ip", "-n", o.ns, "link", "set", "lo", "up"},
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", o.ns},
		{"ip", "addr", "add", o.hostAddr.String() + "/30", "dev", link},
		{"ip", "link", "set", link, "up"},
		{"ip", "-n", o.ns, "addr", "add", o.addr.String() + "/30", "dev", "eth0"},
		{"ip", "-n", o.ns, "link", "set", "eth0", "up"},
		{"ip", "-n", o.ns, "addr", "add", o.other.String() + "/32", "dev", "lo"},
		{"ip", "-n", o.ns, "route", "add", "default", "via", o.hostAddr.String()},
		{"ip", "route", "add", fmt.Sprintf("198.19.%d.0/24", y), "via", o.addr.String()},
	} {
		run(t, c...)
	}
	o.h = nsHandle(t, o.ns)
	listenIn(t, o.h, "0.0.0.0:8080", whoHandler("outside"))
	var pc net.PacketConn
	if err := runIn(o.h, func() (err error) { pc, err = net.ListenPacket("udp4", "0.0.0.0:53"); return }); err != nil {
		t.Fatalf("udp listen: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	return o
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
		run(t, c...)
	}
	g.h = nsHandle(t, g.ns)
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

func dialIn(ns netns.NsHandle, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := runIn(ns, func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return })
	return c, err
}

// httpGet fetches http://addr/ with connections made in namespace ns (none: the host's).
func httpGet(ns netns.NsHandle, addr string, timeout time.Duration) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			if ns == netns.None() {
				return (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp4", a)
			}
			return dialIn(ns, "tcp4", a, timeout)
		}}
	cl := &http.Client{Transport: tr, Timeout: timeout + time.Second}
	resp, err := cl.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// udpExchange sends msg from namespace ns to addr and returns the reply.
func udpExchange(ns netns.NsHandle, addr, msg string, timeout time.Duration) (string, error) {
	c, err := dialIn(ns, "udp4", addr, timeout)
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
	body, err := httpGet(ns, addr, timeout)
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
