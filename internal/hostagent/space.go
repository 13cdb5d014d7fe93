package hostagent

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

// Disk admission (docs/volumes.md "Disk space"). What the agent itself writes into the pool on a
// caller's behalf — volume creates and resizes, snapshots, hibernations, template bakes — is
// admitted first against the pool's real free space, so the API cannot fill the host's disk;
// past it the call is 507 no_space before anything is written. Volumes are sparse files a guest
// fills later, so each one also holds a promise: 1/VolumeOvercommit of its size that is not yet
// written counts as taken.

// DefaultDiskReserveMiB is the most kept free by default on the pool and on the disk under it
// (Config.DiskReserveMiB; a sixteenth of a smaller pool): headroom for writes nothing admits
// (running sandboxes' copy-on-write disk writes, guest image builds, logs).
const DefaultDiskReserveMiB = 4096

// snapshotDiskMiB is admitted for a snapshot's disk on top of its memory: the disk is a reflink
// (free when made) that pins the sandbox's blocks, so the sandbox's next writes allocate anew.
const snapshotDiskMiB = 256

// space is the admission arithmetic at one instant (bytes).
type space struct {
	total, poolFree, diskFree, reserve, promised, pending int64
	loop                                                  bool
}

func (s space) available() int64 {
	return min(s.poolFree, s.diskFree) - s.reserve - s.promised - s.pending
}

func (s space) String() string {
	disk := ""
	if s.loop {
		disk = fmt.Sprintf(", its disk %d MiB free", s.diskFree>>20)
	}
	return fmt.Sprintf("%d MiB are available (pool %d MiB free%s; %d MiB kept in reserve, %d MiB promised to volumes, %d MiB being written)",
		max(0, s.available())>>20, s.poolFree>>20, disk, s.reserve>>20, s.promised>>20, s.pending>>20)
}

// measure reads the pool's room now; spaceMu held.
func (a *Agent) measure() (space, error) {
	sp, err := a.pool.Space()
	if err != nil {
		return space{}, err
	}
	return space{total: sp.Total, poolFree: sp.PoolFree, diskFree: sp.DiskFree, reserve: a.cfg.DiskReserveMiB << 20,
		promised: a.volumesPromised(), pending: a.pending, loop: a.pool.Image != ""}, nil
}

// Space reports the pool's size and what admission can still give: the pool's real free space
// (and its disk's, for a loop pool), less the reserve, the volumes' unwritten promises and
// operations in flight.
func (a *Agent) Space() hostapi.PoolSpace {
	a.spaceMu.Lock()
	defer a.spaceMu.Unlock()
	s, err := a.measure()
	if err != nil {
		return hostapi.PoolSpace{}
	}
	return hostapi.PoolSpace{TotalMiB: s.total >> 20, FreeMiB: max(0, s.available()) >> 20}
}

// admit reserves need bytes of the pool for an operation about to write them (what names it for
// the error), or refuses with 507 no_space. Call release once the bytes are written (or not).
func (a *Agent) admit(what string, need int64) (release func(), err error) {
	a.spaceMu.Lock()
	defer a.spaceMu.Unlock()
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
		a.spaceMu.Lock()
		a.pending -= need
		a.spaceMu.Unlock()
	}, nil
}

// volumePromise is the part of a volume of size bytes that real pool space must back.
func (a *Agent) volumePromise(size int64) int64 {
	return int64(float64(size)/a.cfg.VolumeOvercommit + 0.5)
}

// volumesPromised sums what the volumes are promised but have not written yet.
func (a *Agent) volumesPromised() int64 {
	files, _ := filepath.Glob(filepath.Join(a.volumesDir(), "vol_*.json"))
	var sum int64
	for _, f := range files {
		var v hostapi.Volume
		var st syscall.Stat_t
		if readJSONFile(f, &v) != nil || syscall.Stat(strings.TrimSuffix(f, ".json")+".ext4", &st) != nil {
			continue
		}
		sum += max(0, a.volumePromise(v.SizeMiB<<20)-st.Blocks*512)
	}
	return sum
}

// mkfsCost bounds what mkfs.ext4 (with its inode tables and journal initialised now) allocates
// in a volume of size bytes: the journal (size/32, at most 1 GiB) plus a little metadata. Measured
// (e2fsprogs 1.47 on the XFS pool): 64 MiB: 5 MiB, 1 GiB: 33, 16 GiB: 133, 256 GiB: 1031,
// 1 TiB: 1040.
func mkfsCost(size int64) int64 {
	return min(size, min(size/32, 1<<30)+size/16384+8<<20)
}
