package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/pandastack/pandastack/internal/storage"
	"golang.org/x/sys/unix"
)

// TestDiffRAMWarm: a diff snapshot of a private mapping (this process's, standing in for a VMM's
// guest RAM) holds the base plus the written pages either way; with warm, the pages that were
// read are written too, so the new file's page cache holds them (a reflink shares blocks, not
// cache), and without it they are not cached.
func TestDiffRAMWarm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a loop-mounted XFS pool, where files reflink)")
	}
	pool, err := storage.Open(t.TempDir(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	const pages = 256
	base := filepath.Join(pool.Dir, "base")
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

	for _, warm := range []bool{false, true} {
		out := filepath.Join(pool.Dir, map[bool]string{false: "cold", true: "warm"}[warm])
		dirty, warmed, err := diffRAM(os.Getpid(), base, out, warm)
		if err != nil {
			t.Fatal(err)
		}
		if dirty != 2*pageSize {
			t.Errorf("warm=%v: dirty %d bytes, want the 2 written pages", warm, dirty)
		}
		// Before anything reads out (which brings it into the cache).
		if cached := resident(t, out, readPage, 8); cached != warm {
			t.Errorf("warm=%v: the read pages are in the new file's page cache: %v", warm, cached)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
			t.Errorf("warm=%v: the snapshot's RAM file is not the base with the written pages", warm)
		}
		if warm && warmed < 8*pageSize {
			t.Errorf("warm: %d bytes of read pages copied, want at least the 8 read", warmed)
		}
		if !warm && warmed != 0 {
			t.Errorf("cold: %d bytes of read pages copied, want none", warmed)
		}
	}
}

var sink byte // keeps the test's reads

// resident reports whether all n pages of path from page first are in its page cache.
func resident(t *testing.T, path string, first, n int) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), int64(first*pageSize), n*pageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, n)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 == 0 {
			return false
		}
	}
	return true
}
