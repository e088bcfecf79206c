package server

import (
	"context"
	"net/http"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/anthropic"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// messages answers POST /v1/messages: Anthropic's Messages API.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req anthropic.Request
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		t, display, e := anthropic.Turn(&req, false, s.noteOnce)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		t.Msgs, req.Messages, req.Tools = nil, nil, nil // the body's memory goes before the request waits
		return func(ctx context.Context) { s.reply(ctx, w, req.Stream, display == "omitted", p) }
	})
}

// reply runs a Messages turn and answers it, streamed or whole.
func (s *Server) reply(ctx context.Context, w http.ResponseWriter, stream, omit bool, p *prepared) {
	var events *wire.SSE
	if stream {
		events = wire.StartSSE(w)
	}
	o := anthropic.NewReply(s.opts.Name, p.counted, omit, events)
	if stream && o.Start() != nil {
		return
	}
	res, err := s.runTurn(ctx, p, nil, func(_ int, d chat.Delta) error { return o.Delta(d) })
	if err == nil {
		err = o.Finish(res, p.clamped)
	}
	if err != nil {
		switch {
		case !stream:
			writeAPIError(w, s.serverError(err))
		case context.Cause(ctx) != context.Canceled:
			o.Fail(s.serverError(err))
		}
		return
	}
	if !stream {
		wire.WriteJSON(w, http.StatusOK, o.Message())
	}
}

// countTokens answers POST /v1/messages/count_tokens: the prompt tokens
// the request would render to, tools and system included.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req anthropic.Request
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		if req.Model != "" && req.Model != s.opts.Name {
			writeAPIError(w, wire.NotFound("model", "model_not_found", "model: the model %q does not exist (this server has %q)", req.Model, s.opts.Name))
			return
		}
		t, _, e := anthropic.Turn(&req, true, s.noteOnce)
		if e != nil {
			writeAPIError(w, e)
			return
		}
		_, counted, e := s.chatPrompt(t.Msgs, t.RenderOptions())
		if e != nil {
			writeAPIError(w, e)
			return
		}
		wire.WriteJSON(w, http.StatusOK, map[string]int{"input_tokens": counted})
	})
}
