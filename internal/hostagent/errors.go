package hostagent

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/pandastack/pandastack/internal/guest"
)

// Error is an API error: a stable code, its HTTP status and a message for people.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, "invalid_request", format, args...)
}

func notFound(format string, args ...any) *Error {
	return errorf(http.StatusNotFound, "not_found", format, args...)
}

func conflict(format string, args ...any) *Error {
	return errorf(http.StatusConflict, "conflict", format, args...)
}

// guestErrorStatus maps the guest agent's error codes onto the API's.
var guestErrorStatus = map[string]struct {
	status int
	code   string
}{
	"invalid_argument":  {http.StatusBadRequest, "invalid_request"},
	"not_a_directory":   {http.StatusBadRequest, "invalid_request"},
	"is_a_directory":    {http.StatusBadRequest, "invalid_request"},
	"not_found":         {http.StatusNotFound, "not_found"},
	"permission_denied": {http.StatusForbidden, "forbidden"},
	"already_exists":    {http.StatusConflict, "conflict"},
	"not_empty":         {http.StatusConflict, "conflict"},
	"no_space":          {http.StatusInsufficientStorage, "no_space"},
}

// asAPIError turns any error into an *Error: guest errors keep their meaning, the rest are 500s.
func asAPIError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var ge *guest.Error
	if errors.As(err, &ge) {
		if m, ok := guestErrorStatus[ge.Code]; ok {
			return &Error{Status: m.status, Code: m.code, Message: ge.Message}
		}
		return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "guest agent: " + ge.Message}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}
