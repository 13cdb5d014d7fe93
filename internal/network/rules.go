package network

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// nftables rules, built with github.com/google/nftables (netlink; no `nft` binary needed).
//
// Inside every slot namespace, table ip pandastack:
//
//	chain prerouting  (nat, dstnat)   iifname veth0 ip daddr <slot .2> tcp → dnat 10.0.2.15
//	                                  iifname tap0 ip daddr 10.0.2.1 udp/tcp dport 53 → dnat <resolver>
//	chain postrouting (nat, srcnat)   oifname tap0 masquerade               (guest sees 10.0.2.1)
//	                                  oifname veth0 ip saddr 10.0.2.0/24 masquerade (leaves as .2)
//	chain input       (filter)        from tap0: established/related and ICMP accepted, rest dropped
//	chain forward     (filter, policy drop)
//	                                  ct state established,related accept
//	                                  iifname veth0 oifname tap0 ct status dnat accept   (inbound)
//	                                  iifname tap0 oifname veth0 jump egress
//	chain egress      per-sandbox policy, rewritten at Acquire and flushed at Release:
//	                                  [DNS to the resolver, if the policy lets it]
//	                                  jump blocked
//	                                  ip daddr <deny...> drop
//	                                  ip daddr <allow...> accept
//	                                  [accept, if Internet]
//	chain blocked     rewritten with egress:
//	                  ip daddr {slot CIDR, 0/8, 127/8, 169.254/16, 224/4, 240/4} drop
//	                  ip daddr <operator's open ranges> return
//	                  ip daddr {10/8, 172.16/12, 192.168/16, 100.64/10} drop
//
// A ready slot has an empty egress chain: its guest can reach nothing.
//
// In the host namespace, table ip pandastack (see hostTableName):
//
//	chain postrouting (nat, srcnat)   ip saddr <CIDR> ip daddr != <CIDR> masquerade
//	chain input       (filter)        iifname "<prefix>-h*" jump slot_input
//	chain slot_input  ct state established,related accept
//	                  [udp/tcp dport 53 to the host-side resolver, when the resolver is on the host]
//	                  drop
//	chain forward     (filter) new connections from elsewhere into a slot veth are dropped
//
// The host input chain is what keeps a sandbox away from every address of the host (not only
// the veth's .1): anything a slot sends to the host itself is dropped unless it answers a
// connection the host opened or is DNS to the host's resolver. No policy opens it.

const (
	nftTable     = "pandastack"
	chEgress     = "egress"
	chBlocked    = "blocked"
	chSlotInput  = "slot_input"
	ctStatusDNAT = 0x20 // IPS_DST_NAT
)

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func jump(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func metaIf(key expr.MetaKey, op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

// iif/oif match an interface name exactly; the *Prefix forms match names starting with p
// (nft's "p*").
func iif(n string) []expr.Any       { return metaIf(expr.MetaKeyIIFNAME, expr.CmpOpEq, ifname(n)) }
func oif(n string) []expr.Any       { return metaIf(expr.MetaKeyOIFNAME, expr.CmpOpEq, ifname(n)) }
func iifPrefix(p string) []expr.Any { return metaIf(expr.MetaKeyIIFNAME, expr.CmpOpEq, []byte(p)) }
func oifPrefix(p string) []expr.Any { return metaIf(expr.MetaKeyOIFNAME, expr.CmpOpEq, []byte(p)) }
func notIifPrefix(p string) []expr.Any {
	return metaIf(expr.MetaKeyIIFNAME, expr.CmpOpNeq, []byte(p))
}

// ipField matches the IPv4 source (offset 12) or destination (offset 16) against a prefix.
func ipField(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	p = p.Masked()
	a := p.Addr().As4()
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4}}
	if p.Bits() < 32 {
		m := binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits()))
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: m, Xor: make([]byte, 4)})
	}
	return append(e, &expr.Cmp{Op: op, Register: 1, Data: a[:]})
}

func daddr(p netip.Prefix) []expr.Any    { return ipField(16, p, expr.CmpOpEq) }
func notDaddr(p netip.Prefix) []expr.Any { return ipField(16, p, expr.CmpOpNeq) }
func saddr(p netip.Prefix) []expr.Any    { return ipField(12, p, expr.CmpOpEq) }

func l4proto(proto byte) []expr.Any {
	return metaIf(expr.MetaKeyL4PROTO, expr.CmpOpEq, []byte{proto})
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: key},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func ctEstablished() []expr.Any {
	return ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
}

func dnatTo(a netip.Addr) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: b[:]},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(p netip.Addr) netip.Prefix { return netip.PrefixFrom(p, 32) }

func policyPtr(p nftables.ChainPolicy) *nftables.ChainPolicy { return &p }

// baseChains are the hooked chains the tables use, by name: NAT before and after routing, and
// filters on input and forward.
var baseChains = map[string]nftables.Chain{
	"prerouting":  {Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest},
	"postrouting": {Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource},
	"input":       {Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter},
	"forward":     {Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter},
}

// baseChain queues the hooked chain name (see baseChains) in t.
func baseChain(c *nftables.Conn, t *nftables.Table, name string) *nftables.Chain {
	ch := baseChains[name]
	ch.Name, ch.Table = name, t
	return c.AddChain(&ch)
}

// addSlotTable queues the creation of a slot namespace's table (see the top of this file).
func addSlotTable(c *nftables.Conn, s *Slot, dns netip.Addr) {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable})
	pre := baseChain(c, t, "prerouting")
	post := baseChain(c, t, "postrouting")
	in := baseChain(c, t, "input")
	fw := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
		Policy: policyPtr(nftables.ChainPolicyDrop)})
	// Both filled by setEgress at Acquire: blocked holds the operator's open ranges too.
	c.AddChain(&nftables.Chain{Name: chEgress, Table: t})
	c.AddChain(&nftables.Chain{Name: chBlocked, Table: t})

	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(e...)})
	}

	// Inbound: any TCP port of the slot address goes to the guest.
	add(pre, iif(VethName), daddr(one(s.SandboxAddr)), l4proto(unix.IPPROTO_TCP), dnatTo(GuestAddr))
	// Guest DNS to the gateway goes to the resolver.
	if dns.IsValid() {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(pre, iif(TapName), daddr(one(TapAddr.Addr())), l4proto(proto), dport(53), dnatTo(dns))
		}
	}
	add(post, oif(TapName), []expr.Any{&expr.Masq{}})
	add(post, oif(VethName), saddr(TapAddr.Masked()), []expr.Any{&expr.Masq{}})

	add(in, iif(TapName), ctEstablished(), []expr.Any{verdict(expr.VerdictAccept)})
	add(in, iif(TapName), l4proto(unix.IPPROTO_ICMP), []expr.Any{verdict(expr.VerdictAccept)})
	add(in, iif(TapName), []expr.Any{verdict(expr.VerdictDrop)})

	add(fw, ctEstablished(), []expr.Any{verdict(expr.VerdictAccept)})
	add(fw, iif(VethName), oif(TapName), ctBits(expr.CtKeySTATUS, ctStatusDNAT), []expr.Any{verdict(expr.VerdictAccept)})
	add(fw, iif(TapName), oif(VethName), []expr.Any{jump(chEgress)})
}

// setEgress queues the replacement of a slot's egress chain by policy pol (validated), and of
// its blocked chain when rewriteBlocked (the operator's open ranges change it). cidr is the
// pool's slot range; dns is the DNAT target of the guest's DNS (invalid: none). The blocked chain comes before Deny and Allow, so no Allow entry can open
// what it drops.
func setEgress(c *nftables.Conn, pol Policy, cidr netip.Prefix, dns netip.Addr, rewriteBlocked bool) {
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable}
	eg := &nftables.Chain{Name: chEgress, Table: t}
	bl := &nftables.Chain{Name: chBlocked, Table: t}
	c.FlushChain(eg)
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(e...)})
	}
	accept := []expr.Any{verdict(expr.VerdictAccept)}
	drop := []expr.Any{verdict(expr.VerdictDrop)}
	ret := []expr.Any{verdict(expr.VerdictReturn)}

	if rewriteBlocked {
		c.FlushChain(bl)
		add(bl, daddr(cidr), drop)
		for _, r := range Blocked {
			add(bl, daddr(r.Prefix), drop)
		}
		for _, p := range pol.Open {
			add(bl, daddr(p), ret)
		}
		for _, r := range Private {
			add(bl, daddr(r.Prefix), drop)
		}
	}

	if dns.IsValid() && pol.allowsDNS(dns) {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(eg, ctBits(expr.CtKeySTATUS, ctStatusDNAT), daddr(one(dns)), l4proto(proto), dport(53), accept)
		}
	}
	add(eg, []expr.Any{jump(chBlocked)})
	for _, p := range pol.Deny {
		add(eg, daddr(p), drop)
	}
	for _, p := range pol.Allow {
		add(eg, daddr(p), accept)
	}
	if pol.Internet {
		add(eg, accept)
	}
}

// clearEgress queues emptying a slot's egress chain: its guest reaches nothing.
func clearEgress(c *nftables.Conn) {
	c.FlushChain(&nftables.Chain{Name: chEgress, Table: &nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable}})
}

// hostTable returns the host table's descriptor.
func (p *Pool) hostTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyIPv4, Name: p.hostTableName}
}

// resetHostTable queues replacing the host table by a fresh one (add, delete, add: one
// transaction that works whether or not it existed).
func (p *Pool) resetHostTable(c *nftables.Conn) {
	t := p.hostTable()
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	post := baseChain(c, t, "postrouting")
	in := baseChain(c, t, "input")
	fw := baseChain(c, t, "forward")
	si := c.AddChain(&nftables.Chain{Name: chSlotInput, Table: t})

	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: cat(e...)})
	}
	accept := []expr.Any{verdict(expr.VerdictAccept)}
	drop := []expr.Any{verdict(expr.VerdictDrop)}
	links := p.hostLinkPrefix()

	add(post, saddr(p.cidr), notDaddr(p.cidr), []expr.Any{&expr.Masq{}})

	add(in, iifPrefix(links), []expr.Any{jump(chSlotInput)})
	add(si, ctEstablished(), accept)
	if p.dnsOnHost {
		dst := p.cidr // the resolver is reached at each slot's own HostAddr
		if !p.dnsViaHostAddr {
			dst = one(p.dns)
		}
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			add(si, daddr(dst), l4proto(proto), dport(53), accept)
		}
	}
	add(si, drop)

	add(fw, oifPrefix(links), notIifPrefix(links), ctEstablished(), accept)
	add(fw, oifPrefix(links), notIifPrefix(links), drop)
}
