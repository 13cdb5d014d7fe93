package testenv

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"slices"
	"testing"
)

// TarEntries reads a tar or tar.gz (told apart by its first bytes) and returns its entry names,
// sorted, each followed by ">" and its link target when it has one.
func TarEntries(t testing.TB, r io.Reader) []string {
	t.Helper()
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			t.Fatal(err)
		}
		in = zr
	}
	var names []string
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		if h.Linkname != "" {
			names = append(names, h.Name+">"+h.Linkname)
		} else {
			names = append(names, h.Name)
		}
	}
	slices.Sort(names)
	return names
}
