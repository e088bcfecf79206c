// Package server is k3's OpenAI-compatible HTTP server, used by "k3 serve"
// and examples/server, and driven in-process by "k3 batch".
//
// Build one with New and serve its Handler:
//
//	srv, err := server.New(model, server.Options{Name: "kimi-k3", MaxContext: 4096, Sessions: 4})
//	http.ListenAndServe(addr, srv.Handler())
//
// The handler serves every endpoint, so POSTing an OpenAI Batch API line's
// "body" to its "url" (/v1/completions or /v1/chat/completions) on it,
// for instance with httptest.NewRecorder, yields that line's response.
//
// Endpoints: GET /v1/models and /v1/models/{id}; POST /v1/completions and
// /v1/chat/completions, with and without server-sent events; the coding
// agents' APIs, POST /v1/responses (OpenAI Responses, with GET and DELETE
// /v1/responses/{id}) and POST /v1/messages and /v1/messages/count_tokens
// (Anthropic Messages), translated onto the chat completions path
// (turn.go) by the internal packages responses and anthropic, whose
// handlers here (responses.go, messages.go) run the turn; Ollama's API
// (GET / and /api/version, /api/tags, /api/ps; POST /api/show,
// /api/chat and /api/generate, streamed as NDJSON), translated the same
// way by the internal package ollama (ollama.go); GET /health
// (200 when ready, 503 while draining; Loading answers 503 before the
// model is loaded); GET /metrics (Prometheus text format); POST /tokenize
// and /detokenize (llama-server's shapes).
//
// Under load: generation requests run through the model's batcher (their
// steps share passes over the weights); at most Sessions sequences
// generate at once, at most Queue more requests wait, and beyond that a
// request gets 429 with Retry-After before its body is read. At most
// Decoders request bodies are read, decoded and tokenized at once, each at
// most MaxBodyBytes and read within BodyTimeout, so memory stays bounded
// however many clients connect. RequestTimeout, if set, bounds every request.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/responses"
	"github.com/k3go/k3/internal/app/server/internal/wire"
	"github.com/k3go/k3/tokenizer"
)

// Options configure New. Zero values take the defaults given.
type Options struct {
	// Name is the model id in requests and responses; "" means "k3".
	Name string
	// MaxContext must be the model's Options.MaxContext (0 means k3's
	// default, 4096): prompt plus completion must fit.
	MaxContext int
	// Sessions is the most sequences that generate at once (a request
	// with n choices runs n); it should be the model's Options.Sessions.
	// 0 means 4.
	Sessions int
	// Queue is the most generation requests that wait beyond those
	// running; more get 429. 0 means 4 × Sessions; negative means none
	// wait.
	Queue int
	// Decoders is the most request bodies read, decoded and tokenized at
	// once; 0 means 4.
	Decoders int
	// MaxBodyBytes bounds a request body; 0 means 8 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds the time to read a request body once its turn to
	// be decoded comes; 0 means 30 s.
	BodyTimeout time.Duration
	// RequestTimeout bounds a whole request, queueing and generation
	// included; 0 means no limit: a request runs as long as its client
	// stays connected (one reply at a small budget may take hours).
	RequestTimeout time.Duration
	// APIKey, if set, must come as "Authorization: Bearer KEY" on every
	// request but GET /health and CORS preflights.
	APIKey string
	// CORSOrigin, if set, is sent as Access-Control-Allow-Origin ("*" for
	// any origin), and preflight OPTIONS requests are answered.
	CORSOrigin string
	// Speculate is every generation's GenerateOptions.Speculate: a draft
	// length (it may not exceed the model's Options.Speculate under a
	// budget), k3.SpeculateAuto, or 0 for none.
	Speculate int
	// ProgressEvery is how often a generation that has run that long logs
	// a progress line (Info: prompt tokens prefilled, tokens generated,
	// rate, time left); zero means DefaultProgressEvery, negative never.
	ProgressEvery time.Duration
	// Logger gets one access-log line per request (Info) and server
	// events; nil discards them.
	Logger *slog.Logger
	// LogBodies logs the body of every /v1/responses, /v1/messages and
	// Ollama /api/ request (Info), to see what a client really sends.
	LogBodies bool
	// StoredResponses is the most responses /v1/responses keeps for
	// previous_response_id and GET (the oldest go first); 0 means 256,
	// negative none. StoredBytes bounds their total size; 0 means 64 MiB.
	StoredResponses int
	StoredBytes     int64
}

// requestContext is ctx bounded by Options.RequestTimeout, if there is one.
func (s *Server) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opts.RequestTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, s.opts.RequestTimeout, errDeadline)
}

func (o *Options) defaults() error {
	if o.Name == "" {
		o.Name = "k3"
	}
	if o.MaxContext == 0 {
		o.MaxContext = 4096
	}
	if o.Sessions == 0 {
		o.Sessions = 4
	}
	if o.Queue == 0 {
		o.Queue = 4 * o.Sessions
	}
	o.Queue = max(o.Queue, 0)
	if o.Decoders == 0 {
		o.Decoders = 4
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.StoredResponses == 0 {
		o.StoredResponses = 256
	}
	o.StoredResponses = max(o.StoredResponses, 0)
	if o.StoredBytes <= 0 {
		o.StoredBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.MaxContext < 0, o.Sessions < 0, o.Decoders < 0, o.MaxBodyBytes < 0, o.BodyTimeout < 0, o.RequestTimeout < 0, o.Speculate < 0 && o.Speculate != k3.SpeculateAuto:
		return fmt.Errorf("server: %w: MaxContext, Sessions, Decoders, MaxBodyBytes, BodyTimeout, RequestTimeout and Speculate must not be negative", k3.ErrBadOptions)
	}
	return nil
}

// Server serves one k3 model. Its methods are safe for concurrent use.
type Server struct {
	m        *k3.Model
	tok      *tokenizer.Tokenizer
	opts     Options
	created  int64
	lim      *limiter
	met      *metrics
	progress *inflight // the generations running now
	handler  http.Handler
	eos      []int // stop tokens of every completion: [EOS], if the tokenizer has it
	chatStop []int // stop tokens of a chat reply: generation_config.json's, <|end_of_msg|>, [EOS]
	// maxTokenBytes is the longest token's text: a text longer than
	// MaxContext × maxTokenBytes cannot fit the context whatever it
	// tokenizes to, so it is refused before it is tokenized.
	maxTokenBytes int
	draining      atomic.Bool

	store *responses.Store // the responses /v1/responses keeps
	noted sync.Map         // what noteOnce logged
	notes atomic.Int64     // how many keys noted holds

	active    atomic.Int64 // generation requests running now
	cancelled atomic.Int64 // generations stopped because their client went away

	// Test hooks. afterToken, if set, is called after each generated
	// token; script may return the ids a generation for prompt emits
	// instead of the model's (it makes the random test model call a
	// tool); inDecode, if set, is called with +1 and -1 around each body
	// decode.
	afterToken func()
	script     func(prompt []int) []int
	inDecode   func(delta int)
	// randomSeed is the seed of a request that gives none (the
	// Responses and Messages APIs have no seed field); tests fix it.
	randomSeed func() uint64
}

// New returns a server for m, which needs a tokenizer with Kimi K3's chat
// tokens. It registers itself as m's pass observer (Model.ObservePasses)
// for the rows-per-pass metrics.
func New(m *k3.Model, o Options) (*Server, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	tok := m.Tokenizer()
	if tok == nil {
		return nil, fmt.Errorf("server: %w: the model has no tokenizer", k3.ErrNoTokenizer)
	}
	for _, content := range []string{chat.TokOpen, chat.TokClose, chat.TokSep, chat.TokEndOfMsg} {
		if _, ok := tok.ID(content); !ok {
			return nil, fmt.Errorf("server: the tokenizer has no %s token (Kimi K3's chat format needs it)", content)
		}
	}
	s := &Server{m: m, tok: tok, opts: o, created: time.Now().Unix(), randomSeed: mrand.Uint64,
		lim: newLimiter(o.Sessions, o.Queue, o.Decoders), met: newMetrics(m), store: responses.NewStore(o.StoredResponses, o.StoredBytes)}
	// Stop tokens outside the model's vocabulary (a tokenizer larger than
	// the model, as with a synthetic checkpoint) can never be generated.
	V := m.Config().Vocab
	if id, ok := tok.ID(chat.TokEOS); ok && id < V {
		s.eos = []int{id}
	}
	for _, id := range m.StopTokens() {
		if id >= 0 && id < V {
			s.chatStop = append(s.chatStop, id)
		}
	}
	for id := range tok.VocabSize() {
		if b, ok := tok.TokenBytes(id); ok {
			s.maxTokenBytes = max(s.maxTokenBytes, len(b))
		}
	}
	for _, a := range tok.AddedTokens() {
		s.maxTokenBytes = max(s.maxTokenBytes, len(a.Content))
	}
	s.maxTokenBytes = max(s.maxTokenBytes, 1)
	m.ObservePasses(s.met.observePass)
	s.progress = newInflight(o.Logger, o.ProgressEvery)
	s.met.reg.MustRegister(s.progress)
	s.handler = s.routes()
	return s, nil
}

// Handler returns the HTTP handler of every endpoint, with the access log,
// metrics, CORS and API key around it.
func (s *Server) Handler() http.Handler { return s.handler }

// Drain makes /health answer 503 (so that a load balancer stops sending
// requests) while the requests in flight finish; call it when a graceful
// shutdown starts.
func (s *Server) Drain() { s.draining.Store(true) }

// Active returns the number of generation requests running now.
func (s *Server) Active() int64 { return s.active.Load() }

// Cancelled returns the number of generations stopped because their
// client went away or their deadline passed.
func (s *Server) Cancelled() int64 { return s.cancelled.Load() }

// Loading returns a handler for the time before the model is loaded:
// /health answers 503 {"status": "loading"}, every other URL 503 in
// OpenAI's error shape, with Retry-After.
func Loading() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.Header().Set("Retry-After", "5")
			wire.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
			return
		}
		writeAPIError(dialectWriter{w, dialectOf(r.URL.Path)}, &wire.APIError{Status: http.StatusServiceUnavailable, RetryAfter: 5, Type: "server_error", Message: "the model is still loading; retry shortly"})
	})
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", s.met.handler)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /v1/models/{id...}", s.model)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", s.deleteResponse)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	s.ollamaRoutes(mux) // ollama.go
	for p, allow := range map[string]string{"/health": "GET, HEAD", "/metrics": "GET, HEAD", "/v1/models": "GET, HEAD", "/v1/models/": "GET, HEAD",
		"/v1/completions": "POST", "/v1/chat/completions": "POST", "/tokenize": "POST", "/detokenize": "POST",
		"/v1/responses": "POST", "/v1/responses/": "GET, DELETE", "/v1/messages": "POST", "/v1/messages/count_tokens": "POST"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeAPIError(w, wire.NewAPIError(http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
				"method %s is not allowed on %s (use %s)", r.Method, r.URL.Path, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, wire.NewAPIError(http.StatusNotFound, "invalid_request_error", "", "unknown_url", "unknown URL %s %s", r.Method, r.URL.Path))
	})
	return s.wrap(mux)
}

// recorder notes a response's status and size for the access log and
// metrics. Unwrap lets http.ResponseController reach the connection
// (flushes for SSE, read deadlines).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	api    dialect
}

func (r *recorder) dialect() dialect { return r.api }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// genInfo is what a request's generation reports to the access log: its
// prompt, the part the prefix cache restored, and the cache key the
// client gave (prompt_cache_key in a Responses or chat completions body,
// else a previous_response_id's conversation, else routeKey of the
// headers), which a router in front of several servers may hash on
// (docs/SCALING.md).
type genInfo struct {
	path, remote               string // the request's, for the progress log
	generated                  bool
	promptTokens, cachedTokens int
	cacheKey                   string
	// Speculative decoding: drafted tokens verified, and accepted.
	drafted, accepted int64
}

type genInfoKey struct{}

// routeHeaders are the request headers that name a conversation, in the
// order the router of docs/nginx/k3.conf reads them: k3's own (for a
// client that can set a header but puts no key in its body), Codex CLI's
// session id (it sends the same value as prompt_cache_key) and Claude
// Code's session id (the Messages API has no cache key).
var routeHeaders = []string{"X-K3-Cache-Key", "Session-Id", "X-Claude-Code-Session-Id"}

// maxKeyLog bounds the cache key the access log records.
const maxKeyLog = 256

// routeKey is the first of routeHeaders that h has, or "".
func routeKey(h http.Header) string {
	for _, name := range routeHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return v
		}
	}
	return ""
}

// wrap adds, outermost first: the access log and request metrics, CORS,
// the API key.
func (s *Server) wrap(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, api: dialectOf(r.URL.Path)}
		info := &genInfo{path: r.URL.Path, remote: r.RemoteAddr}
		r = r.WithContext(context.WithValue(r.Context(), genInfoKey{}, info))
		s.serve(rec, r, mux)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		// ServeMux sets the request's Pattern when it routes it: the
		// endpoint label stays one of a few routes, whatever URLs come.
		endpoint := "other"
		if _, path, ok := strings.Cut(r.Pattern, " "); ok && path != "/" {
			endpoint = strings.TrimSuffix(path, "{$}") // "GET /{$}" is the root alone
		}
		d := time.Since(start)
		s.met.request(endpoint, rec.status, d)
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", rec.status),
			slog.Int64("bytes", rec.bytes), slog.Duration("duration", d), slog.String("remote", r.RemoteAddr)}
		if info.generated {
			attrs = append(attrs, slog.Int("prompt_tokens", info.promptTokens), slog.Int("cached_tokens", info.cachedTokens),
				slog.Int64("drafted_tokens", info.drafted), slog.Int64("accepted_tokens", info.accepted))
			key := info.cacheKey
			if key == "" {
				key = routeKey(r.Header)
			}
			if len(key) > maxKeyLog {
				key = key[:maxKeyLog]
			}
			if key != "" {
				attrs = append(attrs, slog.String("cache_key", key))
			}
		}
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	if o := s.opts.CORSOrigin; o != "" {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", o)
		if o != "*" {
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if k := s.opts.APIKey; k != "" && r.URL.Path != "/health" {
		// Anthropic's clients send the key as x-api-key.
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			got = r.Header.Get("X-Api-Key")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(k)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="k3"`)
			writeAPIError(w, wire.NewAPIError(http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key",
				"a valid API key is required: send the header \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\") with the key the server was started with (--api-key)"))
			return
		}
	}
	mux.ServeHTTP(w, r)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		wire.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	// A cluster serves only while every rank is connected; the reason
	// names the missing ones, and the status comes back by itself once
	// they are.
	if cs := s.m.Cluster(); cs.Health != nil {
		wire.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "rank missing", "reason": cs.Health.Error()})
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// modelObject is the model in the shapes of both APIs: OpenAI's (id,
// object, created, owned_by) and Anthropic's (id, type, display_name,
// created_at, and the context as max_input_tokens and max_tokens).
func (s *Server) modelObject() map[string]any {
	return map[string]any{"id": s.opts.Name, "object": "model", "created": s.created, "owned_by": "k3",
		"type": "model", "display_name": s.opts.Name, "created_at": time.Unix(s.created, 0).UTC().Format(time.RFC3339),
		"max_input_tokens": s.opts.MaxContext, "max_tokens": s.opts.MaxContext}
}

// models lists the one model as OpenAI's and Anthropic's clients both
// read a list: object and data, has_more, first_id and last_id.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	wire.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{s.modelObject()},
		"has_more": false, "first_id": s.opts.Name, "last_id": s.opts.Name})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != s.opts.Name {
		writeAPIError(w, wire.NewAPIError(http.StatusNotFound, "invalid_request_error", "model", "model_not_found",
			"the model %q does not exist (this server has %q)", id, s.opts.Name))
		return
	}
	wire.WriteJSON(w, http.StatusOK, s.modelObject())
}

// admitted runs a generation request's handler within the limits: 429
// beyond the queue, the per-request deadline, one decode place while body
// reads its body. body decodes and tokenizes and returns a function that
// generates and answers (nil when it already answered with an error).
func (s *Server) admitted(w http.ResponseWriter, r *http.Request, body func(r *http.Request) func(ctx context.Context)) {
	if !s.lim.admit() {
		s.met.rejected.Inc()
		writeAPIError(w, &wire.APIError{Status: http.StatusTooManyRequests, RetryAfter: 1, Type: "server_error", Code: ptr("queue_full"),
			Message: fmt.Sprintf("the server is busy: %d requests are running or queued, as many as it holds; retry after a second", s.lim.capacity)})
		return
	}
	defer s.lim.leave()
	ctx, cancel := s.requestContext(r.Context())
	defer cancel()
	r = r.WithContext(ctx)
	if err := s.lim.startDecode(ctx); err != nil {
		s.cancelled.Add(1)
		writeAPIError(w, s.serverError(err))
		return
	}
	if s.inDecode != nil {
		s.inDecode(+1)
	}
	// A client that trickles its body holds a decode place at most this
	// long.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	run := body(r)
	if run != nil {
		// A stream's connection stays open as long as it generates.
		rc.SetReadDeadline(time.Time{})
	}
	if s.inDecode != nil {
		s.inDecode(-1)
	}
	s.lim.endDecode()
	if run != nil {
		run(ctx)
	}
}

func ptr[T any](v T) *T { return &v }

// decode reads a JSON request body into v. Unknown fields are refused
// (a field the server does not implement is never silently ignored), and
// the errors name the field and the JSON type it needs.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *wire.APIError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			return wire.BadRequest("", "", "the request body has data after the JSON object")
		}
		return nil
	}
	return s.bodyError(w, err)
}

// bodyError describes an error reading or decoding a JSON body.
func (s *Server) bodyError(w http.ResponseWriter, err error) *wire.APIError {
	var mbe *http.MaxBytesError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var ne interface{ Timeout() bool }
	switch {
	case errors.As(err, &mbe):
		return wire.NewAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
			"the request body is larger than %d bytes, the server's limit (--max-body)", s.opts.MaxBodyBytes)
	case errors.As(err, &ne) && ne.Timeout():
		// Closing the connection spares the server reading the rest of a
		// body that trickles in, after the response.
		w.Header().Set("Connection", "close")
		return wire.NewAPIError(http.StatusRequestTimeout, "invalid_request_error", "", "request_timeout",
			"the request body did not arrive within %v", s.opts.BodyTimeout)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return wire.BadRequest("", "", "the request body must be a JSON object")
		}
		return wire.BadRequest(field, "", "%s must be %s", field, wire.JSONKind(te.Type))
	case errors.As(err, &se):
		return wire.BadRequest("", "", "the request body is not valid JSON: %v (at byte %d)", se, se.Offset)
	case errors.Is(err, io.EOF):
		return wire.BadRequest("", "", "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return wire.BadRequest("", "", "the request body ends in the middle of its JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return wire.Unsupported(name, "the field %q is not supported by this server", name)
	}
	return wire.BadRequest("", "", "the request body could not be read: %v", err)
}
