package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestDiffRAMWarm: a diff snapshot of a private mapping (this process's, standing in for a VMM's
// guest RAM) holds the base plus the written pages, and finds the pages that were read; reading
// brings those into the new file's page cache (a reflink shares blocks, not cache: without it
// they are not cached), and the content stays the same either way.
func TestDiffRAMWarm(t *testing.T) {
	pool := testenv.ReflinkPool(t)
	const pages = 256
	base := filepath.Join(pool, "base")
	content := make([]byte, pages*pageSize)
	for i := range pages {
		for j := range pageSize {
			content[i*pageSize+j] = byte(i + j)
		}
	}
	if err := os.WriteFile(base, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, len(content), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	const readPage, writtenPage = 40, 200 // far apart: fault-around maps up to 16 pages near a read
	for i := range 8 {
		sink += mem[(readPage+i)*pageSize] // read: present, from the file
	}
	want := append([]byte(nil), content...)
	for _, p := range []int{writtenPage, writtenPage + 1} {
		for j := range pageSize {
			mem[p*pageSize+j] = 0xee // written: anonymous
			want[p*pageSize+j] = 0xee
		}
	}

	for _, warmed := range []bool{false, true} {
		out := filepath.Join(pool, map[bool]string{false: "cold", true: "warm"}[warmed])
		dirty, read, written, err := diffRAM(os.Getpid(), base, out)
		if err != nil {
			t.Fatal(err)
		}
		if dirty != 2*pageSize {
			t.Errorf("dirty %d bytes, want the 2 written pages", dirty)
		}
		if want := []storage.Run{{Off: writtenPage * pageSize, Len: 2 * pageSize}}; !slices.Equal(written, want) {
			t.Errorf("written runs %v, want %v", written, want)
		}
		var readBytes int64
		for _, r := range read {
			readBytes += r.Len
			if w := int64(writtenPage * pageSize); r.Off < w+2*pageSize && w < r.Off+r.Len {
				t.Errorf("read run %v holds a written page", r)
			}
		}
		// At least the 8 read (fault-around maps neighbours of the page cache too).
		if readBytes < 8*pageSize {
			t.Errorf("%d bytes of read pages found (%v), want at least the 8 read", readBytes, read)
		}
		if warmed {
			if n, err := storage.ReadRuns(out, read); err != nil || n != readBytes {
				t.Fatalf("warm: %d bytes, %v; want %d", n, err, readBytes)
			}
		}
		// Before anything reads out (which brings it into the cache).
		if cached := testenv.CachedPages(t, out, readPage, 8) == 8; cached != warmed {
			t.Errorf("warmed=%v: the read pages are in the new file's page cache: %v", warmed, cached)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
			t.Errorf("warmed=%v: the snapshot's RAM file is not the base with the written pages", warmed)
		}
	}
}

var sink byte // keeps the test's reads
