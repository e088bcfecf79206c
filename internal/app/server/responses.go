package server

import (
	"context"
	"net/http"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/responses"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// responses answers POST /v1/responses: OpenAI's Responses API.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req responses.Request
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		var prev *responses.Stored
		if id := req.PreviousResponseID; id != "" {
			var ok bool
			if prev, ok = s.store.Get(id); !ok {
				writeAPIError(w, responses.NotFound("previous_response_id", id))
				return nil
			}
		}
		t, tools, e := responses.Turn(&req, prev, s.noteOnce)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		store := req.Store == nil || *req.Store
		if !store {
			t.Msgs = nil // the body's memory goes before the request waits
		}
		req.Input = nil
		return func(ctx context.Context) { s.respond(ctx, w, &req, p, tools, prev, store) }
	})
}

// respond runs a Responses turn and answers it, streamed or whole, and
// keeps the response if store is set.
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, req *responses.Request, p *prepared, tools *responses.Tools, prev *responses.Stored, store bool) {
	var events *wire.SSE
	if req.Stream {
		events = wire.StartSSE(w)
	}
	o := responses.NewReply(req, responses.Settings{Model: s.opts.Name, ParallelToolCalls: !p.t.OneCall, Store: store,
		Temperature: float64(p.opts.Sampling.Temperature), TopP: float64(p.opts.Sampling.TopP)}, tools, events)
	if req.Stream && o.Start() != nil {
		return
	}
	res, err := s.runTurn(ctx, p, nil, func(_ int, d chat.Delta) error { return o.Delta(d) })
	if err == nil {
		err = o.Finish(res)
	}
	if err != nil {
		if !req.Stream {
			writeAPIError(w, s.serverError(err))
		} else if context.Cause(ctx) != context.Canceled {
			o.Fail(s.serverError(err))
		}
		return
	}
	// The response is stored before the client hears that it is done: a
	// follow-up may come at once.
	if store {
		s.store.Put(o.Stored(req, p.t, res.Choices[0].Msg, prev))
	}
	if !req.Stream {
		wire.WriteJSON(w, http.StatusOK, o.Object())
		return
	}
	o.End()
}

// getResponse answers GET /v1/responses/{id} with a stored response.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sr, ok := s.store.Get(id)
	if !ok {
		writeAPIError(w, responses.NotFound("response_id", id))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(sr.Object(), '\n'))
}

// deleteResponse answers DELETE /v1/responses/{id}.
func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.store.Remove(id) {
		writeAPIError(w, responses.NotFound("response_id", id))
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
}
