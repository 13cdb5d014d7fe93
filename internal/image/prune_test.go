package image

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// entry makes a finished cache entry of lineage last used ago (lineage "": made before lineages).
func entry(t *testing.T, cache, name, lineage string, ago time.Duration) string {
	t.Helper()
	dir := filepath.Join(cache, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs.ext4"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if lineage != "" {
		MarkUsed(dir, lineage)
	}
	when := time.Now().Add(-ago)
	os.Chtimes(filepath.Join(dir, usedFile), when, when)
	os.Chtimes(dir, when, when)
	return dir
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestPruneSupersededRemovesOnlyOldEntriesOfTheSameLineage(t *testing.T) {
	cache := t.TempDir()
	keep := entry(t, cache, "rootfs-new", "A", 0)
	old := entry(t, cache, "rootfs-old", "A", time.Hour)
	recent := entry(t, cache, "rootfs-recent", "A", time.Minute) // handed out moments ago: may be copied now
	other := entry(t, cache, "rootfs-other", "B", time.Hour)
	legacy := entry(t, cache, "rootfs-legacy", "", time.Hour)
	built := entry(t, cache, "built-old", "A", time.Hour) // another kind
	building := entry(t, cache, "rootfs-old2.tmp", "A", time.Hour)
	locked := entry(t, cache, "rootfs-locked", "A", time.Hour)
	f, err := os.OpenFile(locked+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	removed := PruneSuperseded(cache, RootfsPrefix, keep, "A")
	if len(removed) != 1 || removed[0].Dir != old || removed[0].Bytes < 8192 {
		t.Fatalf("removed %+v, want only %s with its size", removed, old)
	}
	if exists(old) || exists(old+".pruning") {
		t.Fatal("the superseded entry is still there")
	}
	for _, d := range []string{keep, recent, other, legacy, built, building, locked} {
		if !exists(d) {
			t.Fatalf("%s was removed", filepath.Base(d))
		}
	}
}

func TestUnusedListsEveryKindOldestFirst(t *testing.T) {
	cache := t.TempDir()
	entry(t, cache, "rootfs-a", "A", 48*time.Hour)
	entry(t, cache, "built-b", "", 72*time.Hour) // no use stamp: the directory's time counts
	entry(t, cache, "rootfs-c", "C", time.Hour)
	entry(t, cache, "tree-d", "", 72*time.Hour) // not a pruned kind
	got, err := Unused(cache, time.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || filepath.Base(got[0].Dir) != "built-b" || filepath.Base(got[1].Dir) != "rootfs-a" {
		t.Fatalf("unused: %+v", got)
	}
	if removed := Remove(got); len(removed) != 2 || exists(got[0].Dir) || exists(got[1].Dir) {
		t.Fatalf("removed %d of 2", len(removed))
	}
	if !exists(filepath.Join(cache, "rootfs-c")) || !exists(filepath.Join(cache, "tree-d")) {
		t.Fatal("removed an entry in use or of another kind")
	}
}
