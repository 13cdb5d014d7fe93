package storage

import (
	"encoding/json"
	"fmt"
	"os"
)

// Run is a byte range of a file.
type Run struct {
	Off int64 `json:"off"`
	Len int64 `json:"len"`
}

// MaxRuns bounds a run list read from a file (ReadRunList): a list from another host (through the
// blob store) names at most this many ranges.
const MaxRuns = 1 << 18

// ReadRuns reads the runs of the file at path into its page cache and returns the bytes read.
// A reflinked file shares blocks, not the page cache, which is per file: reading here, in large
// runs and off any VM's vCPU thread, spares a VM that maps the file the disk reads of its first
// faults. It changes no content, so it may run at any time, also while a VM maps the file.
func ReadRuns(path string, runs []Run) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var done int64
	for _, r := range runs {
		for off, end := r.Off, r.Off+r.Len; off < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			done += int64(n)
			off += int64(n)
			if err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// WriteRunList writes runs to the file at path (JSON).
func WriteRunList(path string, runs []Run) error {
	b, err := json.Marshal(runs)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// ReadRunList reads a list written by WriteRunList and checks it against a file of size bytes:
// every run inside it, at most MaxRuns of them. A list that fails is an error: its caller goes
// without (the runs only save time).
func ReadRunList(path string, size int64) ([]Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var runs []Run
	if err := json.Unmarshal(b, &runs); err != nil {
		return nil, fmt.Errorf("run list %s: %w", path, err)
	}
	if len(runs) > MaxRuns {
		return nil, fmt.Errorf("run list %s: %d runs, more than %d", path, len(runs), MaxRuns)
	}
	for _, r := range runs {
		if r.Off < 0 || r.Len <= 0 || r.Off > size-r.Len {
			return nil, fmt.Errorf("run list %s: run %d+%d is outside a file of %d bytes", path, r.Off, r.Len, size)
		}
	}
	return runs, nil
}
