package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/network"
)

// egressPolicy checks a team's egress policy against this host (its slot range) and the
// operator's open ranges, and returns the slot policy. stored: a policy accepted earlier, being
// applied again (see network.Guard).
func (m *Manager) egressPolicy(eg *network.Egress, open []string, stored bool) (network.Policy, error) {
	opened, err := network.ParseOpen(open)
	if err != nil {
		return network.Policy{}, &network.EgressError{Msg: err.Error()}
	}
	g := network.Guard{Open: opened, Stored: stored}
	if m.net != nil {
		g.SlotCIDR = m.net.CIDR()
	}
	return eg.Policy(g)
}

// attachNetwork gives a VM about to start from rec its network slot and tap, when its snapshot
// has a NIC. The caller closes the tap once the VMM has started, and releases the slot if the
// start fails.
func (m *Manager) attachNetwork(ctx context.Context, rec *record) (*network.Slot, *os.File, error) {
	if !rec.NIC {
		return nil, nil, nil
	}
	if m.net == nil {
		return nil, nil, fmt.Errorf("sandbox %s was made with a network device, but networking is off on this host", rec.ID)
	}
	pol, err := m.egressPolicy(rec.Egress, rec.EgressOpen, true)
	if err != nil {
		return nil, nil, err
	}
	slot, err := m.net.Acquire(ctx, pol)
	if err != nil {
		return nil, nil, fmt.Errorf("network slot: %w", err)
	}
	tap, err := slot.OpenTap()
	if err != nil {
		slot.Release()
		return nil, nil, err
	}
	return slot, tap, nil
}

// releaseNetwork gives a sandbox's slot back once its VMM is gone.
func (m *Manager) releaseNetwork(sb *sandbox) {
	sb.mu.Lock()
	slot := sb.slot
	sb.slot = nil
	sb.rec.Netns, sb.rec.GuestAddr = "", ""
	sb.mu.Unlock()
	if slot != nil {
		if err := slot.Release(); err != nil {
			m.log.Warn("network slot release", "sandbox", sb.rec.ID, "err", err)
		}
	}
}

// adoptNetwork takes back the slot of a sandbox whose VMM outlived an earlier agent process.
func (m *Manager) adoptNetwork(sb *sandbox) {
	if sb.rec.Netns == "" || m.net == nil {
		return
	}
	pol, err := m.egressPolicy(sb.rec.Egress, sb.rec.EgressOpen, true)
	if err == nil {
		sb.slot, err = m.net.Adopt(sb.rec.Netns, pol)
	}
	if err != nil {
		m.log.Warn("could not re-adopt a sandbox's network", "sandbox", sb.rec.ID, "netns", sb.rec.Netns, "err", err)
	}
}

// RunningNetns is the network namespaces of the sandboxes recorded as running under l: an agent
// starting keeps them for adoption and reclaims every other leftover.
func RunningNetns(l layout.Layout) map[string]bool {
	keep := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(l.Sandboxes(), "*", "sandbox.json"))
	for _, f := range files {
		var rec record
		if layout.ReadJSON(f, &rec) == nil && rec.State == StateRunning && rec.Netns != "" {
			keep[rec.Netns] = true
		}
	}
	return keep
}
