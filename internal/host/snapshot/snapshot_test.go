package snapshot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/artifact"
	"github.com/pandastack/pandastack/internal/blob"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/host/layout"
	"github.com/pandastack/pandastack/internal/host/volume"
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

// A published snapshot with volume copies carries them: the manifest names each copy beside the
// memory and disk (its chunks by content, the all-zero ones holes), a store without the snapshot
// pulls the copies byte for byte into the slots' files, and a copy the record lists that is not
// there fails the publish; a manifest whose record lists a copy it lacks, or whose copy's chunk is
// corrupt, fails the pull, the latter naming the artifact and the chunk, and leaves nothing.
func TestPublishCarriesVolumeCopies(t *testing.T) {
	ctx := context.Background()
	ident := runtime.Identity{VMM: "qemu", Version: "1", Machine: "microvm", CPU: "max", Accel: "tcg"}
	bs, err := blob.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	a.Local = artifact.NewLocal()
	vol := make([]byte, 3*artifact.ChunkSize) // a written chunk, a hole, a written chunk
	copy(vol, "superblock")
	copy(vol[2*artifact.ChunkSize:], "data")
	r := Record{Snapshot: hostapi.Snapshot{ID: "snap_vols", Template: "base", CreatedAt: time.Now(), Identity: ident,
		Volumes: []hostapi.SnapshotVolume{{Slot: 0, VolumeID: "vol_src", MountPath: "/data", SizeMiB: 12, FS: "ext4"}}}}
	tmp, err := a.Begin(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ram": []byte("ram"), "state": []byte("state"), "disk.img": []byte("disk"), volume.CopyFile(0): vol} {
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Commit(tmp, &r); err != nil {
		t.Fatal(err)
	}
	missing := r
	missing.Volumes = append(slices.Clone(r.Volumes), hostapi.SnapshotVolume{Slot: 1, VolumeID: "vol_gone", MountPath: "/gone", SizeMiB: 4, FS: "ext4"})
	if _, err := a.Publish(ctx, bs, &missing, artifact.Derived{}); err == nil || !strings.Contains(err.Error(), volume.CopyFile(1)) {
		t.Fatalf("publish without the copy of slot 1: %v", err)
	}
	if _, err := a.Publish(ctx, bs, &r, artifact.Derived{}); err != nil {
		t.Fatal(err)
	}
	m, err := artifact.Get(ctx, bs, Kind, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(m.Files, func(f artifact.File) bool { return f.Path == volume.CopyFile(0) })
	if i < 0 || m.Files[i].Size != int64(len(vol)) || len(m.Files[i].Chunks) != 3 || m.Files[i].Chunks[0] == "" || m.Files[i].Chunks[1] != "" || m.Files[i].Chunks[2] == "" {
		t.Fatalf("the manifest's volume copy: %+v", m.Files)
	}

	b := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	b.Local = artifact.NewLocal()
	got, _, err := b.Pull(ctx, bs, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pulled, err := os.ReadFile(got.File(volume.CopyFile(0))); err != nil || !bytes.Equal(pulled, vol) || !reflect.DeepEqual(got.Volumes, r.Volumes) {
		t.Fatalf("the pulled copy: %d bytes (%v), volumes %+v", len(pulled), err, got.Volumes)
	}

	// A manifest whose record lists a copy it does not carry.
	lacking := r
	lacking.ID = "snap_lacking"
	if _, _, err := artifact.Push(ctx, bs, Kind, lacking.ID, r.Dir, []string{"ram", "state", "disk.img"}, lacking.Snapshot); err != nil {
		t.Fatal(err)
	}
	c := New(layout.Layout{DataDir: t.TempDir(), Pool: t.TempDir()}, ident)
	if _, _, err := c.Pull(ctx, bs, lacking.ID); !errdefs.Is(err, errdefs.Invalid) || !strings.Contains(err.Error(), volume.CopyFile(0)) {
		t.Fatalf("pull of a snapshot that lacks its volume copy: %v", err)
	}
	// A corrupt chunk of the copy.
	bad := m.Files[i].Chunks[2]
	if err := bs.Put(ctx, "chunks/"+bad, strings.NewReader("not the chunk")); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Pull(ctx, bs, r.ID)
	if err == nil || !strings.Contains(err.Error(), Kind+"/"+r.ID) || !strings.Contains(err.Error(), volume.CopyFile(0)) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("pull with a corrupt volume chunk: %v", err)
	}
	if _, err := c.Load(r.ID); !errdefs.Is(err, errdefs.NotFound) {
		t.Fatalf("a failed pull left snapshot %s: %v", r.ID, err)
	}
}
