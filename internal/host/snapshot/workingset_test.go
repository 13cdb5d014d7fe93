package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/pandastack/pandastack/internal/storage"
	"github.com/pandastack/pandastack/internal/testenv"
)

// TestWarmWorkingSet: a memory image reflinked from another file (as a pull places chunks this
// host has) has none of its pages cached; WarmWorkingSet brings exactly the listed runs into its
// page cache and changes no byte; an image without a list is left alone.
func TestWarmWorkingSet(t *testing.T) {
	pool := testenv.ReflinkPool(t)
	const page, pages = 4096, 64
	content := bytes.Repeat([]byte("0123456789abcdef"), pages*page/16)
	base := filepath.Join(pool, "base")
	if err := os.WriteFile(base, content, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(pool, "image")
	os.Mkdir(dir, 0o700)
	ram := filepath.Join(dir, "ram")
	if err := storage.Clone(base, ram); err != nil {
		t.Fatal(err)
	}
	if n, err := WarmWorkingSet(dir); n != 0 || err != nil {
		t.Fatalf("no list: read %d bytes, %v", n, err)
	}
	if err := WriteWorkingSet(dir, []storage.Run{{Off: 8 * page, Len: 4 * page}}); err != nil {
		t.Fatal(err)
	}
	if testenv.CachedPages(t, ram, 8, 4) != 0 {
		t.Fatal("a fresh reflink's pages are cached already: the test proves nothing here")
	}
	if n, err := WarmWorkingSet(dir); n != 4*page || err != nil {
		t.Fatalf("read %d bytes, %v; want %d", n, err, 4*page)
	}
	if got := testenv.CachedPages(t, ram, 8, 4); got != 4 {
		t.Errorf("%d of the 4 listed pages cached after the warm", got)
	}
	if got := testenv.CachedPages(t, ram, 40, 4); got != 0 {
		t.Errorf("%d unlisted pages cached after the warm", got)
	}
	if got, _ := os.ReadFile(ram); !bytes.Equal(got, content) {
		t.Error("the warm changed the image")
	}
}
