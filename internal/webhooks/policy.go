package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// Policy is the operator's setting of which destinations webhooks may reach. Public addresses
// always; loopback when AllowLoopback (`pandastack up`: a receiver on the same machine); every
// other non-public range (private, link-local, CGNAT, unique-local, multicast, reserved) only
// inside Allow. It is checked when a webhook is made and again at every dial, on the address the
// name resolved to (a name that later resolves elsewhere is refused then).
type Policy struct {
	AllowLoopback bool
	Allow         []netip.Prefix
}

// nonPublic are ranges that are not the public internet, besides what netip's predicates name.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// Allowed reports whether the policy lets a webhook reach ip; the error says why not.
func (p Policy) Allowed(ip netip.Addr) error {
	ip = ip.Unmap()
	for _, pre := range p.Allow {
		if pre.Contains(ip) {
			return nil
		}
	}
	switch {
	case ip.IsLoopback():
		if p.AllowLoopback {
			return nil
		}
		return refused(ip, "a loopback address")
	case ip.IsPrivate(), ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(),
		ip.IsMulticast(), ip.IsUnspecified():
		return refused(ip, "not a public address")
	}
	for _, pre := range nonPublic {
		if pre.Contains(ip) {
			return refused(ip, "not a public address")
		}
	}
	return nil
}

func refused(ip netip.Addr, why string) error {
	return errdefs.Invalidf("webhook destination %s is %s: this server's webhook policy refuses it (an operator may allow ranges with --webhook-allow)", ip, why)
}

// Limits of a webhook's definition.
const (
	MaxURLBytes    = 2048
	MaxEvents      = 32
	MaxPerTeam     = 20
	resolveTimeout = 5 * time.Second
)

// CheckURL validates a webhook URL: http or https, a host, no credentials, not too long, and
// every address the host resolves to allowed by the policy.
func (p Policy) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > MaxURLBytes {
		return nil, errdefs.Invalidf("url is %d bytes: at most %d", len(raw), MaxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errdefs.Invalidf("url %q does not parse: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errdefs.Invalidf("url must be http:// or https://, not %q", raw)
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return nil, errdefs.Invalidf("url %q has no host", raw)
	}
	if u.User != nil {
		return nil, errdefs.Invalidf("url must not carry credentials: verify deliveries by their signature instead")
	}
	if u.Fragment != "" {
		return nil, errdefs.Invalidf("url must not have a #fragment")
	}
	ips, err := resolve(ctx, u.Hostname())
	if err != nil {
		return nil, errdefs.Invalidf("url's host %q does not resolve: %v", u.Hostname(), err)
	}
	for _, ip := range ips {
		if err := p.Allowed(ip); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// dialer dials only addresses the policy allows (checked after name resolution, on the address
// actually dialled).
func (p Policy) dialer() *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("webhook dial to %q: not an IP address", address)
		}
		return p.Allowed(ip)
	}}
}
