package network

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config configures a Pool. The zero value gives the defaults.
type Config struct {
	// CIDR is the IPv4 range slots take their /30 from (default 10.200.0.0/16: 16,384 slots).
	CIDR netip.Prefix
	// Ready is how many slots are kept ready ahead of need (default 8; negative: none, every
	// Acquire creates its slot). Up to Ready + Ready/2 released slots are kept for reuse.
	Ready int
	// Prefix names everything the pool makes: namespaces "<prefix>-<index>", host veths
	// "<prefix>-h<index>". Lowercase letters and digits, starting with a letter (default "ps").
	// Open reclaims whatever carries it, so two pools on one host need different prefixes.
	Prefix string
	// DNS is the resolver the guest's DNS (10.0.2.1:53) is forwarded to. Zero: the first IPv4
	// nameserver of /etc/resolv.conf. A loopback resolver (a stub such as 127.0.0.53) cannot be
	// reached from a namespace, so then the guest's DNS goes to the slot's HostAddr:53 instead,
	// where a resolver on the host must listen (see docs/networking.md). No nameserver: no DNS.
	DNS netip.Addr
	// Keep, if set, is asked about every slot namespace Open finds left over from an earlier
	// process; those it keeps (a VMM still uses them) can be taken back with Adopt, the rest
	// are deleted.
	Keep func(namespace string) bool
	// Logger gets the pool's warnings (default slog.Default()).
	Logger *slog.Logger
}

// Pool hands out slots. It is safe for concurrent use.
type Pool struct {
	cfg            Config
	log            *slog.Logger
	cidr           netip.Prefix
	nslots         int
	maxReady       int
	hostTableName  string
	dns            netip.Addr // resolver (invalid: none)
	dnsOnHost      bool       // the resolver is the host itself: the host input chain lets DNS in
	dnsViaHostAddr bool       // loopback resolver: guests' DNS goes to each slot's HostAddr
	rootNL         *netlink.Handle
	hostMu         sync.Mutex     // serializes host nftables changes
	hostNC         *nftables.Conn // lasting nftables connection in the host namespace

	mu        sync.Mutex
	closed    bool
	finished  bool // host table deleted after Close
	ready     []*Slot
	inUse     map[int]*Slot
	kept      map[string]int // leftover namespaces kept for Adopt
	taken     []bool         // indices in use by a live, kept or being-made slot
	next      int
	creating  int
	releasing int // released slots being wiped or deleted in the background

	wake chan struct{}
	quit chan struct{}
	bg   sync.WaitGroup

	// Host conntrack sweeps: one walk of the host's table serves every slot released meanwhile.
	sweepMu  sync.Mutex
	sweepQ   []sweepReq
	sweeping bool
}

type sweepReq struct {
	addr netip.Addr
	done chan error
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// Open prepares the host (IPv4 forwarding, the host nftables table), reclaims slots left over
// by an earlier process, and starts filling the ready pool in the background.
func Open(cfg Config) (*Pool, error) {
	if !cfg.CIDR.IsValid() {
		cfg.CIDR = netip.MustParsePrefix("10.200.0.0/16")
	}
	if cfg.Ready == 0 {
		cfg.Ready = 8
	} else if cfg.Ready < 0 {
		cfg.Ready = 0
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, "ps")
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cidr := cfg.CIDR.Masked()
	if !cidr.Addr().Is4() || cidr.Bits() > 30 || cidr.Bits() < 8 {
		return nil, fmt.Errorf("network: slot CIDR %v: need an IPv4 prefix between /8 and /30", cfg.CIDR)
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("network: prefix %q: lowercase letters and digits, starting with a letter", cfg.Prefix)
	}
	nslots := 1 << (30 - cidr.Bits())
	if n := len(cfg.Prefix) + 2 + len(strconv.Itoa(nslots-1)); n >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("network: prefix %q too long for %d slots (interface names are at most %d bytes)",
			cfg.Prefix, nslots, unix.IFNAMSIZ-1)
	}
	p := &Pool{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "network"),
		cidr:     cidr,
		nslots:   nslots,
		maxReady: cfg.Ready + cfg.Ready/2,
		inUse:    map[int]*Slot{},
		kept:     map[string]int{},
		taken:    make([]bool, nslots),
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
	}
	p.hostTableName = nftTable
	if cfg.Prefix != "ps" {
		p.hostTableName = nftTable + "-" + cfg.Prefix
	}
	if err := p.setupDNS(); err != nil {
		return nil, err
	}
	var err error
	if p.rootNL, err = netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		return nil, fmt.Errorf("network: netlink: %w", err)
	}
	if p.hostNC, err = nftables.New(nftables.AsLasting()); err != nil {
		p.rootNL.Close()
		return nil, fmt.Errorf("network: nftables: %w", err)
	}
	if err := p.prepareHost(); err != nil {
		p.hostNC.CloseLasting()
		p.rootNL.Close()
		return nil, err
	}
	p.bg.Add(1)
	go p.fill()
	p.kick()
	return p, nil
}

func (p *Pool) setupDNS() error {
	a := p.cfg.DNS
	if !a.IsValid() {
		var err error
		if a, err = resolverFromFile("/etc/resolv.conf"); err != nil {
			p.log.Warn("no IPv4 nameserver for guests; guest DNS disabled", "err", err)
			return nil
		}
	}
	a = a.Unmap()
	if !a.Is4() {
		return fmt.Errorf("network: DNS %v: need an IPv4 address", a)
	}
	p.dns = a
	if a.IsLoopback() {
		p.dnsOnHost, p.dnsViaHostAddr = true, true
		return nil
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("network: list host addresses: %w", err)
	}
	for _, ad := range addrs {
		if ha, ok := netip.AddrFromSlice(ad.IP); ok && ha.Unmap() == a {
			p.dnsOnHost = true
		}
	}
	return nil
}

// CIDR is the pool's slot range.
func (p *Pool) CIDR() netip.Prefix { return p.cidr }

func (p *Pool) hostLinkPrefix() string { return p.cfg.Prefix + "-h" }

func (p *Pool) nsName(i int) string   { return p.cfg.Prefix + "-" + strconv.Itoa(i) }
func (p *Pool) linkName(i int) string { return p.hostLinkPrefix() + strconv.Itoa(i) }

// parseIndex returns i if name is prefix+strconv.Itoa(i) for a valid slot index i.
func (p *Pool) parseIndex(name, prefix string) (int, bool) {
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return 0, false
	}
	s := name[len(prefix):]
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= p.nslots || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}

// prepareHost turns on forwarding, rebuilds the pool's view from the kernel (reclaiming
// leftovers) and (re)creates the host table.
func (p *Pool) prepareHost() error {
	if err := prepareNetnsDir(); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := writeSysctl("net.ipv4.ip_forward", "1"); err != nil {
		return fmt.Errorf("network: enable IPv4 forwarding: %w", err)
	}
	if err := p.reclaim(); err != nil {
		return err
	}
	if err := p.checkCIDRFree(); err != nil {
		return err
	}
	return p.withHostNft(func(hc *hostConn) error {
		p.resetHostTable(hc.c)
		if err := hc.c.Flush(); err != nil {
			return fmt.Errorf("network: host nftables table %s: %w", p.hostTableName, err)
		}
		return nil
	})
}

// reclaim deletes slot namespaces and host links with the pool's prefix, except namespaces
// Config.Keep keeps (recorded for Adopt).
func (p *Pool) reclaim() error {
	ents, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("network: %w", err)
	}
	nsPrefix := p.cfg.Prefix + "-"
	for _, e := range ents {
		i, ok := p.parseIndex(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		if p.cfg.Keep != nil && p.cfg.Keep(e.Name()) {
			p.kept[e.Name()] = i
			p.taken[i] = true
			continue
		}
		p.log.Info("reclaiming leftover slot", "namespace", e.Name())
		if err := p.rootNL.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.linkName(i)}}); err != nil && !isNotFound(err) {
			p.log.Warn("delete leftover link", "link", p.linkName(i), "err", err)
		}
		if err := removeNamedNetns(e.Name()); err != nil {
			return fmt.Errorf("network: reclaim %s: %w", e.Name(), err)
		}
	}
	links, err := p.rootNL.LinkList()
	if err != nil {
		return fmt.Errorf("network: list links: %w", err)
	}
	for _, l := range links {
		i, ok := p.parseIndex(l.Attrs().Name, p.hostLinkPrefix())
		if !ok || p.taken[i] {
			continue
		}
		p.log.Info("reclaiming leftover link", "link", l.Attrs().Name)
		if err := p.rootNL.LinkDel(l); err != nil && !isNotFound(err) {
			return fmt.Errorf("network: reclaim link %s: %w", l.Attrs().Name, err)
		}
	}
	return nil
}

// checkCIDRFree refuses a slot CIDR that overlaps a route of the host that is not this pool's
// (another agent's slots, a LAN): the slots' /30s would shadow it or be shadowed. The default
// route overlaps everything and does not count.
func (p *Pool) checkCIDRFree() error {
	routes, err := p.rootNL.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("network: list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		dst, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if !ok || ones == 0 {
			continue
		}
		rp := netip.PrefixFrom(dst, ones).Masked()
		if !rp.Overlaps(p.cidr) {
			continue
		}
		name := ""
		if l, err := p.rootNL.LinkByIndex(r.LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		if _, ours := p.parseIndex(name, p.hostLinkPrefix()); ours {
			continue // a slot kept for adoption
		}
		return fmt.Errorf("network: slot CIDR %v overlaps the host's route to %v (dev %s); choose another range (--network-cidr)", p.cidr, rp, name)
	}
	return nil
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

type hostConn struct{ c *nftables.Conn }

// withHostNft runs fn with the host namespace's nftables connection, one at a time.
func (p *Pool) withHostNft(fn func(*hostConn) error) error {
	p.hostMu.Lock()
	defer p.hostMu.Unlock()
	return fn(&hostConn{p.hostNC})
}

// connect opens the slot's lasting netlink connections into its namespace (a fresh socket
// per operation costs more than the operation).
func (s *Slot) connect() error {
	var err error
	if s.nc, err = nftables.New(nftables.WithNetNSFd(int(s.ns)), nftables.AsLasting()); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if s.nl, err = netlink.NewHandleAt(s.ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	return nil
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps Ready slots ready.
func (p *Pool) fill() {
	defer p.bg.Done()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		case <-retry.C:
		}
		for {
			p.mu.Lock()
			// Slots being released count: most come back ready.
			need := !p.closed && len(p.ready)+p.creating+p.releasing < p.cfg.Ready
			if need {
				p.creating++
			}
			p.mu.Unlock()
			if !need {
				break
			}
			s, err := p.create()
			p.mu.Lock()
			p.creating--
			closed := p.closed
			if err == nil && !closed {
				p.ready = append(p.ready, s)
			}
			p.mu.Unlock()
			if err == nil && closed {
				s.destroy()
			}
			if err != nil {
				p.log.Warn("creating a ready slot failed", "err", err, "retry_in", backoff)
				retry.Reset(backoff)
				backoff = min(2*backoff, 10*time.Second)
				break
			}
			backoff = 100 * time.Millisecond
		}
	}
}

// ErrExhausted is returned by Acquire when every slot of the CIDR is in use.
var ErrExhausted = errors.New("network: no free slot in the slot CIDR")

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("network: pool closed")

func (p *Pool) allocIndex() (int, error) {
	for k := 0; k < p.nslots; k++ {
		i := (p.next + k) % p.nslots
		if !p.taken[i] {
			p.taken[i] = true
			p.next = (i + 1) % p.nslots
			return i, nil
		}
	}
	return 0, ErrExhausted
}

func (p *Pool) slotAt(i int) *Slot {
	base := p.cidr.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(4 * i)
	at := func(off uint32) netip.Addr {
		v := n + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return &Slot{
		Index: i, Namespace: p.nsName(i), HostLink: p.linkName(i),
		HostAddr: at(1), SandboxAddr: at(2), TapName: TapName,
		pool: p, ns: netns.None(),
	}
}

// create makes a new slot (ready state, empty egress policy).
func (p *Pool) create() (*Slot, error) {
	p.mu.Lock()
	i, err := p.allocIndex()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s := p.slotAt(i)
	if err := s.build(); err != nil {
		if derr := s.destroy(); derr != nil {
			p.log.Warn("cleaning up a failed slot", "namespace", s.Namespace, "err", derr)
		}
		return nil, fmt.Errorf("network: create slot %d: %w", i, err)
	}
	return s, nil
}

// build creates the slot's namespace, tap, veth pair, addresses, routes and nftables table.
func (s *Slot) build() error {
	p := s.pool
	var err error
	s.ns, err = createNamedNetns(s.Namespace, func() error {
		if err := writeSysctl("net.ipv4.ip_forward", "1"); err != nil {
			return fmt.Errorf("sysctl net.ipv4.ip_forward: %w", err)
		}
		// Sandboxes are IPv4 only; without IPv6 in the kernel these do not exist.
		for _, k := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
			if err := writeSysctl(k, "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("sysctl %s: %w", k, err)
			}
		}
		return createPersistentTap(TapName, tapFlags)
	})
	if err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	h := s.nl

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.HostLink}, PeerName: VethName,
		PeerNamespace: netlink.NsFd(int(s.ns))}
	if err := p.rootNL.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", s.HostLink, err)
	}
	host, err := p.rootNL.LinkByName(s.HostLink)
	if err != nil {
		return err
	}
	if err := p.rootNL.AddrAdd(host, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(s.HostAddr, 30))}); err != nil {
		return fmt.Errorf("address %v: %w", s.HostAddr, err)
	}
	if err := p.rootNL.LinkSetUp(host); err != nil {
		return err
	}

	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	v, err := h.LinkByName(VethName)
	if err != nil {
		return err
	}
	if err := h.AddrAdd(v, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(s.SandboxAddr, 30))}); err != nil {
		return err
	}
	if err := h.LinkSetUp(v); err != nil {
		return err
	}
	tap, err := h.LinkByName(TapName)
	if err != nil {
		return err
	}
	if err := h.LinkSetHardwareAddr(tap, TapMAC); err != nil {
		return err
	}
	if err := h.AddrAdd(tap, &netlink.Addr{IPNet: ipnet(TapAddr)}); err != nil {
		return err
	}
	if err := h.LinkSetUp(tap); err != nil {
		return err
	}
	// The guest's MAC is fixed, so spare the first packet to a restored guest an ARP round trip.
	if err := h.NeighAdd(&netlink.Neigh{LinkIndex: tap.Attrs().Index, Family: unix.AF_INET,
		State: netlink.NUD_PERMANENT, IP: GuestAddr.AsSlice(), HardwareAddr: GuestMAC}); err != nil {
		return fmt.Errorf("guest neighbour: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: v.Attrs().Index, Gw: s.HostAddr.AsSlice()}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}

	addSlotTable(s.nc, s, s.dnsTarget())
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

// destroy deletes the slot's host link and namespace (its tap and veth end go with it) and
// frees its index. Missing pieces are no error.
func (s *Slot) destroy() error {
	p := s.pool
	s.mu.Lock()
	s.state = stateGone
	s.mu.Unlock()
	var errs []error
	if err := p.rootNL.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.HostLink}}); err != nil && !isNotFound(err) {
		errs = append(errs, fmt.Errorf("delete %s: %w", s.HostLink, err))
	}
	if err := removeNamedNetns(s.Namespace); err != nil {
		errs = append(errs, err)
	}
	if s.nc != nil {
		s.nc.CloseLasting()
		s.nc = nil
	}
	if s.nl != nil {
		s.nl.Close()
		s.nl = nil
	}
	if s.ns.IsOpen() {
		s.ns.Close()
		s.ns = netns.None()
	}
	p.mu.Lock()
	delete(p.inUse, s.Index)
	if len(errs) == 0 {
		p.taken[s.Index] = false
	}
	p.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("network: delete slot %s: %w", s.Namespace, errors.Join(errs...))
	}
	return nil
}

// Acquire hands out a slot with egress policy pol applied. It takes a ready slot when there is
// one (the cost is then the policy's one nftables transaction) and otherwise creates one.
func (p *Pool) Acquire(ctx context.Context, pol Policy) (*Slot, error) {
	pol, err := pol.validate()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	var s *Slot
	if len(p.ready) > 0 {
		s = p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
	}
	p.mu.Unlock()
	p.kick()
	if s == nil {
		if s, err = p.create(); err != nil {
			return nil, err
		}
	}
	if err := s.apply(pol); err != nil {
		if derr := s.destroy(); derr != nil {
			p.log.Warn("deleting a slot whose policy failed", "namespace", s.Namespace, "err", derr)
		}
		return nil, fmt.Errorf("network: apply policy to slot %d: %w", s.Index, err)
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.inUse[s.Index] = s
	}
	p.mu.Unlock()
	if closed {
		s.destroy()
		return nil, ErrClosed
	}
	s.mu.Lock()
	s.state = stateInUse
	s.mu.Unlock()
	return s, nil
}

// SetPolicy replaces the egress policy of a slot in use (one taken before its sandbox was known:
// a prepared VMM's, whose slot was acquired with the empty policy, which lets nothing out).
func (s *Slot) SetPolicy(pol Policy) error {
	pol, err := pol.validate()
	if err != nil {
		return err
	}
	return s.apply(pol)
}

// apply replaces the slot's egress policy (one nftables transaction in its namespace). The
// blocked chain is rewritten only when the operator's open ranges differ from what the slot has.
func (s *Slot) apply(pol Policy) error {
	rewriteBlocked := !s.blockedSet || !slices.Equal(s.open, pol.Open)
	setEgress(s.nc, pol, s.pool.cidr, s.dnsTarget(), rewriteBlocked)
	if err := s.nc.Flush(); err != nil {
		s.blockedSet = false
		return err
	}
	s.blockedSet, s.open = true, slices.Clone(pol.Open)
	return nil
}

func (p *Pool) release(s *Slot) error {
	// The policy goes at once; the slot's guest can reach nothing from here on.
	cerr := s.clearPolicy()
	p.mu.Lock()
	delete(p.inUse, s.Index)
	closed := p.closed
	if !closed {
		p.bg.Add(1)
		p.releasing++
	}
	p.mu.Unlock()
	if closed {
		return errors.Join(cerr, s.destroy(), p.finishIfEmpty())
	}
	// Forgetting tracked connections (each flush walks the kernel's whole conntrack hash, ~3 ms
	// here) and putting the slot back happen off the caller's path.
	go func() {
		defer p.bg.Done()
		attached, err := s.wipe(cerr)
		if err != nil {
			p.log.Warn("wiping a released slot failed; deleting it", "namespace", s.Namespace, "err", err)
		} else if attached {
			p.log.Warn("released slot's tap is still open; deleting it instead of recycling", "namespace", s.Namespace)
		}
		p.mu.Lock()
		keep := err == nil && !attached && !p.closed && len(p.ready) < p.maxReady
		if keep {
			p.ready = append(p.ready, s)
			p.releasing--
		}
		p.mu.Unlock()
		if !keep {
			if err := s.destroy(); err != nil {
				p.log.Warn("deleting a released slot", "err", err)
			}
			p.mu.Lock()
			p.releasing--
			p.mu.Unlock()
			p.kick()
		}
	}()
	return nil
}

// Adopt takes back a slot namespace that Open kept (Config.Keep) — one whose VMM outlived the
// previous process — re-applying its policy. The slot is in use; Release it as usual.
func (p *Pool) Adopt(namespace string, pol Policy) (*Slot, error) {
	pol, err := pol.validate()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	i, ok := p.kept[namespace]
	if ok {
		delete(p.kept, namespace)
	}
	closed := p.closed
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("network: %s is not a kept slot", namespace)
	}
	if closed {
		return nil, ErrClosed
	}
	s := p.slotAt(i)
	fail := func(err error) (*Slot, error) {
		p.mu.Lock()
		p.kept[namespace] = i
		p.mu.Unlock()
		if s.nc != nil {
			s.nc.CloseLasting()
		}
		if s.nl != nil {
			s.nl.Close()
		}
		if s.ns.IsOpen() {
			s.ns.Close()
		}
		return nil, fmt.Errorf("network: adopt %s: %w", namespace, err)
	}
	if s.ns, err = netns.GetFromPath(s.NetnsPath()); err != nil {
		return fail(err)
	}
	if _, err := p.rootNL.LinkByName(s.HostLink); err != nil {
		return fail(err)
	}
	if err := s.connect(); err != nil {
		return fail(err)
	}
	// The pool rebuilt the host table at Open; a slot's own table survived in its namespace.
	if err := s.apply(pol); err != nil {
		return fail(err)
	}
	s.state = stateInUse
	p.mu.Lock()
	p.inUse[i] = s
	p.mu.Unlock()
	return s, nil
}

// Stats counts the pool's slots.
type Stats struct {
	Ready     int // ready to hand out
	InUse     int // acquired or adopted, not released
	Creating  int // being made by the background filler
	Releasing int // released, being wiped or deleted in the background
	Kept      int // left over by an earlier process, kept for Adopt
}

// Stats returns current counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Ready: len(p.ready), InUse: len(p.inUse), Creating: p.creating,
		Releasing: p.releasing, Kept: len(p.kept)}
}

// WaitReady blocks until the ready pool is full (or ctx ends); for start-up and tests.
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		st := p.Stats()
		if st.Ready >= p.cfg.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close stops the filler and deletes the ready slots. Slots still in use (and kept ones not
// adopted) are left alone, with the host table they need: their VMMs may outlive this process,
// and the next Open reclaims or adopts them. When none is left the host table is deleted too.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	close(p.quit)
	p.bg.Wait()
	var errs []error
	for _, s := range ready {
		if err := s.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.finishIfEmpty(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// finishIfEmpty deletes the host table once the pool is closed and holds no slot any more.
func (p *Pool) finishIfEmpty() error {
	p.mu.Lock()
	done := p.closed && len(p.inUse)+len(p.kept) == 0 && !p.finished
	if done {
		p.finished = true
	}
	p.mu.Unlock()
	if !done {
		return nil
	}
	defer p.rootNL.Close()
	defer p.hostNC.CloseLasting()
	err := p.withHostNft(func(hc *hostConn) error {
		hc.c.DelTable(p.hostTable())
		return hc.c.Flush()
	})
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("network: delete host table: %w", err)
	}
	return nil
}

// Orphans names the namespaces and host links with this pool's prefix that no slot holds (ready,
// in use, kept for adoption, being made or released): what a crash or a failed release left.
// (The pool reclaims them all when it starts; this finds them while it runs.)
func (p *Pool) Orphans() ([]string, error) {
	var names []string
	ents, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("network: %w", err)
	}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	links, err := p.rootNL.LinkList()
	if err != nil {
		return nil, fmt.Errorf("network: list links: %w", err)
	}
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	var out []string
	for _, n := range names {
		if p.orphan(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// orphan: name is one of this pool's namespaces or host links, and its slot index is not held.
func (p *Pool) orphan(name string) bool {
	i, ok := p.parseIndex(name, p.cfg.Prefix+"-")
	if !ok {
		i, ok = p.parseIndex(name, p.hostLinkPrefix())
	}
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return i >= len(p.taken) || !p.taken[i]
}

// RemoveOrphan deletes a namespace or host link Orphans named, if no slot holds it still.
func (p *Pool) RemoveOrphan(name string) error {
	if !p.orphan(name) {
		return fmt.Errorf("network: %s is not a leftover of this pool", name)
	}
	if strings.HasPrefix(name, p.hostLinkPrefix()) {
		err := p.rootNL.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}})
		if err != nil && !isNotFound(err) {
			return fmt.Errorf("network: delete link %s: %w", name, err)
		}
		return nil
	}
	return removeNamedNetns(name)
}
