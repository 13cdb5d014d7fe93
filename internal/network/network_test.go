package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/network/nettest"
	"github.com/pandastack/pandastack/internal/testenv"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func pfx(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 32) }

func TestPolicyValidate(t *testing.T) {
	p, err := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8"),
		netip.MustParsePrefix("::ffff:192.168.1.0/120")}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	if p.Allow[0].String() != "10.0.0.0/8" || p.Allow[1].String() != "192.168.1.0/24" {
		t.Errorf("normalized: %v", p.Allow)
	}
	if _, err := (Policy{Deny: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}}).validate(); err == nil {
		t.Error("IPv6 prefix accepted")
	}
	dns := netip.MustParseAddr("192.0.2.53")
	for _, c := range []struct {
		p    Policy
		want bool
	}{
		{Policy{Internet: true}, true},
		{Policy{}, false},
		{Policy{Allow: []netip.Prefix{pfx(dns)}}, true},
		{Policy{Internet: true, Deny: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, false},
	} {
		if got := c.p.allowsDNS(dns); got != c.want {
			t.Errorf("%+v allowsDNS = %v", c.p, got)
		}
	}
}

func TestResolverFromFile(t *testing.T) {
	f := t.TempDir() + "/resolv.conf"
	os.WriteFile(f, []byte("# x\nsearch lan\nnameserver fe80::1\nnameserver 127.0.0.53\nnameserver 9.9.9.9\n"), 0o644)
	a, err := resolverFromFile(f)
	if err != nil || a.String() != "127.0.0.53" {
		t.Fatalf("got %v %v", a, err)
	}
}

func TestOpenValidates(t *testing.T) {
	for _, cfg := range []Config{
		{CIDR: netip.MustParsePrefix("10.0.0.0/31")},
		{CIDR: netip.MustParsePrefix("fd00::/64")},
		{Prefix: "Bad-Name"},
		{Prefix: "waytoolong", CIDR: netip.MustParsePrefix("10.0.0.0/16")},
	} {
		if p, err := Open(cfg); err == nil {
			p.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
}

// TestSlotLayout checks what a ready slot looks like from the kernel: the fixed layout inside,
// the veth, the nftables tables, and that OpenTap gives a vnet-header tap fd.
func TestSlotLayout(t *testing.T) {
	e := newEnv(t)
	p := e.open(Config{Ready: 1, DNS: netip.MustParseAddr("198.18.255.53")})
	s := e.acquire(p, Policy{Internet: true})
	if want := fmt.Sprintf("%s-%d", e.prefix, s.Index); s.Namespace != want || s.NetnsPath() != "/var/run/netns/"+want {
		t.Errorf("namespace %q path %q", s.Namespace, s.NetnsPath())
	}
	first := e.cidr.Addr().As4()
	if s.HostAddr.As4()[3] != first[3]+byte(4*s.Index)+1 || s.SandboxAddr.Next() != s.HostAddr.Next().Next() {
		t.Errorf("addresses host %v sandbox %v (index %d, CIDR %v)", s.HostAddr, s.SandboxAddr, s.Index, e.cidr)
	}
	in := nettest.Output("ip", "-n", s.Namespace, "-br", "addr")
	for _, want := range []string{"tap0", "10.0.2.1/24", "veth0", s.SandboxAddr.String() + "/30"} {
		if !strings.Contains(in, want) {
			t.Errorf("namespace addresses lack %q:\n%s", want, in)
		}
	}
	if l := nettest.Output("ip", "-n", s.Namespace, "-br", "link", "show", "tap0"); !strings.Contains(l, TapMAC.String()) {
		t.Errorf("tap0: %s", l)
	}
	if n := nettest.Output("ip", "-n", s.Namespace, "neigh", "show", "dev", "tap0"); !strings.Contains(n, "10.0.2.15 lladdr 52:54:00:12:34:56 PERMANENT") {
		t.Errorf("guest neighbour: %q", n)
	}
	if r := nettest.Output("ip", "-n", s.Namespace, "route", "show", "default"); !strings.Contains(r, "via "+s.HostAddr.String()+" dev veth0") {
		t.Errorf("default route: %q", r)
	}
	if h := nettest.Output("ip", "-br", "addr", "show", s.HostLink); !strings.Contains(h, s.HostAddr.String()+"/30") {
		t.Errorf("host link: %q", h)
	}
	if v := strings.TrimSpace(nettest.Output("ip", "netns", "exec", s.Namespace, "cat", "/proc/sys/net/ipv4/ip_forward")); v != "1" {
		t.Errorf("namespace ip_forward = %q", v)
	}
	if tables := nettest.Output("ip", "netns", "exec", s.Namespace, "nft", "list", "tables"); strings.TrimSpace(tables) != "table ip pandastack" {
		t.Errorf("namespace tables: %q", tables)
	}
	rules := nettest.Output("ip", "netns", "exec", s.Namespace, "nft", "list", "table", "ip", "pandastack")
	for _, want := range []string{
		`iifname "veth0" ip daddr ` + s.SandboxAddr.String() + ` meta l4proto tcp dnat to 10.0.2.15`,
		`iifname "tap0" ip daddr 10.0.2.1 udp dport 53 dnat to 198.18.255.53`,
		`oifname "tap0" masquerade`,
		"ip daddr " + e.cidr.String() + " drop",
		"ip daddr 169.254.0.0/16 drop",
		"ip daddr 127.0.0.0/8 drop",
		"jump blocked",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("namespace rules lack %q:\n%s", want, rules)
		}
	}
	host := nettest.Output("nft", "list", "table", "ip", nftTable+"-"+e.prefix)
	for _, want := range []string{
		"ip saddr " + e.cidr.String() + " ip daddr != " + e.cidr.String() + " masquerade",
		`iifname "` + e.prefix + `-h*" jump slot_input`,
	} {
		if !strings.Contains(host, want) {
			t.Errorf("host rules lack %q:\n%s", want, host)
		}
	}
	if v := strings.TrimSpace(nettest.Output("cat", "/proc/sys/net/ipv4/ip_forward")); v != "1" {
		t.Errorf("host ip_forward = %q", v)
	}

	f, err := s.OpenTap()
	if err != nil {
		t.Fatal(err)
	}
	ifr, _ := unix.NewIfreq("")
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNGETIFF, ifr); err != nil {
		t.Fatal(err)
	}
	if fl := ifr.Uint16(); fl&(unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR) != unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_VNET_HDR || ifr.Name() != "tap0" {
		t.Errorf("tap fd: name %q flags %#x", ifr.Name(), fl)
	}
	if _, err := s.OpenTap(); err == nil {
		t.Error("second OpenTap succeeded while the first is open")
	}
	f.Close()
	var inside string
	s.Run(func() error {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			return err
		}
		inside = fmt.Sprint(st.Ino)
		return nil
	})
	var want unix.Stat_t
	unix.Stat(s.NetnsPath(), &want)
	if inside != fmt.Sprint(want.Ino) {
		t.Errorf("Run ran in netns inode %s, want %d", inside, want.Ino)
	}
}

// TestEgressPolicy drives the guest stand-in against the outside world under each policy.
func TestEgressPolicy(t *testing.T) {
	e := newEnv(t)
	o := nettest.NewOutside(t, e.prefix)
	p := e.open(Config{Ready: 2, DNS: o.Addr})
	web := func(a netip.Addr) string { return a.String() + ":8080" }
	srange := netip.MustParsePrefix("198.18.0.0/15")
	cases := []struct {
		name       string
		pol        Policy
		main, alt  bool // outside server reachable at o.Addr, at o.Other
		dnsReaches bool
	}{
		{"internet", Policy{Internet: true}, true, true, true},
		{"no-internet", Policy{}, false, false, false},
		{"deny-cidr", Policy{Internet: true, Deny: []netip.Prefix{pfx(o.Addr)}}, false, true, false},
		{"allow-overrides-no-internet", Policy{Allow: []netip.Prefix{pfx(o.Addr)}}, true, false, true},
		{"deny-beats-allow", Policy{Allow: []netip.Prefix{srange}, Deny: []netip.Prefix{pfx(o.Other)}}, true, false, true},
		{"internet-again-on-recycled-slot", Policy{Internet: true}, true, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := p.Acquire(context.Background(), c.pol)
			if err != nil {
				t.Fatal(err)
			}
			var g *guest
			defer func() {
				if g != nil {
					g.close() // the VMM is gone before its slot is released
				}
				if err := s.Release(); err != nil {
					t.Error(err)
				}
			}()
			g = (&testEnv{t: t, prefix: e.prefix}).newGuest(s)
			want := func(ok bool) string {
				if ok {
					return "outside "
				}
				return ""
			}
			body := expectGet(t, g.h, web(o.Addr), want(c.main))
			if c.main && body != "outside "+o.HostAddr.String() {
				t.Errorf("outside saw %q, want the host's masqueraded address %v", body, o.HostAddr)
			}
			expectGet(t, g.h, web(o.Other), want(c.alt))
			timeout := okTimeout
			if !c.dnsReaches {
				timeout = failTimeout
			}
			reply, err := udpExchange(g.h, "10.0.2.1:53", "q", timeout)
			if c.dnsReaches && reply != "echo:q" {
				t.Errorf("guest DNS via 10.0.2.1:53: %q %v", reply, err)
			}
			if !c.dnsReaches && err == nil {
				t.Errorf("guest DNS reached the resolver (%q), want blocked", reply)
			}
		})
	}
}

// TestDNSViaHost: with a loopback resolver (a stub on the host), the guest's DNS goes to the
// slot's HostAddr:53, which the host's rules let in; other ports of HostAddr stay closed.
func TestDNSViaHost(t *testing.T) {
	e := newEnv(t)
	p := e.open(Config{Ready: -1, DNS: netip.MustParseAddr("127.0.0.53")})
	for _, c := range []struct {
		pol  Policy
		want bool
	}{{Policy{Internet: true}, true}, {Policy{}, false}} {
		s := e.acquire(p, c.pol)
		// The stand-in for the host's stub, listening on the slot's host address only.
		pc, err := net.ListenPacket("udp4", s.HostAddr.String()+":53")
		if err != nil {
			t.Fatal(err)
		}
		go nettest.UDPEcho(pc, "stub:")
		g := e.newGuest(s)
		timeout := okTimeout
		if !c.want {
			timeout = failTimeout
		}
		reply, err := udpExchange(g.h, "10.0.2.1:53", "q", timeout)
		if c.want && reply != "stub:q" {
			t.Errorf("%+v: guest DNS via the host stub: %q %v", c.pol, reply, err)
		}
		if !c.want && err == nil {
			t.Errorf("%+v: guest DNS reached the host stub (%q), want blocked", c.pol, reply)
		}
		if got, err := udpExchange(g.h, s.HostAddr.String()+":53", "direct", failTimeout); err == nil {
			t.Errorf("%+v: guest reached HostAddr:53 directly (%q)", c.pol, got)
		}
		pc.Close()
	}
}

// TestIsolationAndInbound: the host reaches a guest port at SandboxAddr; a sandbox reaches
// neither another slot nor any address of the host, unless its Allow list says so.
func TestIsolationAndInbound(t *testing.T) {
	e := newEnv(t)
	o := nettest.NewOutside(t, e.prefix)
	p := e.open(Config{Ready: 2, DNS: o.Addr})
	a := e.acquire(p, Policy{Internet: true})
	b := e.acquire(p, Policy{Internet: true})
	ga, gb := e.newGuest(a), e.newGuest(b)
	nettest.ListenIn(t, ga.h, "10.0.2.15:8000", nettest.WhoHandler("guest-a"))
	nettest.ListenIn(t, gb.h, "10.0.2.15:8000", nettest.WhoHandler("guest-b"))

	// A service of the host's, on every host address.
	hl := testenv.Serve(t, "tcp4", "0.0.0.0:0", func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost"))
		}
	})
	hport := hl.Addr().(*net.TCPAddr).Port
	hostAt := func(x netip.Addr) string { return fmt.Sprintf("%s:%d", x, hport) }
	priv := o.AddPrivate(t)

	t.Run("inbound", func(t *testing.T) {
		// The guest sees the connection come from its gateway (masquerade towards the tap).
		expectGet(t, netns.None(), b.SandboxAddr.String()+":8000", "guest-b 10.0.2.1")
		expectGet(t, netns.None(), a.SandboxAddr.String()+":8000", "guest-a 10.0.2.1")
	})
	t.Run("sanity", func(t *testing.T) {
		expectGet(t, ga.h, o.Addr.String()+":8080", "outside")
		expectGet(t, netns.None(), priv.String()+":8080", "outside")
		expectGet(t, netns.None(), hostAt(o.HostAddr), "host")
	})
	t.Run("no-other-slot", func(t *testing.T) {
		expectGet(t, ga.h, b.SandboxAddr.String()+":8000", "")
		expectGet(t, gb.h, a.SandboxAddr.String()+":8000", "")
	})
	t.Run("no-host", func(t *testing.T) {
		expectGet(t, ga.h, hostAt(a.HostAddr), "")            // its own gateway on the host
		expectGet(t, ga.h, hostAt(b.HostAddr), "")            // another slot's host end
		expectGet(t, ga.h, hostAt(o.HostAddr), "")            // a host address outside the slot CIDR
		expectGet(t, ga.h, "10.0.2.1:"+fmt.Sprint(hport), "") // the namespace itself
	})
	t.Run("allow-never-opens-blocked", func(t *testing.T) {
		// The rules themselves (not only the API's validation) keep blocked ranges shut: a
		// policy allowing everything of the kind still reaches only the outside.
		c := e.acquire(p, Policy{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"),
			netip.MustParsePrefix("10.0.0.0/8"), e.cidr, pfx(b.SandboxAddr), pfx(b.HostAddr),
			pfx(o.HostAddr), netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("127.0.0.0/8")}})
		gc := e.newGuest(c)
		expectGet(t, gc.h, o.Addr.String()+":8080", "outside") // 0.0.0.0/0 opens the outside
		expectGet(t, gc.h, b.SandboxAddr.String()+":8000", "") // another sandbox
		expectGet(t, gc.h, hostAt(b.HostAddr), "")             // another slot's host end
		expectGet(t, gc.h, hostAt(c.HostAddr), "")             // its own gateway on the host
		expectGet(t, gc.h, hostAt(o.HostAddr), "")             // a host address outside the slot CIDR
		expectGet(t, gc.h, "10.0.2.1:"+fmt.Sprint(hport), "")  // the namespace itself
		expectGet(t, gc.h, priv.String()+":8080", "")          // a private range
		// Ranges we do not route anywhere on a test host (metadata, loopback…) are checked in
		// the rules: the blocked chain is jumped to before any allow rule.
		eg := nettest.Output("ip", "netns", "exec", c.Namespace, "nft", "list", "chain", "ip", nftTable, chEgress)
		if j, a := strings.Index(eg, "jump "+chBlocked), strings.Index(eg, "ip daddr 0.0.0.0/0 accept"); j < 0 || a < 0 || j > a {
			t.Errorf("egress chain does not match the blocked ranges before the allow list:\n%s", eg)
		}
		bl := nettest.Output("ip", "netns", "exec", c.Namespace, "nft", "list", "chain", "ip", nftTable, chBlocked)
		for _, r := range append(append([]Range{{e.cidr, "slots"}}, Blocked...), Private...) {
			if !strings.Contains(bl, "ip daddr "+r.Prefix.String()+" drop") {
				t.Errorf("blocked chain lacks %v:\n%s", r.Prefix, bl)
			}
		}
		if r := nettest.Output("nft", "list", "table", "ip", nftTable+"-"+e.prefix); strings.Contains(r, "slot_allow") || strings.Contains(r, c.HostLink) {
			t.Errorf("host table has per-slot allow rules:\n%s", r)
		}
	})
	t.Run("operator-opens-private-range", func(t *testing.T) {
		open := netip.PrefixFrom(priv, 24).Masked()
		c := e.acquire(p, Policy{Internet: true, Open: []netip.Prefix{open, e.cidr}})
		gc := e.newGuest(c)
		expectGet(t, gc.h, priv.String()+":8080", "outside")
		expectGet(t, gc.h, b.SandboxAddr.String()+":8000", "") // an open range never opens the slots
		expectGet(t, gc.h, hostAt(o.HostAddr), "")
		shut := e.acquire(p, Policy{Internet: true})
		expectGet(t, e.newGuest(shut).h, priv.String()+":8080", "")
	})
}

// waitReleased waits for the pool's background release work.
func waitReleased(t testing.TB, p *Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Releasing > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("release work still pending: %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitGone(t testing.TB, ns string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(NetnsDir + "/" + ns); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s still exists", ns)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRecycle: a released slot goes back to the ready pool wiped (no policy, no tracked
// connections in its namespace or on the host) and serves the next sandbox's policy.
func TestRecycle(t *testing.T) {
	e := newEnv(t)
	o := nettest.NewOutside(t, e.prefix)
	p := e.open(Config{Ready: 2, DNS: o.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The host tracks the slot's forwarded connections by state too, so the host's table must
	// be wiped as well.
	s, err := p.Acquire(ctx, Policy{Internet: true})
	if err != nil {
		t.Fatal(err)
	}
	g := e.newGuest(s)
	c, err := nettest.DialIn(g.h, "tcp4", o.Addr.String()+":8080", okTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if conntrackCount(t, s.ns, netip.Addr{}) == 0 || conntrackCount(t, netns.None(), s.SandboxAddr) == 0 {
		t.Fatal("no tracked connection before Release: the test tests nothing")
	}
	g.close()
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, p)
	if _, err := os.Stat(s.NetnsPath()); err != nil {
		t.Fatalf("released slot was not kept for reuse: %v (stats %+v)", err, p.Stats())
	}
	if n := conntrackCount(t, s.ns, netip.Addr{}); n != 0 {
		t.Errorf("%d tracked connections left in the released slot", n)
	}
	if n := conntrackCount(t, netns.None(), s.SandboxAddr); n != 0 {
		t.Errorf("%d host tracked connections of the released slot left", n)
	}
	if eg := nettest.Output("ip", "netns", "exec", s.Namespace, "nft", "list", "chain", "ip", "pandastack", "egress"); strings.Contains(eg, "accept") || strings.Contains(eg, "jump") {
		t.Errorf("released slot kept its policy:\n%s", eg)
	}
	// Take slots until the recycled one comes back; give it no internet.
	var again *Slot
	for range 4 {
		x := e.acquire(p, Policy{})
		if x.Index == s.Index {
			again = x
			break
		}
	}
	if again == nil {
		t.Fatalf("slot %d never handed out again", s.Index)
	}
	g2 := e.newGuest(again)
	expectGet(t, g2.h, o.Addr.String()+":8080", "")
}

// conntrackCount counts tracked IPv4 connections in namespace ns (netns.None(): the host), only
// those from or to a if a is valid.
func conntrackCount(t testing.TB, ns netns.NsHandle, a netip.Addr) int {
	t.Helper()
	var h *netlink.Handle
	var err error
	if ns == netns.None() {
		h, err = netlink.NewHandle(unix.NETLINK_NETFILTER)
	} else {
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		src, _ := netip.AddrFromSlice(f.Forward.SrcIP)
		dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
		if !a.IsValid() || src.Unmap() == a || dst.Unmap() == a {
			n++
		}
	}
	return n
}

// TestChurn200 creates and releases 200 slots and checks that nothing is left behind:
// no namespace, veth, tap or nftables table.
func TestChurn200(t *testing.T) {
	e := newEnv(t)
	p := e.open(Config{Ready: 4, DNS: netip.MustParseAddr("198.18.255.53")})
	ctx := context.Background()
	var slots []*Slot
	start := time.Now()
	for range 200 {
		s, err := p.Acquire(ctx, Policy{Internet: true, Deny: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}})
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	made := time.Since(start)
	// While they exist: one table in a slot namespace, and 200 tap0s.
	if tables := nettest.Output("ip", "netns", "exec", slots[0].Namespace, "nft", "list", "tables"); strings.TrimSpace(tables) != "table ip pandastack" {
		t.Errorf("slot tables: %q", tables)
	}
	taps := 0
	for _, s := range slots {
		if strings.Contains(nettest.Output("ip", "-n", s.Namespace, "-br", "link", "show", "tap0"), "tap0") {
			taps++
		}
	}
	if taps != 200 || len(leftovers(e.prefix)) < 400 {
		t.Errorf("%d taps, %d namespaces+links+tables", taps, len(leftovers(e.prefix)))
	}
	start = time.Now()
	for _, s := range slots {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Since(start)
	start = time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("200 slots: acquire (mostly creating) %v (%v each), release %v, close %v",
		made, made/200, released, time.Since(start))
	if left := leftovers(e.prefix); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	// The taps went with their namespaces: no tap0 anywhere but in namespaces others made.
	for _, s := range slots {
		if _, err := os.Stat(s.NetnsPath()); !os.IsNotExist(err) {
			t.Errorf("%s still mounted", s.NetnsPath())
		}
	}
}

// TestReclaim: a new process's Open deletes slots a dead one left, except those Config.Keep
// keeps, which Adopt takes back working.
func TestReclaim(t *testing.T) {
	e := newEnv(t)
	o := nettest.NewOutside(t, e.prefix)
	p1 := e.open(Config{Ready: 2, DNS: o.Addr})
	a := e.acquire(p1, Policy{Internet: true})
	b := e.acquire(p1, Policy{Internet: true, Allow: []netip.Prefix{pfx(o.HostAddr)}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p1.WaitReady(ctx)
	p1.abandon() // the process "dies": everything stays in the kernel
	if n := len(poolLeftovers(e.prefix)); n < 9 {
		t.Fatalf("expected 4 namespaces, 4 links and a table before reclaim, got %d", n)
	}

	// No ready slots: filling would soon recreate b's index (and so its names) if it is free.
	p2 := e.open(Config{Ready: -1, DNS: o.Addr, Keep: func(ns string) bool { return ns == a.Namespace }})
	if _, err := os.Stat(b.NetnsPath()); !os.IsNotExist(err) {
		t.Errorf("leftover %s not reclaimed", b.Namespace)
	}
	if _, err := netlink.LinkByName(b.HostLink); err == nil {
		t.Errorf("leftover link %s not reclaimed", b.HostLink)
	}
	if st := p2.Stats(); st.Kept != 1 {
		t.Errorf("stats %+v, want 1 kept", st)
	}
	if _, err := p2.Adopt(b.Namespace, Policy{}); err == nil {
		t.Error("adopted a reclaimed slot")
	}
	a2, err := p2.Adopt(a.Namespace, Policy{Internet: true})
	if err != nil {
		t.Fatal(err)
	}
	if a2.Index != a.Index || a2.SandboxAddr != a.SandboxAddr {
		t.Errorf("adopted %+v, was %+v", a2, a)
	}
	g := e.newGuest(a2)
	expectGet(t, g.h, o.Addr.String()+":8080", "outside")
	s3 := e.acquire(p2, Policy{})
	if s3.Index == a.Index {
		t.Error("a kept slot's index was handed out again")
	}
	g.close()
	a2.Release()
	s3.Release()
	p2.Close()
	if left := poolLeftovers(e.prefix); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// abandon stops the pool's goroutines without touching the kernel, as a crash would.
func (p *Pool) abandon() {
	p.mu.Lock()
	p.closed, p.finished = true, true
	p.mu.Unlock()
	close(p.quit)
	p.bg.Wait()
}

// BenchmarkAcquireRelease measures the hot path: Acquire from the ready pool (policy applied)
// and Release (wipe, back to the pool).
func BenchmarkAcquireRelease(b *testing.B) {
	e := newEnv(b)
	p := e.open(Config{Ready: 8, DNS: netip.MustParseAddr("198.18.255.53")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	pol := Policy{Internet: true, Deny: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	var acq, rel []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		s, err := p.Acquire(ctx, pol)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Release(); err != nil {
			b.Fatal(err)
		}
		acq = append(acq, t1.Sub(t0))
		rel = append(rel, time.Since(t1))
	}
	b.StopTimer()
	st := p.Stats()
	for name, ds := range map[string][]time.Duration{"acquire": acq, "release": rel} {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), name+"-p50-ns")
		b.ReportMetric(float64(ds[len(ds)*9/10].Nanoseconds()), name+"-p90-ns")
	}
	if st.Ready == 0 {
		b.Logf("ready pool ran dry: %+v", st)
	}
}

// BenchmarkCreateSlot measures making (and deleting) one slot: the cost the ready pool moves
// off the create path.
func BenchmarkCreateSlot(b *testing.B) {
	e := newEnv(b)
	p := e.open(Config{Ready: -1, DNS: netip.MustParseAddr("198.18.255.53")})
	var mk, del time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := p.create()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.destroy(); err != nil {
			b.Fatal(err)
		}
		mk += t1.Sub(t0)
		del += time.Since(t1)
	}
	b.ReportMetric(float64(mk.Nanoseconds())/float64(b.N), "create-ns/op")
	b.ReportMetric(float64(del.Nanoseconds())/float64(b.N), "delete-ns/op")
}

// TestOpenRefusesTakenCIDR: a second pool (another agent) on a CIDR whose slots already have
// routes on this host is refused with a clear error instead of shadowing them.
func TestOpenRefusesTakenCIDR(t *testing.T) {
	e := newEnv(t)
	first := e.open(Config{Ready: 1, DNS: netip.MustParseAddr("198.18.255.53")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := first.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	other := nettest.NewPrefix()
	t.Cleanup(func() { sweep(other) })
	p, err := Open(Config{CIDR: e.cidr, Prefix: other, Ready: -1, DNS: netip.MustParseAddr("198.18.255.53")})
	if err == nil {
		p.Close()
		t.Fatal("a second pool on a CIDR in use was opened")
	}
	if !strings.Contains(err.Error(), "overlaps") || !strings.Contains(err.Error(), "--network-cidr") {
		t.Errorf("error does not say what to do: %v", err)
	}
}

// TestEgressGuard: a team's allow list cannot name an always-blocked or private destination in
// any notation; wider entries are taken (the rules keep the blocked ranges shut); the operator's
// open ranges make their private range allowable, and cannot themselves open a blocked range.
func TestEgressGuard(t *testing.T) {
	slots := netip.MustParsePrefix("10.213.0.0/16")
	g := Guard{SlotCIDR: slots}
	refused := []string{
		"10.213.0.0/16", "10.213.4.1", "10.213.4.1/32", // the slots and their host ends
		"10.0.0.0/8", "192.168.1.10", "172.16.0.0/12", "100.64.0.1", // private
		"169.254.169.254", "169.254.0.0/16", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", // metadata, also as mapped IPv6
		"127.0.0.1", "::ffff:127.0.0.1/128", "0.0.0.0", "224.0.0.251", "255.255.255.255", "240.0.0.1/8",
		"::1", "::/0", "fe80::1", "fd00::/8", "2001:db8::/32", // IPv6
		"localhost", "metadata.google.internal", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "127.1", "169.254.169.254%eth0",
	}
	for _, s := range refused {
		internet := false
		_, err := (&Egress{Internet: &internet, Allow: []string{s}}).Policy(g)
		var ee *EgressError
		if !errors.As(err, &ee) {
			t.Errorf("allow %q: err %v, want an EgressError", s, err)
		}
	}
	// Control plane side (no slot range known): the fixed ranges are still refused.
	if _, err := (&Egress{Allow: []string{"169.254.169.254"}}).Policy(Guard{}); err == nil {
		t.Error("metadata address allowed without a slot range")
	}
	for _, s := range []string{"0.0.0.0/0", "8.0.0.0/7", "203.0.113.7", "::ffff:203.0.113.0/120", " 198.51.100.0/24 ", "::ffff:0.0.0.0/96"} {
		pol, err := (&Egress{Allow: []string{s}}).Policy(g)
		if err != nil || len(pol.Allow) != 1 || !pol.Allow[0].Addr().Is4() {
			t.Errorf("allow %q: %+v %v, want taken as IPv4", s, pol, err)
		}
	}
	// Deny may name anything.
	if _, err := (&Egress{Deny: []string{"10.0.0.0/8", "169.254.169.254"}}).Policy(g); err != nil {
		t.Errorf("deny of blocked ranges: %v", err)
	}
	// The operator opened 10.5.0.0/16: a team may allow inside it, not beyond.
	open, err := ParseOpen([]string{"10.5.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	og := Guard{Open: open, SlotCIDR: slots}
	if pol, err := (&Egress{Allow: []string{"10.5.1.2"}}).Policy(og); err != nil || len(pol.Open) != 1 {
		t.Errorf("allow inside the open range: %+v %v", pol, err)
	}
	if _, err := (&Egress{Allow: []string{"10.6.1.2"}}).Policy(og); err == nil {
		t.Error("allow outside the open range taken")
	}
	for _, bad := range []string{"0.0.0.0/0", "169.254.0.0/16", "127.0.0.1", "224.0.0.0/8", "fd00::/8", "nope"} {
		if _, err := ParseOpen([]string{bad}); err == nil {
			t.Errorf("operator open range %q accepted", bad)
		}
	}
}
