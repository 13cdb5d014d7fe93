package network

import (
	"bufio"
	"errors"
	"net/netip"
	"os"
	"strings"
)

// resolverFromFile returns the first IPv4 nameserver listed in a resolv.conf file.
func resolverFromFile(path string) (netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return netip.Addr{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(fields[1]); err == nil && a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if err := sc.Err(); err != nil {
		return netip.Addr{}, err
	}
	return netip.Addr{}, errors.New("no IPv4 nameserver in " + path)
}
