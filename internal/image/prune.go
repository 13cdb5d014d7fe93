package image

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pandastack/pandastack/internal/host/layout"
	"golang.org/x/sys/unix"
)

// Pruning. Cache entries are named by a hash of all their inputs, so a new guest agent (every
// upgrade, every rebuild of pandastack-guest) makes a new rootfs entry for each Debian tree and a
// new template build entry for each recipe (~1.4 GB each), and nothing ever asks for the old ones
// again. An entry therefore records its lineage (what it is built for, without the guest agent
// and kernel that change under it) and when it was last handed out; an entry made for a lineage
// supersedes that lineage's older entries, which are removed once unused for SupersededAfter.
//
// Nothing running reads the cache: a template copies (reflinks) the images it is baked from into
// its own directory, so removing an entry costs at most a rebuild. The grace period covers a
// process that was handed an entry and has not copied it yet (a bake copies within seconds).

// Entry kinds that are pruned: those keyed by the guest agent's hash.
const (
	RootfsPrefix = "rootfs-"
	BuiltPrefix  = "built-"
)

// SupersededAfter is how long a superseded entry is kept after its last use.
const SupersededAfter = 10 * time.Minute

const (
	lineageFile = ".lineage"
	usedFile    = ".used"
)

// MarkUsed records that the finished entry dir of lineage is being handed out now.
func MarkUsed(dir, lineage string) {
	lf := filepath.Join(dir, lineageFile)
	if b, err := os.ReadFile(lf); err != nil || string(b) != lineage {
		os.WriteFile(lf, []byte(lineage), 0o644)
	}
	uf := filepath.Join(dir, usedFile)
	now := time.Now()
	if err := os.Chtimes(uf, now, now); errors.Is(err, os.ErrNotExist) {
		os.WriteFile(uf, nil, 0o644)
	}
}

// Entry is a prunable cache entry.
type Entry struct {
	Dir      string
	Lineage  string    // "" for an entry made before lineages were recorded
	LastUsed time.Time // its use stamp, else the directory's modification time
	Bytes    int64     // allocated on disk
}

// Entries lists the finished entries of cacheDir whose names start with prefix.
func Entries(cacheDir, prefix string) ([]Entry, error) {
	des, err := os.ReadDir(cacheDir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, de := range des {
		name := de.Name()
		// Entries in the making end in .tmp/.building and are their builder's.
		if !de.IsDir() || !strings.HasPrefix(name, prefix) || strings.Contains(name, ".") {
			continue
		}
		dir := filepath.Join(cacheDir, name)
		e := Entry{Dir: dir}
		if b, err := os.ReadFile(filepath.Join(dir, lineageFile)); err == nil {
			e.Lineage = string(b)
		}
		if fi, err := os.Stat(filepath.Join(dir, usedFile)); err == nil {
			e.LastUsed = fi.ModTime()
		} else if fi, err := os.Stat(dir); err == nil {
			e.LastUsed = fi.ModTime()
		}
		e.Bytes = layout.DirSize(dir)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.Before(out[j].LastUsed) })
	return out, nil
}

// Supersede records that the finished entry dir of lineage (named prefix...) is being handed out
// now and removes what it supersedes (PruneSuperseded), telling say of each removal.
func Supersede(cacheDir, prefix, dir, lineage string, say func(format string, args ...any)) {
	MarkUsed(dir, lineage)
	for _, e := range PruneSuperseded(cacheDir, prefix, dir, lineage) {
		say("image cache: removed %s (%d MiB), superseded and unused for %s", filepath.Base(e.Dir), e.Bytes>>20, SupersededAfter)
	}
}

// PruneSuperseded removes the entries of cacheDir with prefix and keep's lineage other than keep
// that were last used over SupersededAfter ago; it returns what it removed.
func PruneSuperseded(cacheDir, prefix, keep, lineage string) []Entry {
	entries, err := Entries(cacheDir, prefix)
	if err != nil {
		return nil
	}
	var old []Entry
	for _, e := range entries {
		if e.Lineage == lineage && e.Dir != keep && time.Since(e.LastUsed) > SupersededAfter {
			old = append(old, e)
		}
	}
	return Remove(old)
}

// Unused lists the entries of every pruned kind last used before cutoff, oldest first.
func Unused(cacheDir string, cutoff time.Time) ([]Entry, error) {
	var out []Entry
	for _, prefix := range []string{RootfsPrefix, BuiltPrefix} {
		entries, err := Entries(cacheDir, prefix)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.LastUsed.Before(cutoff) {
				out = append(out, e)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.Before(out[j].LastUsed) })
	return out, nil
}

// Remove deletes entries whose entry lock is free (one held is being filled or read by its
// holder), returning those it removed.
func Remove(entries []Entry) []Entry {
	var done []Entry
	for _, e := range entries {
		f, err := os.OpenFile(e.Dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			continue
		}
		// Renamed first, so no reader finds it half deleted. The lock file stays: another process
		// may be waiting on it, and a lock it got on an unlinked file would lock nothing.
		trash := e.Dir + ".pruning"
		removeTree(trash) // left by an interrupted prune
		err = os.Rename(e.Dir, trash)
		if err == nil {
			err = removeTree(trash)
		}
		f.Close()
		if err == nil {
			done = append(done, e)
		}
	}
	return done
}
