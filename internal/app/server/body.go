package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// decodeAgent reads the JSON body of a request to one of the coding
// agents' APIs (/v1/responses, /v1/messages) into v. Unlike decode, a
// field v's struct does not list is accepted and ignored, and logged once
// per field name: the agents add fields with their releases, and a field
// a real client sends must never get a 400. Every field the two APIs
// document is in the structs, those that mean nothing here as well.
func (s *Server) decodeAgent(w http.ResponseWriter, r *http.Request, v any) *wire.APIError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		return s.bodyError(w, err)
	}
	if s.opts.LogBodies {
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request body",
			slog.String("path", r.URL.Path), slog.String("body", string(body)))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return s.bodyError(w, io.EOF)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return s.bodyError(w, err)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return nil
	}
	known := jsonFields(reflect.TypeOf(v))
	for name := range fields {
		if !known[name] {
			s.noteOnce(r.URL.Path+" "+name, "ignoring a request field this server does not know",
				slog.String("path", r.URL.Path), slog.String("field", name))
		}
	}
	return nil
}

var fieldsByType sync.Map // reflect.Type -> map[string]bool

// jsonFields returns the JSON names of a struct type's fields, those of
// embedded structs included.
func jsonFields(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if f, ok := fieldsByType.Load(t); ok {
		return f.(map[string]bool)
	}
	out := map[string]bool{}
	if t.Kind() == reflect.Struct {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "":
				for k := range jsonFields(f.Type) {
					out[k] = true
				}
			case name != "":
				out[name] = true
			case f.IsExported():
				out[f.Name] = true
			}
		}
	}
	fieldsByType.Store(t, out)
	return out
}

// maxNotes bounds what noteOnce remembers: clients choose the keys (field
// names), so the set must not grow without end.
const maxNotes = 1024

// noteOnce logs msg at Warn the first time key is seen: what the server
// drops from the agents' requests (a hosted tool, an unknown field) is
// said once, not per request. Beyond maxNotes keys nothing more is
// logged.
func (s *Server) noteOnce(key, msg string, attrs ...slog.Attr) {
	if _, seen := s.noted.Load(key); seen || s.notes.Load() >= maxNotes {
		return
	}
	if _, seen := s.noted.LoadOrStore(key, true); !seen {
		s.notes.Add(1)
		s.opts.Logger.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
	}
}
