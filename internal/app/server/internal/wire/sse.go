package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// SSE writes server-sent events: OpenAI's chat and completions streams
// send "data:" lines ending with "[DONE]"; the Responses and Messages
// streams name each event ("event: TYPE") and end with their last event.
type SSE struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// StartSSE writes the headers of an event stream and returns its writer.
func StartSSE(w http.ResponseWriter) *SSE {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &SSE{w: w, rc: http.NewResponseController(w)}
}

// Send writes one "data:" event and flushes it.
func (e *SSE) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw(b)
}

func (e *SSE) raw(b []byte) error {
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// Event writes one named event, "event: name" and its data, and flushes
// it.
func (e *SSE) Event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// Done ends a "data:" stream with "[DONE]".
func (e *SSE) Done() error { return e.raw([]byte("[DONE]")) }

// Fail reports an error after the stream started.
func (e *SSE) Fail(ae *APIError) {
	e.Send(map[string]any{"error": ae})
	e.Done()
}
