package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/ollama"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// ollamaRoutes registers Ollama's API: GET / ("Ollama is running", what
// clients probe), /api/version, /api/tags, /api/ps, POST /api/show,
// /api/chat, /api/generate and /api/pull (of the served model: already
// there). Ollama's endpoints that manage or embed models answer 501 with
// the reason.
func (s *Server) ollamaRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("Ollama is running"))
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, map[string]string{"version": ollama.APIVersion})
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, s.ollamaModel().Tags())
	})
	mux.HandleFunc("GET /api/ps", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, s.ollamaModel().PS(time.Now()))
	})
	mux.HandleFunc("POST /api/show", s.ollamaShow)
	mux.HandleFunc("POST /api/chat", s.ollamaChat)
	mux.HandleFunc("POST /api/generate", s.ollamaGenerate)
	mux.HandleFunc("POST /api/pull", s.ollamaPull)
	for pattern, why := range map[string]string{
		"POST /api/push":             "k3 serve cannot push models",
		"POST /api/create":           "k3 serve cannot create models: it serves the checkpoint given to --model",
		"POST /api/copy":             "k3 serve cannot copy models: it serves the one given to --model (--name names it)",
		"DELETE /api/delete":         "k3 serve cannot delete models: it serves the one given to --model",
		"POST /api/embed":            "embeddings are not supported: Kimi K3 is served here as a generative model",
		"POST /api/embeddings":       "embeddings are not supported: Kimi K3 is served here as a generative model",
		"/api/blobs/{digest}":        "k3 serve stores no blobs: it serves the checkpoint given to --model",
		"POST /api/experimental/{x}": "Ollama's experimental endpoints are not supported",
	} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			writeAPIError(w, wire.NewAPIError(http.StatusNotImplemented, "invalid_request_error", "", "not_implemented", "%s %s: %s", r.Method, r.URL.Path, why))
		})
	}
	for p, allow := range map[string]string{"/api/version": "GET, HEAD", "/api/tags": "GET, HEAD", "/api/ps": "GET, HEAD",
		"/api/show": "POST", "/api/chat": "POST", "/api/generate": "POST", "/api/pull": "POST"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeAPIError(w, wire.NewAPIError(http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
				"method %s is not allowed on %s (use %s)", r.Method, r.URL.Path, allow))
		})
	}
}

// ollamaModel describes the served model for Ollama's listings.
func (s *Server) ollamaModel() *ollama.Model {
	c := s.m.Config()
	return &ollama.Model{Name: s.opts.Name, Loaded: time.Unix(s.created, 0).UTC(), Fingerprint: fmt.Sprintf("%+v", c),
		ContextLength: s.opts.MaxContext, ResidentBytes: s.m.Stats().PlannedBytes,
		Layers: c.Layers, Hidden: c.Hidden, Vocab: c.Vocab, Experts: c.Experts, ExpertsUsed: c.TopK, Heads: c.MLAHeads}
}

// ollamaCheckModel checks a request's model: required, and the served
// one (with or without its tag).
func (s *Server) ollamaCheckModel(model string) *wire.APIError {
	if model == "" {
		return wire.BadRequest("model", "", "model is required")
	}
	if !ollama.ModelMatches(model, s.opts.Name) {
		return ollama.NotFound(model)
	}
	return nil
}

// ollamaShow answers POST /api/show.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req ollama.ShowRequest
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		if req.Model == "" {
			req.Model = req.Name
		}
		if e := s.ollamaCheckModel(req.Model); e != nil {
			writeAPIError(w, e)
			return
		}
		wire.WriteJSON(w, http.StatusOK, s.ollamaModel().Show())
	})
}

// ollamaPull answers POST /api/pull: the served model is there already
// ({"status": "success"}, a line of its own when streamed); any other
// cannot be pulled.
func (s *Server) ollamaPull(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req struct {
			Model  string `json:"model"`
			Name   string `json:"name"`
			Stream *bool  `json:"stream"`
		}
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		if req.Model == "" {
			req.Model = req.Name
		}
		if req.Model == "" {
			writeAPIError(w, wire.BadRequest("model", "", "model is required"))
			return
		}
		if !ollama.ModelMatches(req.Model, s.opts.Name) {
			writeAPIError(w, wire.NewAPIError(http.StatusNotImplemented, "invalid_request_error", "model", "not_implemented",
				"k3 serve cannot pull models: it serves one, %q, loaded from --model", ollama.TaggedName(s.opts.Name)))
			return
		}
		done := map[string]string{"status": "success"}
		if req.Stream == nil || *req.Stream {
			ollama.NewStream(w).Send(done)
			return
		}
		wire.WriteJSON(w, http.StatusOK, done)
	})
}

// ollamaChat answers POST /api/chat: Ollama's chat, one more translation
// onto the chat path (prepare, runTurn), like /v1/messages.
func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	tm := ollama.Timing{Start: time.Now()}
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req ollama.ChatRequest
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if e := s.ollamaCheckModel(req.Model); e != nil {
			writeAPIError(w, e)
			return nil
		}
		t, set, e := ollama.ChatTurn(&req, s.noteOnce)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if set.Load {
			wire.WriteJSON(w, http.StatusOK, ollama.LoadObject(req.Model, false, set.Unload))
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if e := s.ollamaApply(&p.opts, len(p.prompt), set, &p.clamped); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if set.DebugRender {
			wire.WriteJSON(w, http.StatusOK, ollama.DebugObject(req.Model, false, s.tok.DecodeLenient(p.prompt)))
			return nil
		}
		t.Msgs, req.Messages, req.Tools = nil, nil, nil // the body's memory goes before the request waits
		return func(ctx context.Context) { s.ollamaTurn(ctx, w, req.Model, false, p, set, tm) }
	})
}

// ollamaGenerate answers POST /api/generate: the prompt (with system) as
// a chat turn, or, with raw, sent to the model as it is.
func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request) {
	tm := ollama.Timing{Start: time.Now()}
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req ollama.GenerateRequest
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if e := s.ollamaCheckModel(req.Model); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if req.Raw {
			return s.ollamaRaw(w, &req, tm)
		}
		t, set, e := ollama.GenerateTurn(&req, s.noteOnce)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if set.Load {
			wire.WriteJSON(w, http.StatusOK, ollama.LoadObject(req.Model, true, set.Unload))
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if e := s.ollamaApply(&p.opts, len(p.prompt), set, &p.clamped); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if set.DebugRender {
			wire.WriteJSON(w, http.StatusOK, ollama.DebugObject(req.Model, true, s.tok.DecodeLenient(p.prompt)))
			return nil
		}
		t.Msgs, req.Prompt = nil, ""
		return func(ctx context.Context) { s.ollamaTurn(ctx, w, req.Model, true, p, set, tm) }
	})
}

// ollamaApply sets what Ollama's request asks of the generation beyond
// the turn: its sampling (Ollama's options and defaults, in place of the
// OpenAI defaults prepare set), the context bound of options.num_ctx and
// logprobs.
func (s *Server) ollamaApply(o *k3.GenerateOptions, promptLen int, set *ollama.Settings, clamped *bool) *wire.APIError {
	sp := set.Sampling
	seed := o.Sampling.Seed // random, unless the request gives one
	if sp.Seed != nil {
		seed = uint64(*sp.Seed)
	}
	o.Sampling = k3.SamplingOptions{Temperature: float32(sp.Temperature), TopK: sp.TopK, TopP: float32(sp.TopP), MinP: float32(sp.MinP),
		RepetitionPenalty: float32(sp.RepeatPenalty), PresencePenalty: float32(sp.PresencePenalty), FrequencyPenalty: float32(sp.FrequencyPenalty), Seed: seed}
	if n := set.NumCtx; n > 0 {
		switch {
		case n > s.opts.MaxContext:
			return wire.Unsupported("options.num_ctx", "options.num_ctx %d is larger than this server's context of %d tokens (k3 serve --max-context); ask for at most %d, or start the server with a larger --max-context",
				n, s.opts.MaxContext, s.opts.MaxContext)
		case promptLen >= n:
			return wire.BadRequest("options.num_ctx", "context_length_exceeded", "prompt is too long: %d tokens, and options.num_ctx is %d", promptLen, n)
		case o.MaxTokens > n-promptLen:
			o.MaxTokens, *clamped = n-promptLen, true
		}
	}
	o.Logprobs, o.TopLogprobs = set.Logprobs, set.TopLogprobs
	return nil
}

// ollamaLogprob is token t's logprob in Ollama's shape.
func (s *Server) ollamaLogprob(t k3.Token) ollama.Logprob {
	text, b := s.tokenText(t.ID)
	lp := ollama.Logprob{TokenLogprob: ollama.TokenLogprob{Token: text, Logprob: float64(t.Logprob), Bytes: b}}
	for _, a := range t.TopLogprobs {
		at, ab := s.tokenText(a.ID)
		lp.TopLogprobs = append(lp.TopLogprobs, ollama.TokenLogprob{Token: at, Logprob: float64(a.Logprob), Bytes: ab})
	}
	return lp
}

// ollamaTurn runs an Ollama chat (or generate) turn and answers it,
// streamed as NDJSON (Ollama's default) or whole.
func (s *Server) ollamaTurn(ctx context.Context, w http.ResponseWriter, model string, generate bool, p *prepared, set *ollama.Settings, tm ollama.Timing) {
	var stream *ollama.Stream
	if set.Stream {
		stream = ollama.NewStream(w)
	}
	o := ollama.NewReply(model, generate, stream)
	p.onStart = func() { tm.Loaded = time.Now() }
	res, err := s.runTurn(ctx, p, func(_ int, t k3.Token) {
		if tm.First.IsZero() {
			tm.First = time.Now()
		}
		if p.opts.Logprobs && !isStop(&p.opts, t.ID) {
			o.Logprob(s.ollamaLogprob(t))
		}
	}, func(_ int, d chat.Delta) error { return o.Delta(d) })
	if err == nil {
		c := res.Choices[0]
		tm.End = time.Now()
		err = o.Finish(c.Finish, tm.Metrics(res.PromptTokens-res.CachedTokens, c.CompletionTokens))
	}
	s.ollamaEnd(ctx, w, stream, o, err)
}

// ollamaEnd answers a generation that ended with err (nil: the whole
// reply, unless it was streamed).
func (s *Server) ollamaEnd(ctx context.Context, w http.ResponseWriter, stream *ollama.Stream, o *ollama.Reply, err error) {
	if err != nil {
		switch {
		case stream == nil:
			writeAPIError(w, s.serverError(err))
		case context.Cause(ctx) != context.Canceled:
			stream.Fail(s.serverError(err))
		}
		return
	}
	if stream == nil {
		wire.WriteJSON(w, http.StatusOK, o.Object())
	}
}

// ollamaRaw prepares an /api/generate with raw: the prompt's text,
// control tokens included, is the model's input as it is, and the reply
// is the generated text up to the end of the message (the stop tokens
// of a chat reply), unparsed.
func (s *Server) ollamaRaw(w http.ResponseWriter, req *ollama.GenerateRequest, tm ollama.Timing) func(context.Context) {
	set, stops, maxTokens, e := ollama.RawSettings(req, s.noteOnce)
	if e != nil {
		writeAPIError(w, e)
		return nil
	}
	if set.Load {
		wire.WriteJSON(w, http.StatusOK, ollama.LoadObject(req.Model, true, set.Unload))
		return nil
	}
	text, _ := json.Marshal(req.Prompt)
	prompt, e := s.parsePrompt(text)
	if e != nil {
		writeAPIError(w, e)
		return nil
	}
	def := math.MaxInt
	if maxTokens != nil {
		def = *maxTokens
	}
	opts, _, e := s.options(&wire.Params{}, len(prompt), nil, def)
	if e != nil {
		writeAPIError(w, e)
		return nil
	}
	opts.StopTokens, opts.StopStrings = s.chatStop, stops
	var clamped bool
	if e := s.ollamaApply(&opts, len(prompt), set, &clamped); e != nil {
		writeAPIError(w, e)
		return nil
	}
	if set.DebugRender {
		wire.WriteJSON(w, http.StatusOK, ollama.DebugObject(req.Model, true, s.tok.DecodeLenient(prompt)))
		return nil
	}
	req.Prompt = ""
	model := req.Model
	return func(ctx context.Context) {
		var stream *ollama.Stream
		if set.Stream {
			stream = ollama.NewStream(w)
		}
		o := ollama.NewReply(model, true, stream)
		in := genInput{prompt: prompt, n: 1, opts: opts, onStart: func() { tm.Loaded = time.Now() }}
		res, err := s.generate(ctx, in, func(_ int, t k3.Token) error {
			if tm.First.IsZero() {
				tm.First = time.Now()
			}
			if opts.Logprobs && !isStop(&opts, t.ID) {
				o.Logprob(s.ollamaLogprob(t))
			}
			if t.Text == "" {
				return nil
			}
			return o.Text(t.Text)
		})
		if err == nil {
			q := res.seqs[0]
			tm.End = time.Now()
			err = o.Finish(q.finish, tm.Metrics(res.promptTokens-res.cachedTokens, q.completionTokens))
		}
		s.ollamaEnd(ctx, w, stream, o, err)
	}
}
