package network

import (
	"fmt"
	"net/netip"
)

// Egress is a sandbox's outbound network policy (API field `egress`). Internet defaults to on;
// Allow and Deny are IPv4 CIDRs. Deny wins over Allow, Allow over the always-blocked ranges
// (other sandboxes, this host, link-local), and Internet decides the rest.
type Egress struct {
	Internet *bool    `json:"internet,omitempty"`
	Allow    []string `json:"allow,omitempty"`
	Deny     []string `json:"deny,omitempty"`
}

// MaxEgressRules bounds each of allow and deny.
const MaxEgressRules = 64

// Policy validates e and turns it into a slot policy. Its errors are *EgressError: the caller's
// input is wrong, not the host.
func (e *Egress) Policy() (Policy, error) {
	pol := Policy{Internet: true}
	if e == nil {
		return pol, nil
	}
	if e.Internet != nil {
		pol.Internet = *e.Internet
	}
	parse := func(field string, in []string) ([]netip.Prefix, error) {
		if len(in) > MaxEgressRules {
			return nil, badEgress("egress.%s has %d entries; at most %d", field, len(in), MaxEgressRules)
		}
		var out []netip.Prefix
		for _, s := range in {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return nil, badEgress("egress.%s: %q is not an IPv4 CIDR (like 10.1.0.0/16) or address", field, s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if !p.Addr().Is4() {
				return nil, badEgress("egress.%s: %q is not IPv4 (sandboxes have no IPv6)", field, s)
			}
			out = append(out, p.Masked())
		}
		return out, nil
	}
	var err error
	if pol.Allow, err = parse("allow", e.Allow); err != nil {
		return pol, err
	}
	if pol.Deny, err = parse("deny", e.Deny); err != nil {
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
