package apps

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// TestLineMux: output events cut anywhere (mid-line, mid-secret) come out as whole lines, each
// with its source's label, the secret redacted; a last line without a newline gets one; a line
// that never ends is cut once it is over maxPartialLine.
func TestLineMux(t *testing.T) {
	events := func(chunks ...string) string {
		var b strings.Builder
		for i, c := range chunks {
			ev := v1.ProcessEvent{Stdout: &c}
			if i%2 == 1 {
				ev = v1.ProcessEvent{Stderr: &c}
			}
			j, _ := json.Marshal(ev)
			b.Write(append(j, '\n'))
		}
		return b.String()
	}
	var out strings.Builder
	m := &lineMux{w: &redactor{w: &out, secrets: []string{"s3cr3t"}}}
	if err := m.copy("sb_a", strings.NewReader(events("hel", "lo s3", "cr3t\nsecond\nthi", "rd"))); err != nil {
		t.Fatal(err)
	}
	if err := m.copy("sb_b", strings.NewReader(events("one\n"))); err != nil {
		t.Fatal(err)
	}
	want := "[sb_a] hello [redacted]\n[sb_a] second\n[sb_a] third\n[sb_b] one\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	long := strings.Repeat("x", maxPartialLine)
	if err := m.copy("sb_c", strings.NewReader(events(long, "yz"))); err != nil {
		t.Fatal(err)
	}
	if want := "[sb_c] " + long + "yz\n"; out.String() != want {
		t.Fatalf("a line that never ends: %d bytes, want %d", out.Len(), len(want))
	}
}
