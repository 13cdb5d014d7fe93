package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunList: a list written is read back; a list that names bytes outside the file, an empty or
// negative run, too many runs or no JSON at all is refused (it comes from another host).
func TestRunList(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "runs.json")
	want := []Run{{0, 4096}, {8192, 12288}}
	if err := WriteRunList(p, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRunList(p, 20480)
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("read back %v, %v; want %v", got, err, want)
	}
	if _, err := ReadRunList(p, 20479); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("a run past the end of the file: %v", err)
	}
	for name, body := range map[string]string{
		"negative": `[{"off":-4096,"len":4096}]`,
		"empty":    `[{"off":0,"len":0}]`,
		"overflow": `[{"off":4096,"len":9223372036854775807}]`,
		"not json": `{"off":`,
	} {
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := ReadRunList(p, 1<<30); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
	many := make([]Run, MaxRuns+1)
	for i := range many {
		many[i] = Run{int64(i) * 4096, 4096}
	}
	WriteRunList(p, many)
	if _, err := ReadRunList(p, 1<<40); err == nil {
		t.Errorf("%d runs accepted", len(many))
	}
}
