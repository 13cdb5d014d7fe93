package network

import (
	"fmt"
	"net/netip"
	"strings"
)

// Egress is a sandbox's outbound network policy as a team states it (API field `egress`).
// Internet defaults to on; Allow and Deny are IPv4 CIDRs or addresses. Deny wins over Allow and
// Allow over Internet, but nothing here opens an always-blocked destination (see Blocked): those
// are matched first, in the rules themselves.
type Egress struct {
	Internet *bool    `json:"internet,omitempty"`
	Allow    []string `json:"allow,omitempty"`
	Deny     []string `json:"deny,omitempty"`
}

// MaxEgressRules bounds each of allow and deny.
const MaxEgressRules = 64

// Range is a destination range with the reason it is treated specially.
type Range struct {
	Prefix netip.Prefix
	Why    string
}

// Blocked are the destinations no sandbox ever reaches, whatever its policy or the operator's
// settings say. Every slot's range (the other sandboxes and every host end) is blocked too, and
// the host's own addresses are guarded on the host itself (docs/networking.md).
var Blocked = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local and cloud metadata"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved and broadcast"},
}

// Private are the private ranges: blocked for every sandbox unless the operator opens part of
// them for all sandboxes (Guard.Open, the server's --egress-open). A team cannot open them.
var Private = []Range{
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT)"},
}

// Guard is what a team's policy is checked against besides the fixed ranges: the private ranges
// the operator opened, and (on a host) the slot range.
type Guard struct {
	Open     []netip.Prefix
	SlotCIDR netip.Prefix // zero at the control plane, which does not know the hosts' ranges
	// Stored: the policy was accepted earlier (a sandbox woken or re-adopted, possibly made
	// before a check existed); allow entries inside blocked ranges are then kept instead of
	// refused — harmless, since the rules match the blocked ranges first.
	Stored bool
}

// ParseOpen validates the operator's opened ranges (--egress-open): IPv4 prefixes that overlap
// no always-blocked range.
func ParseOpen(in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("egress open range %q: %v", s, err)
		}
		for _, b := range Blocked {
			if p.Overlaps(b.Prefix) {
				return nil, fmt.Errorf("egress open range %s overlaps %s (%s), which no sandbox may reach", p, b.Prefix, b.Why)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// parsePrefix reads an IPv4 CIDR or address in canonical dotted notation; IPv4-mapped IPv6
// is taken as the IPv4 it maps. Anything else (IPv6, names, octal or integer forms) is refused.
func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not an IPv4 CIDR (like 203.0.113.0/24) or address")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	v4, ok := toIPv4(p)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("not IPv4 (sandboxes have no IPv6)")
	}
	return v4, nil
}

// toIPv4 returns p as a masked IPv4 prefix, reading an IPv4-mapped IPv6 prefix as the IPv4 one
// it maps; ok is false for anything else.
func toIPv4(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	a, bits := p.Addr(), p.Bits()
	if a.Is4In6() {
		a, bits = a.Unmap(), bits-96
	}
	if !a.Is4() || bits < 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// holds reports whether outer contains all of p.
func holds(outer, p netip.Prefix) bool {
	return outer.Bits() <= p.Bits() && outer.Contains(p.Addr())
}

// within reports the range of rs that holds all of p, if one does.
func within(p netip.Prefix, rs []Range) (Range, bool) {
	for _, r := range rs {
		if holds(r.Prefix, p) {
			return r, true
		}
	}
	return Range{}, false
}

// coveredBy reports whether one of ps holds all of p.
func coveredBy(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if holds(q, p) {
			return true
		}
	}
	return false
}

// Policy validates e against g and turns it into a slot policy. Its errors are *EgressError:
// the caller's input is wrong, not the host. An allow entry that lies wholly inside an
// always-blocked range (or a private range the operator did not open) is refused, so a team is
// told at once; a wider entry (0.0.0.0/0) is taken, and opens only what is not blocked — the
// rules match the blocked ranges first whatever the entries say.
func (e *Egress) Policy(g Guard) (Policy, error) {
	pol := Policy{Internet: true, Open: g.Open}
	if e == nil {
		return pol, nil
	}
	if e.Internet != nil {
		pol.Internet = *e.Internet
	}
	blocked := Blocked
	if g.SlotCIDR.IsValid() {
		blocked = append(append([]Range(nil), Blocked...), Range{g.SlotCIDR.Masked(), "this host's sandbox links"})
	}
	parse := func(field string, in []string, checkBlocked bool) ([]netip.Prefix, error) {
		if len(in) > MaxEgressRules {
			return nil, badEgress("egress.%s has %d entries; at most %d", field, len(in), MaxEgressRules)
		}
		var out []netip.Prefix
		for _, s := range in {
			p, err := parsePrefix(strings.TrimSpace(s))
			if err != nil {
				return nil, badEgress("egress.%s: %q is %v", field, s, err)
			}
			if checkBlocked && !g.Stored {
				if r, ok := within(p, blocked); ok {
					return nil, badEgress("egress.%s: %s is in %s (%s), which sandboxes never reach", field, p, r.Prefix, r.Why)
				}
				if r, ok := within(p, Private); ok && !coveredBy(p, g.Open) {
					return nil, badEgress("egress.%s: %s is in %s (%s), which only the operator can open for all sandboxes (--egress-open)", field, p, r.Prefix, r.Why)
				}
			}
			out = append(out, p)
		}
		return out, nil
	}
	var err error
	if pol.Allow, err = parse("allow", e.Allow, true); err != nil {
		return pol, err
	}
	if pol.Deny, err = parse("deny", e.Deny, false); err != nil {
		return pol, err
	}
	return pol, nil
}

// EgressError says what is wrong with an egress policy.
type EgressError struct{ Msg string }

func (e *EgressError) Error() string { return e.Msg }

func badEgress(format string, args ...any) error {
	return &EgressError{Msg: fmt.Sprintf(format, args...)}
}
