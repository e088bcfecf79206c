package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/k3go/k3"
)

// apiError is an error response in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status     int
	retryAfter int     // seconds, for 429 and 503; 0 leaves the header out
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func newAPIError(status int, typ, param, code, format string, args ...any) *apiError {
	e := &apiError{status: status, Message: fmt.Sprintf(format, args...), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func badRequest(param, code, format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, "invalid_request_error", param, code, format, args...)
}

// unsupported refuses a field the server does not implement: it is never
// silently ignored.
func unsupported(param, format string, args ...any) *apiError {
	return badRequest(param, "unsupported_parameter", format, args...)
}

// dialect is the API family of a URL: its errors take that API's shape.
type dialect uint8

const (
	dialectOpenAI    dialect = iota // {"error": {"message", "type", "param", "code"}}
	dialectAnthropic                // {"type": "error", "error": {"type", "message"}}
)

// dialectOf returns the dialect of a request path: Anthropic's for
// /v1/messages and below, OpenAI's for everything else.
func dialectOf(path string) dialect {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") {
		return dialectAnthropic
	}
	return dialectOpenAI
}

// dialected is a ResponseWriter that knows its request's dialect (the
// access log's recorder).
type dialected interface{ dialect() dialect }

// dialectWriter gives a ResponseWriter a dialect (where no recorder does).
type dialectWriter struct {
	http.ResponseWriter
	api dialect
}

func (w dialectWriter) dialect() dialect { return w.api }

// writeAPIError writes e in the shape of the request's API (see dialect).
func writeAPIError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if d, ok := w.(dialected); ok && d.dialect() == dialectAnthropic {
		writeJSON(w, e.status, anthropicError(e))
		return
	}
	writeJSON(w, e.status, map[string]any{"error": e})
}

// anthropicError is e in Anthropic's error shape, the type chosen by the
// status as Anthropic's API chooses it. Anthropic's shape has no param:
// the messages name their field themselves.
func anthropicError(e *apiError) map[string]any {
	typ := "api_error"
	switch e.status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout, http.StatusUnprocessableEntity:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		typ = "overloaded_error"
	case http.StatusGatewayTimeout:
		typ = "timeout_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.Message}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"the response could not be encoded","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// serverError maps a generation error to an API error whose message a
// user can act on.
func (s *Server) serverError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errDeadline):
		return newAPIError(http.StatusGatewayTimeout, "timeout", "", "request_timeout",
			"the request ran past the server's per-request deadline of %v; ask for fewer tokens or raise --request-timeout", s.opts.RequestTimeout)
	case errors.Is(err, k3.ErrContextFull):
		return badRequest("", "context_length_exceeded", "the prompt and completion do not fit in the context of %d tokens", s.opts.MaxContext)
	case errors.Is(err, k3.ErrBadOptions), errors.Is(err, k3.ErrTokenOutOfRange):
		return badRequest("", "", "%v", err)
	case errors.Is(err, k3.ErrBudget):
		return &apiError{status: http.StatusServiceUnavailable, retryAfter: 1, Message: "every session the RAM budget reserves is in use; retry shortly", Type: "server_error"}
	case errors.Is(err, k3.ErrClosed), errors.Is(err, ErrShutdown):
		return &apiError{status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error"}
	case errors.Is(err, k3.ErrNonFinite):
		return &apiError{status: http.StatusInternalServerError, Message: "the model produced non-finite logits (a damaged checkpoint?); see the server log", Type: "server_error"}
	case errors.Is(err, k3.ErrExpertLoad):
		return &apiError{status: http.StatusInternalServerError, Message: "an expert's weights could not be read from the checkpoint; see the server log", Type: "server_error"}
	}
	return &apiError{status: http.StatusInternalServerError, Message: "generation failed: " + err.Error(), Type: "server_error"}
}
