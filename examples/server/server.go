package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/tokenizer"
)

// Server serves one k3 model with the OpenAI API: /v1/completions,
// /v1/chat/completions (both with and without SSE streaming) and
// /v1/models. Every request gets its own session on the shared model; at
// most Parallel generate at once, the others wait. A generation stops when
// its client goes away (the request's context is cancelled).
type Server struct {
	m          *k3.Model
	tok        *tokenizer.Tokenizer
	name       string
	maxContext int
	created    int64
	slots      chan struct{}
	speculate  int
	eos        []int // stop tokens of every completion: [EOS], if the tokenizer has it
	chatStops  []int // stop tokens of a chat reply: generation_config.json's, <|end_of_msg|>, [EOS]

	active    atomic.Int64 // generations running now
	cancelled atomic.Int64 // generations stopped because their client went away
	generated atomic.Int64 // tokens generated, all requests together

	// afterToken, if set, is called after each generated token (a test
	// hook).
	afterToken func()
	// script, if set, may return the ids a generation for prompt emits
	// instead of the model's (a test hook: it makes the random test model
	// call a tool); nil lets the model generate.
	script func(prompt []int) []int
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// Name is the model id in requests and responses.
	Name string
	// MaxContext is the model's Options.MaxContext (0 means k3's default,
	// 4096): prompt plus completion must fit.
	MaxContext int
	// Parallel is the number of generations that run at once; 0 means 4.
	Parallel int
	// Speculate is every generation's GenerateOptions.Speculate: up to that
	// many drafted tokens (prompt lookup) verified per pass; the text is
	// exactly that of plain decoding. 0 is off.
	Speculate int
}

// NewServer returns a server for m, which needs a tokenizer with Kimi K3's
// chat tokens.
func NewServer(m *k3.Model, o ServerOptions) (*Server, error) {
	tok := m.Tokenizer()
	if tok == nil {
		return nil, errors.New("the model has no tokenizer")
	}
	if o.MaxContext == 0 {
		o.MaxContext = 4096
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	s := &Server{m: m, tok: tok, name: o.Name, maxContext: o.MaxContext, created: time.Now().Unix(), slots: make(chan struct{}, o.Parallel),
		speculate: o.Speculate}
	for _, content := range []string{chat.TokOpen, chat.TokClose, chat.TokSep, chat.TokEndOfMsg} {
		if _, ok := tok.ID(content); !ok {
			return nil, fmt.Errorf("the tokenizer has no %s token (Kimi K3's chat format needs it)", content)
		}
	}
	if id, ok := tok.ID(chat.TokEOS); ok {
		s.eos = []int{id}
	}
	s.chatStops = m.StopTokens()
	return s, nil
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	for _, p := range []string{"/v1/models", "/v1/completions", "/v1/chat/completions"} {
		allow := "POST"
		if p == "/v1/models" {
			allow = "GET, HEAD"
		}
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", fmt.Sprintf("method %s is not allowed on %s (use %s)", r.Method, p, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "unknown_url", fmt.Sprintf("unknown URL %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Active returns the number of generations running now.
func (s *Server) Active() int64 { return s.active.Load() }

// Cancelled returns the number of generations stopped because their
// client went away.
func (s *Server) Cancelled() int64 { return s.cancelled.Load() }

// apiError is an OpenAI error response.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, code, format string, args ...any) *apiError {
	e := &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func writeError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	e := &apiError{status: status, Message: msg, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	writeAPIError(w, e)
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// serverError maps a generation error to an API error.
func serverError(err error) *apiError {
	switch {
	case errors.Is(err, k3.ErrContextFull):
		return badRequest("", "context_length_exceeded", "%v", err)
	case errors.Is(err, k3.ErrBadOptions), errors.Is(err, k3.ErrTokenOutOfRange):
		return badRequest("", "", "%v", err)
	case errors.Is(err, k3.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, Message: "the server is shutting down", Type: "server_error"}
	}
	return &apiError{status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": s.name, "object": "model", "created": s.created, "owned_by": "k3"}},
	})
}

// decode reads a JSON request body of at most 8 MiB.
func decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20))
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{status: http.StatusRequestEntityTooLarge, Message: "request body larger than 8 MiB", Type: "invalid_request_error"}
		}
		return badRequest("", "", "the request body is not valid JSON for this endpoint: %v", err)
	}
	if dec.More() {
		return badRequest("", "", "the request body has data after the JSON object")
	}
	return nil
}

// params are the request fields both endpoints share.
type params struct {
	Model            string          `json:"model"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	PresencePenalty  float64         `json:"presence_penalty"`
	FrequencyPenalty float64         `json:"frequency_penalty"`
	// Extensions that vLLM and llama.cpp accept too.
	TopK              int     `json:"top_k"`
	MinP              float64 `json:"min_p"`
	RepetitionPenalty float64 `json:"repetition_penalty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// options validates p and turns it into GenerateOptions; maxTokens is nil
// when the request leaves it to the server (def, capped by the room left
// in the context).
func (s *Server) options(p *params, promptLen int, maxTokens *int, def int) (k3.GenerateOptions, *apiError) {
	o := k3.GenerateOptions{Speculate: s.speculate}
	if p.Model != "" && p.Model != s.name {
		e := badRequest("model", "model_not_found", "the model %q does not exist (this server has %q)", p.Model, s.name)
		e.status = http.StatusNotFound
		return o, e
	}
	if p.N != nil && *p.N != 1 {
		return o, badRequest("n", "", "n must be 1")
	}
	room := s.maxContext - promptLen
	if room <= 0 {
		return o, badRequest("", "context_length_exceeded", "the prompt has %d tokens; the context holds %d", promptLen, s.maxContext)
	}
	switch {
	case maxTokens == nil:
		o.MaxTokens = min(def, room)
	case *maxTokens < 1:
		return o, badRequest("max_tokens", "", "max_tokens must be at least 1")
	case *maxTokens > room:
		return o, badRequest("max_tokens", "context_length_exceeded",
			"the context holds %d tokens; the prompt has %d and max_tokens asks for %d more", s.maxContext, promptLen, *maxTokens)
	default:
		o.MaxTokens = *maxTokens
	}
	sp := &o.Sampling
	sp.Temperature, sp.TopP = 1, 1 // the OpenAI defaults
	if p.Temperature != nil {
		if !(*p.Temperature >= 0 && *p.Temperature <= 2) {
			return o, badRequest("temperature", "", "temperature must be between 0 and 2")
		}
		sp.Temperature = float32(*p.Temperature)
	}
	if p.TopP != nil {
		if !(*p.TopP > 0 && *p.TopP <= 1) {
			return o, badRequest("top_p", "", "top_p must be in (0, 1]")
		}
		sp.TopP = float32(*p.TopP)
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"presence_penalty", p.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty}} {
		if !(x.v >= -2 && x.v <= 2) {
			return o, badRequest(x.name, "", "%s must be between -2 and 2", x.name)
		}
	}
	sp.PresencePenalty, sp.FrequencyPenalty = float32(p.PresencePenalty), float32(p.FrequencyPenalty)
	if p.TopK < 0 {
		return o, badRequest("top_k", "", "top_k must not be negative")
	}
	if !(p.MinP >= 0 && p.MinP <= 1) {
		return o, badRequest("min_p", "", "min_p must be in [0, 1]")
	}
	if !(p.RepetitionPenalty >= 0) || math.IsInf(p.RepetitionPenalty, 0) {
		return o, badRequest("repetition_penalty", "", "repetition_penalty must be a positive number")
	}
	sp.TopK, sp.MinP, sp.RepetitionPenalty = p.TopK, float32(p.MinP), float32(p.RepetitionPenalty)
	if p.Seed != nil {
		sp.Seed = uint64(*p.Seed)
	} else {
		sp.Seed = mrand.Uint64()
	}
	stops, err := parseStop(p.Stop)
	if err != nil {
		return o, err
	}
	o.StopStrings = stops
	o.StopTokens = s.eos
	return o, nil
}

// parseStop reads "stop": null, a string, or up to 4 strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	var list []string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "", "stop must be a string or an array of strings")
	}
	if len(list) > 4 {
		return nil, badRequest("stop", "", "at most 4 stop sequences")
	}
	for _, s := range list {
		if s == "" {
			return nil, badRequest("stop", "", "stop sequences must not be empty")
		}
	}
	return list, nil
}

// result is what one generation produced.
type result struct {
	text             strings.Builder
	promptTokens     int
	completionTokens int
	finish           string // "stop" or "length"
}

// generate runs prompt on a new session, calling emit with each token as
// it comes. It waits for a free slot first. An error from emit (the client
// went away) or a cancelled ctx ends the generation.
func (s *Server) generate(ctx context.Context, prompt []int, opts k3.GenerateOptions, emit func(k3.Token) error) (*result, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		s.cancelled.Add(1)
		return nil, ctx.Err()
	}
	defer func() { <-s.slots }()
	s.active.Add(1)
	defer s.active.Add(-1)

	res := &result{promptTokens: len(prompt), finish: "length"}
	var ids []int
	stoppedByToken := false
	tokens := s.m.Generate(ctx, prompt, opts) // a session of its own, closed at the end
	if s.script != nil {
		if ids := s.script(prompt); ids != nil {
			tokens = s.scripted(ids, opts)
		}
	}
	for t, err := range tokens {
		if err != nil {
			if ctx.Err() != nil {
				s.cancelled.Add(1)
				return res, ctx.Err()
			}
			return res, err
		}
		ids = append(ids, t.ID)
		res.completionTokens++
		s.generated.Add(1)
		for _, st := range opts.StopTokens {
			stoppedByToken = stoppedByToken || t.ID == st
		}
		res.text.WriteString(t.Text)
		if emit != nil {
			if err := emit(t); err != nil {
				s.cancelled.Add(1)
				return res, err
			}
		}
		if s.afterToken != nil {
			s.afterToken()
		}
	}
	if stoppedByToken || res.completionTokens < opts.MaxTokens {
		res.finish = "stop"
	} else if len(opts.StopStrings) > 0 {
		// The last token may have completed a stop string.
		all := s.tok.DecodeLenient(ids)
		for _, st := range opts.StopStrings {
			if strings.Contains(all, st) {
				res.finish = "stop"
			}
		}
	}
	return res, nil
}

// sse writes server-sent events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
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

func (e *sse) done() error { return e.raw([]byte("[DONE]")) }

// fail reports an error after the stream started.
func (e *sse) fail(err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = serverError(err)
	}
	e.send(map[string]any{"error": ae})
	e.done()
}

func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (r *result) usage() *usage {
	return &usage{r.promptTokens, r.completionTokens, r.promptTokens + r.completionTokens}
}

// completionRequest is a POST /v1/completions body.
type completionRequest struct {
	params
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Logprobs  *int            `json:"logprobs"`
	Suffix    *string         `json:"suffix"`
	BestOf    *int            `json:"best_of"`
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

// parsePrompt reads "prompt": a string, an array of one string, an array
// of token ids, or an array of one array of ids.
func (s *Server) parsePrompt(raw json.RawMessage) ([]int, *apiError) {
	var str string
	var strs []string
	var ids []int
	var idss [][]int
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest("prompt", "", "prompt is required")
	case json.Unmarshal(raw, &str) == nil:
		ids = s.tok.Encode(str)
	case json.Unmarshal(raw, &strs) == nil:
		if len(strs) != 1 {
			return nil, badRequest("prompt", "", "one prompt per request (got %d)", len(strs))
		}
		ids = s.tok.Encode(strs[0])
	case json.Unmarshal(raw, &ids) == nil:
	case json.Unmarshal(raw, &idss) == nil:
		if len(idss) != 1 {
			return nil, badRequest("prompt", "", "one prompt per request (got %d)", len(idss))
		}
		ids = idss[0]
	default:
		return nil, badRequest("prompt", "", "prompt must be a string, an array of strings or an array of token ids")
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "", "the prompt is empty")
	}
	for _, id := range ids {
		if id < 0 || id >= s.m.Config().Vocab {
			return nil, badRequest("prompt", "", "token id %d is outside the vocabulary [0, %d)", id, s.m.Config().Vocab)
		}
	}
	return ids, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if e := decode(w, r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	switch {
	case req.Logprobs != nil && *req.Logprobs != 0:
		writeAPIError(w, badRequest("logprobs", "", "logprobs are not supported"))
		return
	case req.Suffix != nil && *req.Suffix != "":
		writeAPIError(w, badRequest("suffix", "", "suffix is not supported"))
		return
	case req.BestOf != nil && *req.BestOf != 1:
		writeAPIError(w, badRequest("best_of", "", "best_of must be 1"))
		return
	}
	prompt, e := s.parsePrompt(req.Prompt)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	opts, e := s.options(&req.params, len(prompt), req.MaxTokens, 16)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	echo := ""
	if req.Echo {
		echo = s.tok.DecodeLenient(prompt)
	}
	resp := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: s.name}
	if !req.Stream {
		res, err := s.generate(r.Context(), prompt, opts, nil)
		if err != nil {
			writeAPIError(w, serverError(err))
			return
		}
		resp.Choices = []completionChoice{{Text: echo + res.text.String(), FinishReason: &res.finish}}
		resp.Usage = res.usage()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	stream := startSSE(w)
	chunk := func(text string, finish *string) error {
		resp.Choices = []completionChoice{{Text: text, FinishReason: finish}}
		return stream.send(resp)
	}
	if echo != "" {
		if chunk(echo, nil) != nil {
			return
		}
	}
	res, err := s.generate(r.Context(), prompt, opts, func(t k3.Token) error {
		if t.Text == "" {
			return nil
		}
		return chunk(t.Text, nil)
	})
	if err != nil {
		if r.Context().Err() == nil {
			stream.fail(err)
		}
		return
	}
	if chunk("", &res.finish) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []completionChoice{}
		resp.Usage = res.usage()
		stream.send(resp)
	}
	stream.done()
}

// chatRequest is a POST /v1/chat/completions body.

// scripted yields ids as the tokens of a generation, within opts'
// MaxTokens and StopTokens (see Server.script).
func (s *Server) scripted(ids []int, opts k3.GenerateOptions) func(func(k3.Token, error) bool) {
	return func(yield func(k3.Token, error) bool) {
		dec := s.tok.NewStreamDecoder()
		for k, id := range ids {
			if k == opts.MaxTokens {
				return
			}
			text, _ := dec.Write(id)
			stop := slices.Contains(opts.StopTokens, id)
			if stop {
				text = ""
			}
			if !yield(k3.Token{ID: id, Index: k, Text: text}, nil) || stop {
				return
			}
		}
	}
}
