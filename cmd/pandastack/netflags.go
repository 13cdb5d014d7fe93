package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/pandastack/pandastack/internal/network"
	"github.com/spf13/pflag"
)

// netFlags are the networking flags shared by `agent` and `up`.
type netFlags struct {
	on     bool
	cidr   string
	ready  int
	prefix string
	dns    string
}

func (n *netFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&n.on, "network", true, "give every sandbox a NIC in its own network namespace (egress policy, exposed ports); --network=false: no networking")
	f.StringVar(&n.cidr, "network-cidr", "10.200.0.0/16", "IPv4 range the sandboxes' /30 links come from (a /16 is 16,384 sandboxes); must not overlap the host's networks")
	f.IntVar(&n.ready, "network-ready", 8, "network slots kept ready ahead of need")
	f.StringVar(&n.prefix, "network-prefix", "", `name prefix of the namespaces and links this agent makes (default "ps" + a hash of the data dir); an agent reclaims whatever carries its prefix`)
	f.StringVar(&n.dns, "dns", "", "resolver the sandboxes' DNS is forwarded to (default: the first nameserver of /etc/resolv.conf)")
}

// config returns the pool configuration, or nil when networking is off.
func (n *netFlags) config(dataDir string) (*network.Config, error) {
	if !n.on {
		return nil, nil
	}
	cidr, err := netip.ParsePrefix(n.cidr)
	if err != nil {
		return nil, fmt.Errorf("--network-cidr %q: %v", n.cidr, err)
	}
	cfg := &network.Config{CIDR: cidr, Ready: n.ready, Prefix: n.prefix}
	if n.ready == 0 {
		cfg.Ready = -1 // the pool's 0 means its default
	}
	if cfg.Prefix == "" {
		abs, _ := filepath.Abs(dataDir)
		h := sha256.Sum256([]byte(abs))
		cfg.Prefix = "ps" + hex.EncodeToString(h[:2])
	}
	if n.dns != "" {
		if cfg.DNS, err = netip.ParseAddr(n.dns); err != nil {
			return nil, fmt.Errorf("--dns %q: %v", n.dns, err)
		}
	}
	return cfg, nil
}
