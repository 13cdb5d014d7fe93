package bundle

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// TestPackRespectsGitignore: .git and ignored paths stay out; negations and nested .gitignore
// files apply; the bundle reads back; an oversize tree is TooLarge.
func TestPackRespectsGitignore(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		".gitignore":          "node_modules/\n*.log\n/dist\n!keep.log\nsecret/**/*.pem\n",
		"index.js":            "x",
		"app.log":             "x",
		"keep.log":            "x",
		"node_modules/a/b.js": "x",
		"dist/out.js":         "x",
		"src/dist/kept.js":    "x",
		"secret/a/b/key.pem":  "x",
		"secret/readme":       "x",
		".git/HEAD":           "x",
		"sub/.gitignore":      "local.txt\n",
		"sub/local.txt":       "x",
		"local.txt":           "x",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	b, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Read(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		if !f.Dir {
			got = append(got, f.Name)
		}
	}
	slices.Sort(got)
	want := []string{".gitignore", "index.js", "keep.log", "local.txt", "secret/readme", "src/dist/kept.js", "sub/.gitignore"}
	if !slices.Equal(got, want) {
		t.Fatalf("packed %v\nwant %v", got, want)
	}

	big := t.TempDir()
	junk := make([]byte, 1<<20)
	for i := range 40 {
		rand.Read(junk) // incompressible
		os.WriteFile(filepath.Join(big, "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), junk, 0o644)
	}
	if _, err := Pack(big); !errdefs.Is(err, errdefs.TooLarge) {
		t.Fatalf("oversize pack: %v", err)
	}
}
