package server

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// sse writes server-sent events: OpenAI's chat and completions streams
// send "data:" lines ending with "[DONE]"; the Responses and Messages
// streams name each event ("event: TYPE") and end with their last event.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one "data:" event and flushes it.
func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw(b)
}

func (e *sse) raw(b []byte) error {
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// event writes one named event, "event: name" and its data, and flushes
// it.
func (e *sse) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	return e.rc.Flush()
}

func (e *sse) done() error { return e.raw([]byte("[DONE]")) }

// fail reports an error after the stream started.
func (e *sse) fail(ae *apiError) {
	e.send(map[string]any{"error": ae})
	e.done()
}
