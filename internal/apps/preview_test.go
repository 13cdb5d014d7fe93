package apps

import (
	"testing"

	"github.com/pandastack/pandastack/internal/store"
)

func TestPreviewSlug(t *testing.T) {
	a := store.App{Branch: "main"}
	for branch, want := range map[string]string{
		"main": "", "": "", "feature/x": "feature-x", "Fix--Bug_12": "fix-bug-12", "///": "branch",
		"a-very-long-branch-name-indeed": "a-very-long-branch-n", "release/2026.11-": "release-2026-11",
	} {
		if got := PreviewSlug(a, branch); got != want {
			t.Errorf("PreviewSlug(%q) = %q, want %q", branch, got, want)
		}
	}
}
