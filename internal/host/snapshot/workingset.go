package snapshot

import (
	"os"
	"path/filepath"

	"github.com/pandastack/pandastack/internal/storage"
)

// WorkingSetFile, in a memory image's directory (a snapshot's, a hibernation's), lists the runs
// of its "ram" that the guest had read from its base when it was saved (runtime.SnapshotStats.
// Read). It travels with the image through the blob store: a host that pulls the image reads
// those runs into the pulled file's page cache while its VMM starts (WarmWorkingSet), as the
// saving host does for a fork's children, instead of the restored guest faulting them in from
// disk one page at a time. Only a hint: an image without it restores the same, slower.
const WorkingSetFile = "working-set.json"

// WriteWorkingSet writes dir's working-set file for runs (none for an empty or oversized list).
func WriteWorkingSet(dir string, runs []storage.Run) error {
	if len(runs) == 0 || len(runs) > storage.MaxRuns {
		return nil
	}
	return storage.WriteRunList(filepath.Join(dir, WorkingSetFile), runs)
}

// WarmWorkingSet reads the runs dir's working-set file names into the page cache of dir's "ram"
// and returns the bytes read (0 and no error when dir has no such file).
func WarmWorkingSet(dir string) (int64, error) {
	ram := filepath.Join(dir, "ram")
	fi, err := os.Stat(ram)
	if err != nil {
		return 0, err
	}
	runs, err := storage.ReadRunList(filepath.Join(dir, WorkingSetFile), fi.Size())
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return storage.ReadRuns(ram, runs)
}
