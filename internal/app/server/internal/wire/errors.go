// Package wire holds what the server's APIs share below their handlers:
// the error shape and its constructors, the server-sent events writer,
// JSON helpers, the tool and reasoning helpers, and the internal request
// (Turn) each API translates its body into, with its result. It knows
// nothing of the HTTP routes or of the model: the server package runs a
// Turn; the API packages (anthropic, responses) translate to and from it.
package wire

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
)

// APIError is an error response in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type APIError struct {
	Status     int     `json:"-"`
	RetryAfter int     `json:"-"` // seconds, for 429 and 503; 0 leaves the header out
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
}

// Error returns the message.
func (e *APIError) Error() string { return e.Message }

// NewAPIError is an error of the status and type, naming the request's
// field param and the code ("" leaves either null).
func NewAPIError(status int, typ, param, code, format string, args ...any) *APIError {
	e := &APIError{Status: status, Message: fmt.Sprintf(format, args...), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// BadRequest is a 400 invalid_request_error.
func BadRequest(param, code, format string, args ...any) *APIError {
	return NewAPIError(http.StatusBadRequest, "invalid_request_error", param, code, format, args...)
}

// Unsupported refuses a field the server does not implement: it is never
// silently ignored.
func Unsupported(param, format string, args ...any) *APIError {
	return BadRequest(param, "unsupported_parameter", format, args...)
}

// NotFound is a 404 naming what was not found.
func NotFound(param, code, format string, args ...any) *APIError {
	return NewAPIError(http.StatusNotFound, "invalid_request_error", param, code, format, args...)
}

// ItemParam names element i of a list field: "input[3]", "messages[0]".
func ItemParam(list string, i int) string { return fmt.Sprintf("%s[%d]", list, i) }

// WriteJSON writes v as the JSON body of a response with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"the response could not be encoded","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// RawString reads a JSON string; ok is false for anything else.
func RawString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// IsNull reports whether raw is absent or JSON null.
func IsNull(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// JSONMessage describes a JSON decoding error without Go type names.
func JSONMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s must be %s", te.Field, JSONKind(te.Type))
		}
		return "it must be " + JSONKind(te.Type)
	}
	return strings.TrimPrefix(err.Error(), "chat: ")
}

// JSONKind names the JSON type a Go type decodes from.
func JSONKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// NewID is prefix and 24 random hex digits: the id of a response, an
// item, a tool call.
func NewID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
