package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/server/internal/anthropic"
	"github.com/k3go/k3/internal/app/server/internal/ollama"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// dialect is the API family of a URL: its errors take that API's shape.
type dialect uint8

const (
	dialectOpenAI    dialect = iota // {"error": {"message", "type", "param", "code"}}
	dialectAnthropic                // {"type": "error", "error": {"type", "message"}}
	dialectOllama                   // {"error": "message"}
)

// dialectOf returns the dialect of a request path: Anthropic's for
// /v1/messages and below, Ollama's for /api/ and below, OpenAI's for
// everything else.
func dialectOf(path string) dialect {
	switch {
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return dialectAnthropic
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return dialectOllama
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
func writeAPIError(w http.ResponseWriter, e *wire.APIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if d, ok := w.(dialected); ok {
		switch d.dialect() {
		case dialectAnthropic:
			wire.WriteJSON(w, e.Status, anthropic.ErrorBody(e))
			return
		case dialectOllama:
			wire.WriteJSON(w, e.Status, ollama.ErrorBody(e))
			return
		}
	}
	wire.WriteJSON(w, e.Status, map[string]any{"error": e})
}

// serverError maps a generation error to an API error whose message a
// user can act on.
func (s *Server) serverError(err error) *wire.APIError {
	var ae *wire.APIError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errDeadline):
		return wire.NewAPIError(http.StatusGatewayTimeout, "timeout", "", "request_timeout",
			"the request ran past the server's per-request deadline of %v; ask for fewer tokens or raise --request-timeout", s.opts.RequestTimeout)
	case errors.Is(err, k3.ErrContextFull):
		return wire.BadRequest("", "context_length_exceeded", "the prompt and completion do not fit in the context of %d tokens", s.opts.MaxContext)
	case errors.Is(err, k3.ErrBadOptions), errors.Is(err, k3.ErrTokenOutOfRange):
		return wire.BadRequest("", "", "%v", err)
	case errors.Is(err, k3.ErrBudget):
		return &wire.APIError{Status: http.StatusServiceUnavailable, RetryAfter: 1, Message: "every session the RAM budget reserves is in use; retry shortly", Type: "server_error"}
	case errors.Is(err, k3.ErrClosed), errors.Is(err, ErrShutdown):
		return &wire.APIError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error"}
	case errors.Is(err, k3.ErrNonFinite):
		return &wire.APIError{Status: http.StatusInternalServerError, Message: "the model produced non-finite logits (a damaged checkpoint?); see the server log", Type: "server_error"}
	case errors.Is(err, k3.ErrExpertLoad):
		return &wire.APIError{Status: http.StatusInternalServerError, Message: "an expert's weights could not be read from the checkpoint; see the server log", Type: "server_error"}
	}
	return &wire.APIError{Status: http.StatusInternalServerError, Message: "generation failed: " + err.Error(), Type: "server_error"}
}
