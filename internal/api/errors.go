package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/pandastack/pandastack/internal/agentclient"
	"github.com/pandastack/pandastack/internal/errdefs"
	"github.com/pandastack/pandastack/internal/store"
	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// The handlers' shorthands for the common kinds (errdefs words every kind's status and code).
var (
	invalid  = errdefs.Invalidf
	notFound = errdefs.NotFoundf
	conflict = errdefs.Conflictf
)

// answer is an error as the API puts it on the wire.
type answer struct {
	status        int
	code, message string
}

// toAPIError maps any error to the public shape: an errdefs kind by its status and code, a host
// agent's refusal passed through. Unknown errors become `internal`: their text is logged, not
// shown (the caller gets the request id to quote instead).
func toAPIError(err error) (answer, bool) {
	var age *agentclient.Error
	if errors.As(err, &age) {
		switch age.Status {
		case http.StatusUnauthorized:
			// The agent rejected *our* token: an operator problem, not the caller's. (Its 403s are
			// the guest refusing a file operation, and pass through as `forbidden`.)
			return answer{}, false
		case http.StatusNotImplemented:
			return answer{age.Status, errdefs.NotImplemented.Code(), age.Message}, true
		}
		if age.Status >= 400 && age.Status < 600 && age.Status != http.StatusInternalServerError {
			return answer{age.Status, age.Code, age.Message}, true
		}
		return answer{}, false // writeError words it, with the request id
	}
	var ue *agentclient.Unreachable
	if errors.As(err, &ue) {
		return answer{}, false // writeError words it, with the request id
	}
	if e, ok := errdefs.As(err); ok && e.Kind != errdefs.Internal {
		return answer{e.Kind.Status(), e.WireCode(), e.Message}, true
	}
	if errors.Is(err, store.ErrBadCursor) {
		e := invalid("cursor is malformed: pass next_cursor from a previous page unchanged")
		return answer{e.Kind.Status(), e.WireCode(), e.Message}, true
	}
	return answer{}, false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// reply answers err in the public error shape, else v with status (nothing for a nil v). v is
// built before err is looked at, so it must be safe to build from a failed call's zero values.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	switch {
	case err != nil:
		s.writeError(w, r, err)
	case v == nil:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, v)
	}
}

// errorBody is the public error object.
func errorBody(code, message string) v1.ErrorBody {
	return v1.ErrorBody{Error: v1.ErrorDetail{Code: code, Message: message}}
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
		e = answer{http.StatusInternalServerError, errdefs.Internal.Code(), msg}
	}
	writeJSON(w, e.status, errorBody(e.code, e.message))
}

const maxJSONBody = 1 << 20

// decodeJSON reads one JSON object into v: at most 1 MiB, no unknown fields, nothing after it.
// An empty body is an empty object when allowEmpty, else an error.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	return decodeJSONWithin(w, r, v, allowEmpty, maxJSONBody, false)
}

// decoded is decodeJSON into a new T; when that fails it has answered the error, and ok is false.
func decoded[T any](s *Server, w http.ResponseWriter, r *http.Request, allowEmpty bool) (v T, ok bool) {
	if err := decodeJSON(w, r, &v, allowEmpty); err != nil {
		s.writeError(w, r, err)
		return v, false
	}
	return v, true
}

// decodeJSONWithin is decodeJSON with a body limit of limit bytes; numbers decode into `any`
// fields as json.Number when useNumber (no float rounding).
func decodeJSONWithin(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool, limit int64, useNumber bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if useNumber {
		dec.UseNumber()
	}
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
		return errdefs.New(errdefs.TooLarge, "request body is larger than the %d-byte limit for JSON bodies", mbe.Limit)
	case errors.As(err, &se):
		return invalid("request body is not valid JSON (at byte %d): %s", se.Offset, se.Error())
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("request body must be a JSON object, not %s", te.Value)
		}
		if n, ok := strings.CutPrefix(te.Value, "number "); ok && integerKind(te.Type) && integerLiteral.MatchString(n) {
			// An integer, just too large (or negative for an unsigned field) for the field.
			return invalid("%s is out of range: %s", te.Field, truncateNumber(n))
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

// integerLiteral is a JSON number without fraction or exponent.
var integerLiteral = regexp.MustCompile(`^-?[0-9]+$`)

func integerKind(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
}

// truncateNumber keeps an absurdly long number readable in a message.
func truncateNumber(n string) string {
	if len(n) > 40 {
		return n[:40] + "… (" + strconv.Itoa(len(n)) + " digits)"
	}
	return n
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
