package sandboxes

import (
	"testing"
	"time"

	"github.com/pandastack/pandastack/internal/scheduler"
)

// TestUnrecordedGraceOutlastsCreates: reconcile kills a sandbox with no record only after its
// grace, which must outlast every create or fork in flight (they record after the host call)
// with room for a record statement caught at its deadline (scheduler.DefaultUnrecordedGrace).
func TestUnrecordedGraceOutlastsCreates(t *testing.T) {
	for name, d := range map[string]time.Duration{"CreateTimeout": CreateTimeout, "LifecycleTimeout": LifecycleTimeout} {
		if scheduler.DefaultUnrecordedGrace < d+5*time.Minute {
			t.Errorf("the reconcile's grace %v does not outlast %s %v by 5 min: a create in flight could be killed", scheduler.DefaultUnrecordedGrace, name, d)
		}
	}
}
