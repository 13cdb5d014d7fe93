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

// TestAddresses: an app, its previews and its deployments are host names under .apps.<domain>;
// without a proxy domain, none has an address.
func TestAddresses(t *testing.T) {
	a := store.App{Name: "web"}
	live := store.Deployment{ID: "dep_abc", State: Live, SnapshotID: "snap_1"}
	on := &Service{cfg: Config{ProxyDomain: "example.com"}}
	for what, c := range map[string]struct{ got, want string }{
		"app":                {on.URL(a), "http://web.apps.example.com"},
		"app route":          {on.routeURL(a, ""), "http://web.apps.example.com"},
		"preview":            {on.routeURL(a, "feature-x"), "http://web--feature-x.apps.example.com"},
		"deployment":         {on.DeploymentURL(a, live), "http://web--abc.apps.example.com"},
		"building":           {on.DeploymentURL(a, store.Deployment{ID: "dep_b", State: Building}), ""},
		"no domain: app":     {(&Service{}).URL(a), ""},
		"no domain: preview": {(&Service{}).routeURL(a, "feature-x"), ""},
		"no domain: deploy":  {(&Service{}).DeploymentURL(a, live), ""},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", what, c.got, c.want)
		}
	}
}
