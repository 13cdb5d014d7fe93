package app

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/pandastack/pandastack/internal/network"
)

// NetworkConfig is the sandbox networking of a host agent as its flags give it (`agent`, `up`).
type NetworkConfig struct {
	On     bool
	CIDR   string // IPv4 range the /30 links come from
	Ready  int    // slots kept ready; 0 means none (not the pool's default)
	Prefix string // netns and link name prefix; empty: "ps" + a hash of the data dir
	DNS    string // resolver to forward to; empty: the pool's default
}

// Pool returns the network pool's configuration, or nil when networking is off.
func (n NetworkConfig) Pool(dataDir string) (*network.Config, error) {
	if !n.On {
		return nil, nil
	}
	cidr, err := netip.ParsePrefix(n.CIDR)
	if err != nil {
		return nil, fmt.Errorf("--network-cidr %q: %v", n.CIDR, err)
	}
	cfg := &network.Config{CIDR: cidr, Ready: n.Ready, Prefix: n.Prefix}
	if n.Ready == 0 {
		cfg.Ready = -1 // the pool's 0 means its default
	}
	if cfg.Prefix == "" {
		abs, _ := filepath.Abs(dataDir)
		h := sha256.Sum256([]byte(abs))
		cfg.Prefix = "ps" + hex.EncodeToString(h[:2])
	}
	if n.DNS != "" {
		if cfg.DNS, err = netip.ParseAddr(n.DNS); err != nil {
			return nil, fmt.Errorf("--dns %q: %v", n.DNS, err)
		}
	}
	return cfg, nil
}
