package snapshot

import (
	"os"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/runtime"
	"github.com/pandastack/pandastack/internal/wire/hostapi"
)

func publish(t *testing.T, s *Store, r Record) *Record {
	t.Helper()
	tmp, err := s.Begin(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp+"/ram", []byte("ram"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(tmp, &r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary dir is still there: %v", err)
	}
	return &r
}

// A snapshot is visible once published; internal ones are never listed; a deleted one's files
// stay while a sandbox restores from them and go at the next GC.
func TestStore(t *testing.T) {
	ident := runtime.Identity{VMM: "qemu", Version: "1", Machine: "microvm", CPU: "max", Accel: "tcg"}
	s := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	if _, err := s.Begin("snap_a"); err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 0 {
		t.Fatal("a snapshot being written is listed")
	}
	a := publish(t, s, Record{Snapshot: hostapi.Snapshot{ID: "snap_a", Template: "base", CreatedAt: time.Now(), Identity: ident}})
	publish(t, s, Record{Snapshot: hostapi.Snapshot{ID: "snap_fork", Template: "base", Identity: ident}, Internal: true})
	if l := s.List(); len(l) != 1 || l[0].ID != "snap_a" || l[0].SizeBytes == 0 {
		t.Fatalf("list: %+v", l)
	}
	if _, err := s.Get("snap_fork"); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("an internal snapshot is got: %v", err)
	}
	if n := s.CountOf("base"); n != 2 {
		t.Fatalf("CountOf(base) = %d", n)
	}
	s.InUse = func() map[string]bool { return map[string]bool{a.Dir: true} }
	if err := s.Delete("snap_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("snap_a"); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("a deleted snapshot is got: %v", err)
	}
	if _, err := os.Stat(a.File("ram")); err != nil {
		t.Fatalf("files of a snapshot in use went: %v", err)
	}
	s.InUse = func() map[string]bool { return nil }
	s.GC()
	if _, err := os.Stat(a.Dir); !os.IsNotExist(err) {
		t.Fatalf("files of a deleted snapshot no one uses stay: %v", err)
	}
}

// A record saved before identities were is taken as this host's VMM's.
func TestLegacyIdentity(t *testing.T) {
	ident := runtime.Identity{VMM: "qemu", Version: "2", Machine: "microvm", CPU: "max", Accel: "tcg"}
	s := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	publish(t, s, Record{Snapshot: hostapi.Snapshot{ID: "snap_old"}})
	r, err := s.Load("snap_old")
	if err != nil || r.Identity != ident {
		t.Fatalf("load: %+v %v", r, err)
	}
}

// A published snapshot written unflushed in an earlier boot is dropped (unless a sandbox restores
// from it); one written in this boot, the host's own flushed one, and an unpublished one stay.
func TestDropTornPulls(t *testing.T) {
	if BootID() == "" {
		t.Skip("no boot id on this kernel")
	}
	ident := runtime.Identity{VMM: "qemu", Version: "1", Machine: "microvm", CPU: "max", Accel: "tcg"}
	s := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	snap := func(id, boot string, published bool) *Record {
		return publish(t, s, Record{Snapshot: hostapi.Snapshot{ID: id, Template: "base", Identity: ident, Published: published}, UnflushedBoot: boot})
	}
	own, now, torn := snap("snap_own", "", false), snap("snap_now", BootID(), true), snap("snap_torn", "an-earlier-boot", true)
	used, unpublished := snap("snap_used", "an-earlier-boot", true), snap("snap_unpub", "an-earlier-boot", false)
	s.InUse = func() map[string]bool { return map[string]bool{used.Dir: true} }
	s.DropTornPulls()
	for _, r := range []*Record{own, now, used, unpublished} {
		if _, err := s.Load(r.ID); err != nil {
			t.Errorf("%s was dropped: %v", r.ID, err)
		}
	}
	if _, err := os.Stat(torn.Dir); !os.IsNotExist(err) {
		t.Errorf("a snapshot pulled unflushed before this boot stays: %v", err)
	}
}
