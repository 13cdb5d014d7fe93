package sandbox

import (
	"github.com/pandastack/pandastack/internal/errdefs"
)

// uidFor is the uid of a sandbox's VMMs: the lowest free one of the range, kept until the
// sandbox is killed (0 when confinement is off).
func (m *Manager) uidFor(id string) (int, error) {
	if !m.confined {
		return 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if uid, ok := m.uids[id]; ok {
		return uid, nil
	}
	used := make(map[int]bool, len(m.uids))
	for _, u := range m.uids {
		used[u] = true
	}
	for uid := m.cfg.JailUIDBase + 1; uid < m.cfg.JailUIDBase+m.cfg.JailUIDs; uid++ {
		if !used[uid] {
			m.uids[id] = uid
			return uid, nil
		}
	}
	return 0, errdefs.Capacityf("all %d VMM uids of this host are in use", m.cfg.JailUIDs-1)
}

// releaseUID frees a killed sandbox's uid.
func (m *Manager) releaseUID(id string) {
	m.mu.Lock()
	delete(m.uids, id)
	m.mu.Unlock()
}
