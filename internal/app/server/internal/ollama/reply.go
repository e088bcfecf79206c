package ollama

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// Stream writes a streamed answer: one JSON object per line
// (application/x-ndjson), each flushed. The headers go with the first
// line, so that an error before any line still gets its own status, as
// in Ollama.
type Stream struct {
	w       http.ResponseWriter
	started bool
}

// NewStream returns the stream writer of w.
func NewStream(w http.ResponseWriter) *Stream { return &Stream{w: w} }

// Send writes one line and flushes it.
func (s *Stream) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.Header().Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
	}
	if _, err := s.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}

// Fail reports an error: with its status before the first line, else as
// a last line {"error": "..."}, which Ollama's clients raise.
func (s *Stream) Fail(e *wire.APIError) {
	if !s.started {
		if e.RetryAfter > 0 {
			s.w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
		}
		wire.WriteJSON(s.w, e.Status, ErrorBody(e))
		return
	}
	s.Send(ErrorBody(e))
}

// Metrics are the timings and counts of the last object: durations in
// nanoseconds, as Ollama gives them. PromptEvalCount is the prompt tokens
// computed (those the prefix cache restored are not evaluated, as in
// Ollama's runner); EvalCount the tokens generated.
type Metrics struct {
	TotalDuration      time.Duration `json:"total_duration,omitempty"`
	LoadDuration       time.Duration `json:"load_duration,omitempty"`
	PromptEvalCount    int           `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration,omitempty"`
	EvalCount          int           `json:"eval_count,omitempty"`
	EvalDuration       time.Duration `json:"eval_duration,omitempty"`
}

// Timing is when a request's phases began: its arrival, its turn to
// generate (the queue and body decoding before it are Ollama's "load"),
// its first token and its end.
type Timing struct {
	Start, Loaded, First, End time.Time
}

// Metrics turns the timing and counts into Ollama's metrics.
func (t Timing) Metrics(promptEval, eval int) Metrics {
	if t.End.IsZero() {
		t.End = time.Now()
	}
	if t.Loaded.IsZero() {
		t.Loaded = t.Start
	}
	if t.First.IsZero() {
		t.First = t.End
	}
	return Metrics{TotalDuration: t.End.Sub(t.Start), LoadDuration: t.Loaded.Sub(t.Start),
		PromptEvalCount: promptEval, PromptEvalDuration: t.First.Sub(t.Loaded),
		EvalCount: eval, EvalDuration: t.End.Sub(t.First)}
}

// TokenLogprob is a token's log-probability: its text, and its bytes
// when they are not valid UTF-8 on their own.
type TokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes,omitempty"`
}

// Logprob is a generated token's log-probability with the most likely
// alternatives (top_logprobs).
type Logprob struct {
	TokenLogprob
	TopLogprobs []TokenLogprob `json:"top_logprobs,omitempty"`
}

// message is the assistant's message of a chat answer.
type message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	Thinking  string     `json:"thinking,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Function callFunction `json:"function"`
}

type callFunction struct {
	Index     int             `json:"index"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// chatObject is an /api/chat answer or one line of its stream.
type chatObject struct {
	Model      string     `json:"model"`
	CreatedAt  time.Time  `json:"created_at"`
	Message    message    `json:"message"`
	Done       bool       `json:"done"`
	DoneReason string     `json:"done_reason,omitempty"`
	Logprobs   []Logprob  `json:"logprobs,omitempty"`
	Debug      *debugInfo `json:"_debug_info,omitempty"`
	Metrics
}

// generateObject is an /api/generate answer or one line of its stream.
type generateObject struct {
	Model      string     `json:"model"`
	CreatedAt  time.Time  `json:"created_at"`
	Response   string     `json:"response"`
	Thinking   string     `json:"thinking,omitempty"`
	Done       bool       `json:"done"`
	DoneReason string     `json:"done_reason,omitempty"`
	Logprobs   []Logprob  `json:"logprobs,omitempty"`
	Debug      *debugInfo `json:"_debug_info,omitempty"`
	Metrics
}

type debugInfo struct {
	RenderedTemplate string `json:"rendered_template"`
}

// Reply builds an answer of /api/chat (or /api/generate) from a turn's
// deltas, and streams it when its stream is set: a line per delta
// (reasoning as message.thinking or thinking, content as message.content
// or response, a tool call once its call closes), then a last line with
// done, done_reason and the metrics. Not streamed, Object is the whole
// answer.
type Reply struct {
	model    string
	generate bool
	stream   *Stream
	content  strings.Builder
	thinking strings.Builder
	calls    []toolCall
	held     []Logprob // logprobs not sent yet
	logprobs []Logprob // every logprob, for an answer not streamed
	done     string
	metrics  Metrics
}

// NewReply starts the answer of model (the name the request gave, which
// Ollama echoes) for /api/generate (generate) or /api/chat, streamed to
// stream unless it is nil.
func NewReply(model string, generate bool, stream *Stream) *Reply {
	return &Reply{model: model, generate: generate, stream: stream}
}

// Logprob adds a generated token's logprob: it goes with the next line
// (a token whose text the parser holds back has none yet).
func (o *Reply) Logprob(lp Logprob) {
	if o.stream == nil {
		o.logprobs = append(o.logprobs, lp)
		return
	}
	o.held = append(o.held, lp)
}

// Delta adds what one token added to the reply.
func (o *Reply) Delta(d chat.Delta) error {
	o.content.WriteString(d.Content)
	o.thinking.WriteString(d.Reasoning)
	var calls []toolCall
	if d.ToolCall != nil {
		args := json.RawMessage(d.ToolCall.Function.Arguments)
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		c := toolCall{ID: wire.NewID("call_"), Function: callFunction{Index: len(o.calls), Name: d.ToolCall.Function.Name, Arguments: args}}
		o.calls = append(o.calls, c)
		calls = []toolCall{c}
	}
	if o.stream == nil {
		return nil
	}
	return o.send(d.Content, d.Reasoning, calls, false)
}

// Text adds raw text (a raw /api/generate's tokens).
func (o *Reply) Text(s string) error {
	return o.Delta(chat.Delta{Content: s})
}

func (o *Reply) send(content, thinking string, calls []toolCall, done bool) error {
	lps := o.held
	o.held = nil
	if o.generate {
		g := generateObject{Model: o.model, CreatedAt: time.Now().UTC(), Response: content, Thinking: thinking, Done: done, Logprobs: lps}
		if done {
			g.DoneReason, g.Metrics = o.done, o.metrics
		}
		return o.stream.Send(g)
	}
	c := chatObject{Model: o.model, CreatedAt: time.Now().UTC(), Message: message{Role: "assistant", Content: content, Thinking: thinking, ToolCalls: calls},
		Done: done, Logprobs: lps}
	if done {
		c.DoneReason, c.Metrics = o.done, o.metrics
	}
	return o.stream.Send(c)
}

// Finish sets done_reason ("stop" or "length"; a reply that called tools
// stopped) and the metrics, and ends a stream with its last line.
func (o *Reply) Finish(finish string, m Metrics) error {
	o.done, o.metrics = "stop", m
	if finish == "length" {
		o.done = "length"
	}
	if o.stream == nil {
		return nil
	}
	return o.send("", "", nil, true)
}

// Object is the whole answer, for a request not streamed.
func (o *Reply) Object() any {
	now := time.Now().UTC()
	if o.generate {
		return generateObject{Model: o.model, CreatedAt: now, Response: o.content.String(), Thinking: o.thinking.String(),
			Done: true, DoneReason: o.done, Logprobs: o.logprobs, Metrics: o.metrics}
	}
	return chatObject{Model: o.model, CreatedAt: now, Message: message{Role: "assistant", Content: o.content.String(),
		Thinking: o.thinking.String(), ToolCalls: o.calls}, Done: true, DoneReason: o.done, Logprobs: o.logprobs, Metrics: o.metrics}
}

// LoadObject is the answer to a request with nothing to generate: the
// model is loaded (done_reason "load"), or, with keep_alive 0, "unload"
// (k3 serve keeps its model loaded either way).
func LoadObject(model string, generate, unload bool) any {
	reason := "load"
	if unload {
		reason = "unload"
	}
	now := time.Now().UTC()
	if generate {
		return generateObject{Model: model, CreatedAt: now, Done: true, DoneReason: reason}
	}
	return chatObject{Model: model, CreatedAt: now, Message: message{Role: "assistant"}, Done: true, DoneReason: reason}
}

// DebugObject is the answer to _debug_render_only: the prompt as it
// would be sent to the model, with no generation.
func DebugObject(model string, generate bool, rendered string) any {
	now := time.Now().UTC()
	if generate {
		return generateObject{Model: model, CreatedAt: now, Debug: &debugInfo{RenderedTemplate: rendered}}
	}
	return chatObject{Model: model, CreatedAt: now, Debug: &debugInfo{RenderedTemplate: rendered}}
}
