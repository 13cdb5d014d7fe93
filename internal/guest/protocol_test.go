package guest

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func lines(s *HandshakeScanner) []string { return slices.Collect(s.Lines()) }

func TestHandshakeScannerGarbage(t *testing.T) {
	var s HandshakeScanner
	s.Feed([]byte("\x00\x01garbage\nmore PANDASTACK-HEL"))
	if got := lines(&s); len(got) != 0 {
		t.Fatalf("got %q from garbage", got)
	}
	// The marker was split across feeds.
	s.Feed([]byte("LO {\"nonce\":\"ab\"}\nPANDASTACK-GO ab\nYAMUX"))
	got := lines(&s)
	want := []string{`PANDASTACK-HELLO {"nonce":"ab"}`, "PANDASTACK-GO ab"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q want %q", got, want)
	}
	if r := s.Rest(); string(r) != "YAMUX" {
		t.Fatalf("rest %q", r)
	}
}

func TestHandshakeScannerLastMarkerWins(t *testing.T) {
	var s HandshakeScanner
	s.Feed([]byte("PANDASTACK-HELLO {\"trunc\xffPANDASTACK-GO ff\n"))
	if got := lines(&s); len(got) != 1 || got[0] != "PANDASTACK-GO ff" {
		t.Fatalf("got %q", got)
	}
}

func TestHandshakeScannerLongLinesBounded(t *testing.T) {
	var s HandshakeScanner
	// A marker followed by megabytes without a newline must not grow the buffer.
	s.Feed([]byte("PANDASTACK-HELLO "))
	for range 256 {
		s.Feed(bytes.Repeat([]byte("x"), 8192))
		if got := lines(&s); len(got) != 0 {
			t.Fatalf("got %q", got)
		}
		if len(s.buf) > 2*MaxHandshakeLine {
			t.Fatalf("buffer grew to %d", len(s.buf))
		}
	}
	s.Feed([]byte("\nPANDASTACK-GO 01\n"))
	if got := lines(&s); len(got) != 1 || got[0] != "PANDASTACK-GO 01" {
		t.Fatalf("got %q", got)
	}
	// Lots of markers without newlines: still linear and bounded.
	s.Feed(bytes.Repeat([]byte("PANDASTACK-"), 20000))
	lines(&s)
	if len(s.buf) > 2*MaxHandshakeLine {
		t.Fatalf("buffer grew to %d", len(s.buf))
	}
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrame(&b, FrameData, []byte{0xff, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&b, FrameEOF, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&b, FrameData, make([]byte, MaxFramePayload+1)); err == nil {
		t.Fatal("oversized frame written")
	}
	fr := NewFrameReader(&b)
	typ, p, err := fr.Next()
	if err != nil || typ != FrameData || !bytes.Equal(p, []byte{0xff, 0, 1}) {
		t.Fatalf("got %q %v %v", typ, p, err)
	}
	typ, p, err = fr.Next()
	if err != nil || typ != FrameEOF || len(p) != 0 {
		t.Fatalf("got %q %v %v", typ, p, err)
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}

	var pe *ProtocolError
	_, _, err = NewFrameReader(bytes.NewReader([]byte{'D', 0, 0x10, 0, 1})).Next()
	if !errors.As(err, &pe) {
		t.Fatalf("oversized header: %v", err)
	}
	_, _, err = NewFrameReader(bytes.NewReader([]byte{'Z', 0, 0, 0, 0})).Next()
	if !errors.As(err, &pe) {
		t.Fatalf("unknown type: %v", err)
	}
	_, _, err = NewFrameReader(bytes.NewReader([]byte{'D', 0, 0, 0, 5, 1})).Next()
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated: %v", err)
	}
}
