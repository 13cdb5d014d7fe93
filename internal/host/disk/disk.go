// Package disk admits what a host agent writes into its disk pool on a caller's behalf (docs/volumes.md
// "Disk space"): volume creates and resizes, snapshots, hibernations and template bakes are
// admitted against the pool's real free space first, so the API cannot fill the host's disk; past
// it the call is a NoSpace error before anything is written. Volumes are sparse files a guest
// fills later, so each one also holds a promise (Admission.Promised) that counts as taken.
package disk

import (
	"fmt"
	"sync"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// DefaultReserveMiB is the most kept free by default on the pool and on the disk under it (a
// sixteenth of a smaller pool): headroom for writes nothing admits (running sandboxes'
// copy-on-write disk writes, guest image builds, logs).
const DefaultReserveMiB = 4096

// DefaultReserveFor is the reserve kept by default with a pool of poolMiB: a sixteenth of it, at
// most DefaultReserveMiB (a small pool keeps most of its room).
func DefaultReserveFor(poolMiB int64) int64 { return min(DefaultReserveMiB, poolMiB/16) }

// Admission is the pool's admission. Promised (set before use) is what volumes are promised but
// have not written yet, in bytes.
type Admission struct {
	pool     *storage.Pool
	reserve  int64
	Promised func() int64

	mu      sync.Mutex
	pending int64 // bytes admitted to operations still writing them
}

// New admits against pool, keeping reserveMiB free.
func New(pool *storage.Pool, reserveMiB int64) *Admission {
	return &Admission{pool: pool, reserve: reserveMiB << 20, Promised: func() int64 { return 0 }}
}

// room is the admission arithmetic at one instant (bytes).
type room struct {
	total, poolFree, diskFree, reserve, promised, pending int64
	loop                                                  bool
}

func (s room) available() int64 {
	return min(s.poolFree, s.diskFree) - s.reserve - s.promised - s.pending
}

func (s room) String() string {
	disk := ""
	if s.loop {
		disk = fmt.Sprintf(", its disk %d MiB free", s.diskFree>>20)
	}
	return fmt.Sprintf("%d MiB are available (pool %d MiB free%s; %d MiB kept in reserve, %d MiB promised to volumes, %d MiB being written)",
		max(0, s.available())>>20, s.poolFree>>20, disk, s.reserve>>20, s.promised>>20, s.pending>>20)
}

// measure reads the pool's room now; mu held.
func (a *Admission) measure() (room, error) {
	sp, err := a.pool.Space()
	if err != nil {
		return room{}, err
	}
	return room{total: sp.Total, poolFree: sp.PoolFree, diskFree: sp.DiskFree, reserve: a.reserve,
		promised: a.Promised(), pending: a.pending, loop: a.pool.Image != ""}, nil
}

// Space reports the pool's size and what admission can still give: the pool's real free space
// (and its disk's, for a loop pool), less the reserve, the volumes' unwritten promises and
// operations in flight.
func (a *Admission) Space() hostapi.PoolSpace {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, err := a.measure()
	if err != nil {
		return hostapi.PoolSpace{}
	}
	return hostapi.PoolSpace{TotalMiB: s.total >> 20, FreeMiB: max(0, s.available()) >> 20}
}

// Admit reserves need bytes of the pool for an operation about to write them (what names it for
// the error), or refuses with NoSpace. Call release once the bytes are written (or not).
func (a *Admission) Admit(what string, need int64) (release func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, err := a.measure()
	if err != nil {
		return nil, err
	}
	if need > s.available() {
		// XFS frees a deleted file's blocks in the background: let them count before saying no.
		a.pool.Settle()
		if s, err = a.measure(); err != nil {
			return nil, err
		}
	}
	if need > s.available() {
		return nil, errdefs.New(errdefs.NoSpace, "%s needs %d MiB of the host's disk pool but only %s",
			what, (need+1<<20-1)>>20, s)
	}
	a.pending += need
	return func() {
		a.mu.Lock()
		a.pending -= need
		a.mu.Unlock()
	}, nil
}
