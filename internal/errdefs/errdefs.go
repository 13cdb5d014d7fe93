// Package errdefs is the one list of error kinds every PandaStack package returns, and their
// mapping to HTTP, done once for both edges (the public API and the host-agent API).
//
// Packages below the edges return *Error (or wrap one); they never pick an HTTP status. An edge
// answers an *Error with Kind.Status() and its Code; any other error is an internal error, logged
// and never shown. A client of an edge turns an error answer back into an *Error with FromHTTP, so
// a kind survives the hop from host agent to control plane.
package errdefs

import (
	"errors"
	"fmt"
	"net/http"
)

// Kind is what went wrong, independent of transport.
type Kind int

const (
	// Internal: a fault of ours; its text is logged, not shown.
	Internal Kind = iota
	// Invalid: the request is malformed or names something impossible.
	Invalid
	// Unauthorized: no credentials, or credentials that are not valid.
	Unauthorized
	// Forbidden: valid credentials, but not allowed (or the guest refused a file operation).
	Forbidden
	// NotFound: something the request names does not exist (for this caller).
	NotFound
	// Conflict: the request conflicts with the current state.
	Conflict
	// TooLarge: a request body or upload is over its limit.
	TooLarge
	// Failed: the request was understood but its work failed (a template build step).
	Failed
	// Unavailable: something the call depends on (a guest, an upstream) did not answer.
	Unavailable
	// Capacity: no host has room now; retry later or ask for less.
	Capacity
	// NotImplemented: this host or runtime cannot do it.
	NotImplemented
	// NoSpace: the disk is full.
	NoSpace
	// Exhausted: the caller's team is over a quota (or its key over a rate limit).
	Exhausted
)

var kinds = map[Kind]struct {
	status int
	code   string
}{
	Internal:       {http.StatusInternalServerError, "internal"},
	Invalid:        {http.StatusBadRequest, "invalid_request"},
	Unauthorized:   {http.StatusUnauthorized, "unauthorized"},
	Forbidden:      {http.StatusForbidden, "forbidden"},
	NotFound:       {http.StatusNotFound, "not_found"},
	Conflict:       {http.StatusConflict, "conflict"},
	TooLarge:       {http.StatusRequestEntityTooLarge, "payload_too_large"},
	Failed:         {http.StatusUnprocessableEntity, "build_failed"},
	Unavailable:    {http.StatusBadGateway, "upstream_unreachable"},
	Capacity:       {http.StatusServiceUnavailable, "capacity"},
	NotImplemented: {http.StatusNotImplemented, "not_implemented"},
	NoSpace:        {http.StatusInsufficientStorage, "no_space"},
	Exhausted:      {http.StatusTooManyRequests, "quota_exceeded"},
}

// Status is the HTTP status an edge answers for k.
func (k Kind) Status() int { return kinds[k].status }

// Code is k's default wire code (an *Error may carry a more specific one).
func (k Kind) Code() string { return kinds[k].code }

// Error is an error of a known kind. Code, when set, is the wire code in place of the kind's
// default (e.g. "vmm_mismatch" is a Conflict, "guest_unreachable" an Unavailable); Message is for
// people and may be shown to the caller.
type Error struct {
	Kind    Kind
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// WireCode is the code an edge puts on the wire for e.
func (e *Error) WireCode() string {
	if e.Code != "" {
		return e.Code
	}
	return e.Kind.Code()
}

// New returns an error of kind k with a formatted message.
func New(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// WithCode returns an error of kind k whose wire code is code.
func WithCode(k Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Shorthands for the common kinds.
func Invalidf(format string, args ...any) *Error  { return New(Invalid, format, args...) }
func NotFoundf(format string, args ...any) *Error { return New(NotFound, format, args...) }
func Conflictf(format string, args ...any) *Error { return New(Conflict, format, args...) }
func Capacityf(format string, args ...any) *Error { return New(Capacity, format, args...) }

// As finds the *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// KindOf is the kind of err: Internal unless an *Error is in its chain.
func KindOf(err error) Kind {
	if e, ok := As(err); ok {
		return e.Kind
	}
	return Internal
}

// Is reports whether err is of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// FromHTTP is the *Error for an error answer (status, code, message) read off the wire: the kind
// whose code matches, else the kind whose status matches, else Internal. The wire code is kept.
func FromHTTP(status int, code, message string) *Error {
	var byStatus *Kind
	for k, m := range kinds {
		if m.code == code {
			return &Error{Kind: k, Code: code, Message: message}
		}
		if m.status == status && byStatus == nil {
			k := k
			byStatus = &k
		}
	}
	k := Internal
	if byStatus != nil {
		k = *byStatus
	}
	return &Error{Kind: k, Code: code, Message: message}
}
