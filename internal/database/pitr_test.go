package database

import (
	"archive/tar"
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/blob"
)

// The archive's retention: base backups older than the retention go (never the newest), and with
// them the WAL older than the oldest base kept; what a restore can still use stays.
func TestPruneArchive(t *testing.T) {
	ctx := context.Background()
	bs, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Blob: bs})
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	put := func(key string) {
		if err := bs.Put(ctx, key, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
	}
	base := func(age time.Duration, start string) string {
		return "databases/db_a/base/" + now.Add(-age).Format(stampLayout) + "-" + start + ".tar"
	}
	old, kept, newest := base(10*24*time.Hour, "000000010000000000000002"), base(3*24*time.Hour, "000000010000000000000005"), base(time.Hour, "000000010000000000000009")
	for _, k := range []string{old, kept, newest, "databases/db_a/base/garbage.tar",
		"databases/db_a/wal/000000010000000000000002", "databases/db_a/wal/000000010000000000000004",
		"databases/db_a/wal/000000010000000000000003.gz", "databases/db_a/wal/00000001000000000000000B.gz",
		"databases/db_a/wal/000000010000000000000005", "databases/db_a/wal/00000001000000000000000A",
		"databases/db_a/wal/00000002.history", "databases/db_b/wal/000000010000000000000001"} {
		put(k)
	}
	// A replay from the kept base reads segments archived before compression (plain) and after
	// (gzipped), each once (gzipped when a segment is stored both ways).
	put("databases/db_a/wal/00000001000000000000000A.gz")
	var replay []string
	wal, err := s.walSince(ctx, "db_a", "000000010000000000000005")
	for _, in := range wal {
		replay = append(replay, strings.TrimPrefix(in.Key, "databases/db_a/wal/"))
	}
	if got := strings.Join(replay, " "); err != nil || got != "000000010000000000000005 00000001000000000000000A.gz 00000001000000000000000B.gz 00000002.history" {
		t.Fatalf("WAL for a replay from segment 5: %s (%v)", got, err)
	}
	if err := bs.Delete(ctx, "databases/db_a/wal/00000001000000000000000A.gz"); err != nil {
		t.Fatal(err)
	}
	bases, err := s.walBases(ctx, "db_a")
	if err != nil || len(bases) != 3 || bases[0].key != old || bases[2].start != "000000010000000000000009" {
		t.Fatalf("bases %+v %v", bases, err)
	}
	if err := s.pruneArchive(ctx, "db_a", now); err != nil {
		t.Fatal(err)
	}
	var left []string
	bs.List(ctx, "databases/", func(in blob.Info) error { left = append(left, in.Key); return nil })
	sort.Strings(left)
	want := []string{kept, newest, "databases/db_a/base/garbage.tar", "databases/db_a/wal/00000001000000000000000B.gz",
		"databases/db_a/wal/000000010000000000000005", "databases/db_a/wal/00000001000000000000000A",
		"databases/db_a/wal/00000002.history", "databases/db_b/wal/000000010000000000000001"}
	sort.Strings(want)
	if strings.Join(left, "\n") != strings.Join(want, "\n") {
		t.Fatalf("left after pruning:\n%s\nwant:\n%s", strings.Join(left, "\n"), strings.Join(want, "\n"))
	}
	// Deleting the database deletes its archive, not another's.
	if err := s.deleteArchive(ctx, "db_a"); err != nil {
		t.Fatal(err)
	}
	left = nil
	bs.List(ctx, "databases/", func(in blob.Info) error { left = append(left, in.Key); return nil })
	if len(left) != 1 || left[0] != "databases/db_b/wal/000000010000000000000001" {
		t.Fatalf("after deleting db_a's archive: %v", left)
	}
}

// A streamed base backup's start WAL file is read from the backup_label in pg_basebackup's tar,
// wherever it is in it; a tar without one, or a label without the line, is an error.
func TestBaseStart(t *testing.T) {
	mk := func(entries map[string]string, order ...string) *os.File {
		t.Helper()
		f, err := os.CreateTemp(t.TempDir(), "base")
		if err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(f)
		for _, name := range order {
			body := entries[name]
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(body))
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	label := "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000080\nBACKUP METHOD: streamed\nLABEL: pandastack\n"
	f := mk(map[string]string{"PG_VERSION": "17\n", "backup_label": label, "base/1/112": "x"}, "PG_VERSION", "base/1/112", "backup_label")
	if got, err := baseStart(f); err != nil || got != "000000010000000000000002" {
		t.Fatalf("start %q, %v", got, err)
	}
	for name, f := range map[string]*os.File{
		"no label":   mk(map[string]string{"PG_VERSION": "17\n"}, "PG_VERSION"),
		"bad label":  mk(map[string]string{"backup_label": "LABEL: x\n"}, "backup_label"),
		"short name": mk(map[string]string{"backup_label": "START WAL LOCATION: 0/2 (file 0001)\n"}, "backup_label"),
	} {
		if got, err := baseStart(f); err == nil {
			t.Errorf("%s: start %q, want an error", name, got)
		}
	}
}
