package agentclient

import (
	"testing"

	"github.com/pandastack/pandastack/internal/errdefs"
)

// An agent's error answer keeps its kind across the hop: by code, else by status.
func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want errdefs.Kind
	}{
		{Error{Status: 409, Code: "vmm_mismatch"}, errdefs.Conflict},
		{Error{Status: 502, Code: "guest_unreachable"}, errdefs.Unavailable},
		{Error{Status: 507, Code: "no_space"}, errdefs.NoSpace},
		{Error{Code: "build_failed"}, errdefs.Failed},
		{Error{Status: 404, Code: "not_found"}, errdefs.NotFound},
		{Error{Status: 500, Code: "internal"}, errdefs.Internal},
	} {
		if got := c.e.Kind(); got != c.want {
			t.Errorf("%+v: kind %v, want %v", c.e, got, c.want)
		}
		if got := c.e.Def().WireCode(); got != c.e.Code {
			t.Errorf("%+v: wire code %q", c.e, got)
		}
	}
}
