// Package network owns per-sandbox networking on a host: a pool of network "slots", each a
// network namespace holding the tap device a sandbox's VMM attaches to, joined to the host by a
// veth pair with a /30 from the slot CIDR, with NAT and an nftables egress policy.
//
// The layout inside every slot namespace is identical, because it is baked into VM snapshots:
// tap0 is 10.0.2.1/24 with MAC 02:00:00:00:00:01, the guest is 10.0.2.15/24 with MAC
// 52:54:00:12:34:56 (gateway and DNS 10.0.2.1). The host reaches guest TCP port P at
// SandboxAddr:P; the guest's traffic leaves through the veth, source-NATed to SandboxAddr in the
// namespace and to the host's address by the host's masquerade rule.
//
// Slots are made ahead of need by a background filler, so Acquire only applies the egress
// policy; released slots are wiped (policy, conntrack) and recycled. On Open, slots left behind
// by an earlier process (namespaces and host links carrying the pool's prefix) are deleted, or
// kept for Adopt when Config.Keep says so. See docs/networking.md.
package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The fixed layout inside every slot namespace.
const (
	TapName  = "tap0"  // the VMM's tap device
	VethName = "veth0" // the namespace end of the veth pair
)

var (
	TapAddr   = netip.MustParsePrefix("10.0.2.1/24") // tap0's address: the guest's gateway and DNS
	GuestAddr = netip.MustParseAddr("10.0.2.15")     // the guest's address
	TapMAC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	GuestMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
)

// Policy is a sandbox's egress policy. Rules are evaluated in this order: the always-blocked
// destinations (Blocked, the slot CIDR: other sandboxes and every host end) are dropped; Open
// (ranges the operator opened) skips the next step; the private ranges (Private) are dropped;
// then Deny drops, Allow accepts, and Internet decides the rest. So no Allow entry opens an
// always-blocked or private destination, and with Internet false only Allow is reachable. The
// host's own addresses are dropped on the host (table pandastack, chain slot_input) whatever the
// policy. The zero Policy reaches nothing. Prefixes must be IPv4 (sandboxes have no IPv6).
//
// Guest DNS (to 10.0.2.1:53, DNATed to the resolver the operator configured) works when the
// resolver's address is allowed by Deny, Allow and Internet — the blocked ranges aside, since the
// resolver is the operator's choice.
type Policy struct {
	Internet bool
	Allow    []netip.Prefix
	Deny     []netip.Prefix
	Open     []netip.Prefix
}

func (p Policy) validate() (Policy, error) {
	norm := func(ps []netip.Prefix) ([]netip.Prefix, error) {
		out := make([]netip.Prefix, 0, len(ps))
		for _, x := range ps {
			v4, ok := toIPv4(x)
			if !ok {
				return nil, fmt.Errorf("network: %v: only IPv4 prefixes are supported", x)
			}
			out = append(out, v4)
		}
		return out, nil
	}
	var err error
	q := Policy{Internet: p.Internet}
	if q.Allow, err = norm(p.Allow); err != nil {
		return q, err
	}
	if q.Deny, err = norm(p.Deny); err != nil {
		return q, err
	}
	if q.Open, err = norm(p.Open); err != nil {
		return q, err
	}
	return q, nil
}

func covers(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowsDNS says whether the policy lets the guest reach the resolver at target.
func (p Policy) allowsDNS(target netip.Addr) bool {
	return !covers(p.Deny, target) && (p.Internet || covers(p.Allow, target))
}

type slotState int

const (
	stateReady slotState = iota
	stateInUse
	stateGone
)

// Slot is one sandbox's network: a namespace with tap0 and the veth to the host.
type Slot struct {
	Index       int        // position in the slot CIDR: the /30 at CIDR + 4*Index
	Namespace   string     // name under /var/run/netns (`ip netns exec <Namespace> ...` works)
	HostLink    string     // host end of the veth pair
	HostAddr    netip.Addr // host end's address (.1 of the /30)
	SandboxAddr netip.Addr // namespace end's address (.2): the host dials guest port P here
	TapName     string     // always "tap0"

	pool *Pool
	ns   netns.NsHandle
	nc   *nftables.Conn  // lasting, in ns
	nl   *netlink.Handle // in ns

	mu    sync.Mutex
	state slotState

	// blockedSet: the blocked chain holds the fixed ranges and open, the operator's ranges last
	// written (used by apply only, which is never concurrent for one slot).
	blockedSet bool
	open       []netip.Prefix
}

// NetnsPath is the namespace's bind mount, usable with setns(2) or `ip netns`.
func (s *Slot) NetnsPath() string { return filepath.Join(NetnsDir, s.Namespace) }

// dnsTarget is where the guest's DNS to 10.0.2.1:53 is sent (invalid: nowhere).
func (s *Slot) dnsTarget() netip.Addr {
	if s.pool.dnsViaHostAddr {
		return s.HostAddr
	}
	return s.pool.dns
}

// OpenTap opens tap0 inside the slot's namespace (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR) and returns
// the file; give it to the VMM, e.g. as ExtraFiles[0] with QEMU's `-netdev tap,id=n0,fd=3`.
// The VMM process itself need not be in the namespace. The tap accepts one opener at a time.
func (s *Slot) OpenTap() (*os.File, error) {
	var fd int
	err := runIn(s.ns, func() error {
		var err error
		fd, err = openTunFd(TapName, tapFlags)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("network: slot %d: %w", s.Index, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+s.Namespace+"/"+TapName), nil
}

// Run runs fn on an OS thread inside the slot's namespace (sockets fn creates, and processes it
// starts with os/exec, belong to the namespace). Goroutines fn starts do not. The thread goes
// back to the scheduler afterwards, so a child started with Pdeathsig is not killed by the
// thread's end.
func (s *Slot) Run(fn func() error) error { return runIn(s.ns, fn) }

// Release takes the slot back: its egress policy is cleared before Release returns; then, in
// the background, its tracked connections are forgotten and it joins the ready pool again, or
// is deleted if the pool already holds enough ready slots, is closed, or the tap is still open
// (call Release after the VMM has exited). The Slot must not be used afterwards.
func (s *Slot) Release() error {
	s.mu.Lock()
	if s.state != stateInUse {
		s.mu.Unlock()
		return errors.New("network: Release of a slot that is not in use")
	}
	s.state = stateReady
	s.mu.Unlock()
	return s.pool.release(s)
}

// clearPolicy empties the slot's egress chain.
func (s *Slot) clearPolicy() error {
	clearEgress(s.nc)
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("clear egress: %w", err)
	}
	return nil
}

// wipe forgets every tracked connection of a released slot, in its namespace and on the host
// (whose forward path knows the slot's flows by state, so a stale entry could let an old peer
// back in to the next sandbox), and reports whether its tap is still attached to a file. prev
// is an earlier error of the release, returned as is (the slot is then deleted anyway).
func (s *Slot) wipe(prev error) (attached bool, err error) {
	if prev != nil {
		return false, prev
	}
	if err := s.nl.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return false, fmt.Errorf("flush conntrack: %w", err)
	}
	// Walks the host's whole table (~3 ms with 256k buckets): off the caller's path.
	if err := s.pool.forgetHostConntrack(s.SandboxAddr); err != nil {
		return false, err
	}
	l, err := s.nl.LinkByName(TapName)
	if err != nil {
		return false, err
	}
	return l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0, nil
}

// forgetHostConntrack deletes the host's tracked connections from or to a slot address, so a
// recycled slot inherits no established flows. A deletion walks the host's whole table (~3 ms
// with 256k buckets), so concurrent calls are served by one walk (sweep).
func (p *Pool) forgetHostConntrack(a netip.Addr) error {
	done := make(chan error, 1)
	p.sweepMu.Lock()
	p.sweepQ = append(p.sweepQ, sweepReq{a, done})
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
	p.sweepMu.Unlock()
	return <-done
}

// sweep deletes the host's tracked connections of every queued address, one table walk per
// batch, until the queue is empty.
func (p *Pool) sweep() {
	for {
		p.sweepMu.Lock()
		q := p.sweepQ
		p.sweepQ = nil
		if len(q) == 0 {
			p.sweeping = false
			p.sweepMu.Unlock()
			return
		}
		p.sweepMu.Unlock()
		var filters []netlink.CustomConntrackFilter
		var err error
		for _, r := range q {
			for _, dir := range []netlink.ConntrackFilterType{netlink.ConntrackOrigSrcIP, netlink.ConntrackOrigDstIP} {
				f := &netlink.ConntrackFilter{}
				if e := f.AddIP(dir, r.addr.AsSlice()); e != nil {
					err = e
				}
				filters = append(filters, f)
			}
		}
		if err == nil {
			if _, e := p.rootNL.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...); e != nil {
				err = fmt.Errorf("host conntrack: %w", e)
			}
		}
		for _, r := range q {
			r.done <- err
		}
	}
}
