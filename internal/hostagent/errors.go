package hostagent

import (
	"errors"

	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/guest"
)

// guestKinds maps the guest agent's error codes (internal/guest) onto kinds, once: a file call's
// failure in the guest keeps its meaning for the caller.
var guestKinds = map[string]errdefs.Kind{
	"invalid_argument":  errdefs.Invalid,
	"not_a_directory":   errdefs.Invalid,
	"is_a_directory":    errdefs.Invalid,
	"not_found":         errdefs.NotFound,
	"permission_denied": errdefs.Forbidden,
	"already_exists":    errdefs.Conflict,
	"not_empty":         errdefs.Conflict,
	"conflict":          errdefs.Conflict,
	"no_space":          errdefs.NoSpace,
}

// apiError is the *errdefs.Error an answer carries for err: an error of a kind keeps it, a guest
// error is mapped by its code, anything else is internal. The host agent's only caller is the
// control plane, which logs internal messages and never shows them, so they are sent as they are.
func apiError(err error) *errdefs.Error {
	if e, ok := errdefs.As(err); ok {
		return e
	}
	var ge *guest.Error
	if errors.As(err, &ge) {
		if k, ok := guestKinds[ge.Code]; ok {
			return &errdefs.Error{Kind: k, Message: ge.Message}
		}
		return &errdefs.Error{Kind: errdefs.Internal, Message: "guest agent: " + ge.Message}
	}
	return &errdefs.Error{Kind: errdefs.Internal, Message: err.Error()}
}
