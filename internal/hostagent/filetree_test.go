package hostagent

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestArchiveStreamLimits: a small gzip that unpacks past the limit (a gzip bomb) is cut at the
// limit, as is a plain body over it; a body within the limit passes whole; a corrupt gzip is
// reported as such.
func TestArchiveStreamLimits(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	if bomb.Len() > 4096 {
		t.Fatalf("the bomb is %d bytes", bomb.Len())
	}
	bombBytes := bytes.Clone(bomb.Bytes())
	body, tarStream, err := archiveStream(&bomb, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, tarStream)
	if !errors.Is(err, errArchiveTooLarge) || !tarStream.exceeded || body.exceeded || n > 64<<10 {
		t.Fatalf("bomb: read %d, %v (unpacked exceeded %v, body exceeded %v)", n, err, tarStream.exceeded, body.exceeded)
	}

	body, tarStream, _ = archiveStream(strings.NewReader(strings.Repeat("x", 100<<10)), 64<<10)
	if _, err := io.Copy(io.Discard, tarStream); !errors.Is(err, errArchiveTooLarge) || !body.exceeded {
		t.Fatalf("plain body over the limit: %v, exceeded %v", err, body.exceeded)
	}
	_, tarStream, _ = archiveStream(strings.NewReader(strings.Repeat("x", 64<<10)), 64<<10)
	if n, err := io.Copy(io.Discard, tarStream); err != nil || n != 64<<10 || tarStream.exceeded {
		t.Fatalf("a body of exactly the limit: %d %v", n, err)
	}

	corrupt := bombBytes
	corrupt[len(corrupt)/2] ^= 0xff
	_, tarStream, _ = archiveStream(bytes.NewReader(corrupt), 4<<20)
	if _, err := io.Copy(io.Discard, tarStream); err == nil || tarStream.failed == nil {
		t.Fatalf("corrupt gzip: %v (failed %v)", err, tarStream.failed)
	}
	if _, _, err := archiveStream(bytes.NewReader([]byte{0x1f, 0x8b, 0, 0}), 1<<20); err == nil {
		t.Fatal("a broken gzip header was taken")
	}
}
