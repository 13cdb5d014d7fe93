package main

import (
	"github.com/pandastack/pandastack/internal/app"
	"github.com/spf13/pflag"
)

// registerNetworkFlags adds the networking flags to agent and up.
func registerNetworkFlags(f *pflag.FlagSet, n *app.NetworkConfig) {
	f.BoolVar(&n.On, "network", true, "give every sandbox a NIC in its own network namespace (egress policy, exposed ports); --network=false: no networking")
	f.StringVar(&n.CIDR, "network-cidr", "10.200.0.0/16", "IPv4 range the sandboxes' /30 links come from (a /16 is 16,384 sandboxes); must not overlap the host's networks")
	f.IntVar(&n.Ready, "network-ready", 8, "network slots kept ready ahead of need")
	f.StringVar(&n.Prefix, "network-prefix", "", `name prefix of the namespaces and links this agent makes (default "ps" + a hash of the data dir); an agent reclaims whatever carries its prefix`)
	f.StringVar(&n.DNS, "dns", "", "resolver the sandboxes' DNS is forwarded to (default: the first nameserver of /etc/resolv.conf)")
}
