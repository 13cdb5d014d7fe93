package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/auth"
	"github.com/pandastack/pandastack/internal/sandboxes"
	"github.com/pandastack/pandastack/internal/scheduler"
	"github.com/pandastack/pandastack/internal/store"
)

// Error is an answer in the public error shape: {"error": {"code", "message"}}.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

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

// toAPIError maps any error to the public shape. Unknown errors become `internal`: their text is
// logged, not shown (the caller gets the request id to quote instead).
func toAPIError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	var ae *auth.Error
	if errors.As(err, &ae) {
		return errorf(http.StatusUnauthorized, "unauthorized", "%s", ae.Message), true
	}
	var se *sandboxes.Error
	if errors.As(err, &se) {
		switch se.Kind {
		case sandboxes.NotFound:
			return notFound("%s", se.Message), true
		case sandboxes.Conflict:
			return conflict("%s", se.Message), true
		}
	}
	var le *scheduler.LimitError
	if errors.As(err, &le) {
		return invalid("%s", le.Reason), true
	}
	var ce *scheduler.CapacityError
	if errors.As(err, &ce) {
		return errorf(http.StatusServiceUnavailable, "capacity", "%s", ce.Reason), true
	}
	var age *agentclient.Error
	if errors.As(err, &age) {
		switch age.Status {
		case http.StatusUnauthorized:
			// The agent rejected *our* token: an operator problem, not the caller's. (Its 403s are
			// the guest refusing a file operation, and pass through as `forbidden`.)
			return nil, false
		case http.StatusNotImplemented:
			return errorf(age.Status, "not_implemented", "%s", age.Message), true
		}
		if age.Status >= 400 && age.Status < 600 && age.Status != http.StatusInternalServerError {
			return &Error{Status: age.Status, Code: age.Code, Message: age.Message}, true
		}
		return nil, false // writeError words it, with the request id
	}
	var ue *agentclient.Unreachable
	if errors.As(err, &ue) {
		return nil, false
	}
	if errors.Is(err, store.ErrBadCursor) {
		return invalid("cursor is malformed: pass next_cursor from a previous page unchanged"), true
	}
	return nil, false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// writeError answers err in the public shape. Internal errors carry the request id and are logged
// with the real cause.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := toAPIError(err)
	if !ok {
		rid := w.Header().Get("X-Request-Id")
		s.log.Error("internal error", "request_id", rid, "method", r.Method, "path", r.URL.Path, "err", err)
		msg := "internal error (request id " + rid + ")"
		var ue *agentclient.Unreachable
		var age *agentclient.Error
		switch {
		case errors.As(err, &ue):
			msg = "the sandbox's host did not answer (request id " + rid + ")"
		case errors.As(err, &age) && age.Status != http.StatusUnauthorized && age.Status != http.StatusForbidden:
			msg = "the sandbox's host failed: " + age.Message + " (request id " + rid + ")"
		}
		e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: msg}
	}
	writeJSON(w, e.Status, map[string]any{"error": map[string]string{"code": e.Code, "message": e.Message}})
}

const maxJSONBody = 1 << 20

// decodeJSON reads one JSON object into v: at most 1 MiB, no unknown fields, nothing after it.
// An empty body is an empty object when allowEmpty, else an error.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			if allowEmpty {
				return nil
			}
			return invalid("request body is empty: send a JSON object")
		}
		return jsonError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err)
		}
		return invalid("request body has data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "request body is larger than the %d-byte limit for JSON bodies", maxJSONBody)
	case errors.As(err, &se):
		return invalid("request body is not valid JSON (at byte %d): %s", se.Offset, se.Error())
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("request body must be a JSON object, not %s", te.Value)
		}
		return invalid("%s must be %s, not %s", te.Field, jsonTypeName(te.Type), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body is truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return invalid("unknown field %s", f)
	}
	return invalid("request body: %s", strings.TrimPrefix(msg, "json: "))
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return t.String()
}

// decodeLenient is decodeJSON that ignores unknown fields: agents may be newer than the server.
func decodeLenient(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(v); err != nil {
		return jsonError(err)
	}
	return nil
}
