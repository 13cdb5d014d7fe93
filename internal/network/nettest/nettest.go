// Package nettest is test scaffolding for code that runs guests behind package network's slots:
// it makes throwaway network namespaces, the "outside world" a sandbox's traffic is sent to, and
// helpers to run code, listen and dial inside a namespace.
//
// It is meant for tests only, and needs root (see NeedRoot). It creates only namespaces, veth
// links, addresses and routes in the benchmarking range 198.18.0.0/15 (where nothing real
// lives), and picks random free CIDRs in 10.201.0.0–10.250.255.255 for the caller to use (see
// FreeCIDR). Of its own accord it sends traffic only between the host and the namespaces it
// made, never elsewhere; ListenIn, DialIn and HTTPGet act only on the namespace and address
// their caller gives.
//
// The outside world (NewOutside): a namespace "<prefix>-outside-0" joined to the host by a veth
// pair (host end "<prefix>-o0", "eth0" inside), 198.18.X.1/30 on the host side (so it is also
// one of the host's own addresses) and 198.18.X.2 inside, plus 198.19.Y.10 on its loopback,
// routed from the host via 198.18.X.2. It serves HTTP on :8080, answering with the address it
// saw the request come from, and echoes UDP on :53 (a stand-in resolver).
package nettest

// nettest must not import package network: network's own (internal) tests import nettest.

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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/network/nsrun"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NeedRoot skips the test unless it runs as root with /dev/net/tun, ip and nft available.
func NeedRoot(t testing.TB) {
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

// NewPrefix returns a random name prefix for one test's namespaces, links and tables: "pt"
// followed by 6 hex digits, none of whose namespaces exist. Two agents of one prefix share their
// slots' namespaces (and reclaim each other's): with 4 digits, the ~20 agents a full test run
// starts at once met one in about 300 runs (a fork's tap was busy in another agent's namespace).
func NewPrefix() string {
	for {
		b := make([]byte, 3)
		rand.Read(b)
		p := "pt" + hex.EncodeToString(b)
		if m, _ := filepath.Glob("/var/run/netns/" + p + "-*"); len(m) == 0 {
			return p
		}
	}
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

// FreeCIDR picks a random /bits inside 10.201.0.0–10.250.255.255 that overlaps no route or
// address of the host namespace.
func FreeCIDR(t testing.TB, bits int) netip.Prefix {
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

// Run runs the command args and returns its combined output; the test fails if it fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Output runs the command args and returns its combined output, whether it fails or not.
func Output(args ...string) string {
	out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
	return string(out)
}

// NsHandle opens the named network namespace (as `ip netns` names it) until the test ends.
func NsHandle(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// RunIn runs fn on an OS thread inside ns and restores the thread's namespace afterwards.
func RunIn(ns netns.NsHandle, fn func() error) error { return nsrun.In(ns, fn) }

// ListenIn opens a TCP listener on addr inside namespace ns and serves h on it until the test
// ends.
func ListenIn(t testing.TB, ns netns.NsHandle, addr string, h http.Handler) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := RunIn(ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln
}

// WhoHandler answers "<name> <remote ip>".
func WhoHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s %s", name, host)
	})
}

// Outside is the outside world (see the package comment).
type Outside struct {
	NS       string         // the namespace's name, "<prefix>-outside-0"
	Handle   netns.NsHandle // open until the test ends
	HostAddr netip.Addr     // host end of the outside veth: one of the host's own addresses
	Addr     netip.Addr     // the outside server
	Other    netip.Addr     // a second outside address, in another range
}

// NewOutside makes the outside world for names starting with prefix (at most 12 characters, so
// the host link "<prefix>-o0" fits a Linux interface name) and deletes it when the test ends.
func NewOutside(t testing.TB, prefix string) *Outside {
	t.Helper()
	var x, y int
	for {
		x, y = randInt(64)*4, randInt(256)
		if !overlapsRoute(netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/30", x))) &&
			!overlapsRoute(netip.MustParsePrefix(fmt.Sprintf("198.19.%d.0/24", y))) {
			break
		}
	}
	o := &Outside{
		NS:       prefix + "-outside-0",
		HostAddr: netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", x)),
		Addr:     netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", x)),
		Other:    netip.MustParseAddr(fmt.Sprintf("198.19.%d.10", y)),
	}
	link := prefix + "-o0"
	t.Cleanup(func() {
		exec.Command("ip", "route", "del", fmt.Sprintf("198.19.%d.0/24", y)).Run()
		exec.Command("ip", "link", "del", link).Run()
		exec.Command("ip", "netns", "del", o.NS).Run()
	})
	for _, c := range [][]string{
		{"ip", "netns", "add", o.NS},
		{"ip", "-n", o.NS, "link", "set", "lo", "up"},
		{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", o.NS},
		{"ip", "addr", "add", o.HostAddr.String() + "/30", "dev", link},
		{"ip", "link", "set", link, "up"},
		{"ip", "-n", o.NS, "addr", "add", o.Addr.String() + "/30", "dev", "eth0"},
		{"ip", "-n", o.NS, "link", "set", "eth0", "up"},
		{"ip", "-n", o.NS, "addr", "add", o.Other.String() + "/32", "dev", "lo"},
		{"ip", "-n", o.NS, "route", "add", "default", "via", o.HostAddr.String()},
		{"ip", "route", "add", fmt.Sprintf("198.19.%d.0/24", y), "via", o.Addr.String()},
	} {
		Run(t, c...)
	}
	o.Handle = NsHandle(t, o.NS)
	ListenIn(t, o.Handle, "0.0.0.0:8080", WhoHandler("outside"))
	var pc net.PacketConn
	if err := RunIn(o.Handle, func() (err error) { pc, err = net.ListenPacket("udp4", "0.0.0.0:53"); return }); err != nil {
		t.Fatalf("udp listen: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go UDPEcho(pc, "echo:")
	return o
}

// AddPrivate puts a further address of the outside world at a in a free private range (a
// random 10.201-250.x.x/24 that overlaps no route of the host: nothing real lives there), routed
// from the host like Other, and returns it. It stands in for a LAN or VPC service a sandbox must
// not reach unless the operator opens its range.
func (o *Outside) AddPrivate(t testing.TB) netip.Addr {
	t.Helper()
	p := FreeCIDR(t, 24)
	a := p.Addr().Next().Next().Next().Next().Next().Next().Next().Next().Next().Next() // .10
	t.Cleanup(func() { exec.Command("ip", "route", "del", p.String()).Run() })
	Run(t, "ip", "-n", o.NS, "addr", "add", a.String()+"/32", "dev", "lo")
	Run(t, "ip", "route", "add", p.String(), "via", o.Addr.String())
	return a
}

// UDPEcho answers every datagram on pc with prefix + the datagram, until pc is closed.
func UDPEcho(pc net.PacketConn, prefix string) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo(append([]byte(prefix), buf[:n]...), from)
	}
}

// DialIn dials addr over network ("tcp4", "udp4", …) from namespace ns (netns.None(): the
// host's own).
func DialIn(ns netns.NsHandle, network, addr string, timeout time.Duration) (net.Conn, error) {
	if ns == netns.None() {
		return net.DialTimeout(network, addr, timeout)
	}
	var c net.Conn
	err := RunIn(ns, func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return })
	return c, err
}

// HTTPGet fetches http://addr/ with connections made in namespace ns (netns.None(): the
// host's own) and returns the body.
func HTTPGet(ns netns.NsHandle, addr string, timeout time.Duration) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			if ns == netns.None() {
				return (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp4", a)
			}
			return DialIn(ns, "tcp4", a, timeout)
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
