package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
)

// turn is the server's internal chat request. /v1/chat/completions,
// /v1/responses and /v1/messages each translate their body into one
// (chat.go, responses.go, messages.go), and from there every request
// takes one path: prepare renders and validates it, runTurn generates and
// parses the reply under the same admission, limits and cancellation. The
// endpoints differ only in their mappings in and out.
type turn struct {
	msgs []chat.Message
	// tools are the tools declared, in chat completions' shape: a list of
	// {"type": "function", "function": {"name", "description",
	// "parameters"}}.
	tools      json.RawMessage
	noThinking bool
	effort     string // low, high, max, or "" for the release's default
	toolChoice toolChoice
	// format is the structured output asked for: chat completions'
	// response_format, Responses' text.format, Anthropic's
	// output_config.format. formatParam is its name in the request's API,
	// for errors.
	format      *chat.ResponseFormat
	formatParam string
	// oneCall ends the reply at its first tool call (chat completions'
	// and Responses' parallel_tool_calls false, Anthropic's
	// disable_parallel_tool_use).
	oneCall bool
	// params are the sampling fields, the model and n.
	params params
	// maxTokens bounds the reply (nil: the rest of the context);
	// maxParam is its name in the request's API. With clampMax (the
	// agent APIs, whose clients ask for more than any context holds) a
	// bound beyond the context is lowered to what the context holds;
	// otherwise it is refused.
	maxTokens *int
	maxParam  string
	clampMax  bool
	// stop ends a reply's content at the first of these strings, which
	// are left out.
	stop []string
	// cacheKey groups requests that share a prompt prefix: Responses'
	// prompt_cache_key, or the conversation a previous_response_id
	// continues. It goes to generate, where the prefix cache (issue 25)
	// will take it.
	cacheKey string
}

// toolChoice is the tool choice of a turn: mode "" or "auto" (the model
// decides), "none", or "required", with name set when one function is
// required (chat completions' {"type": "function"}, Anthropic's
// {"type": "tool"}).
type toolChoice struct {
	mode, name string
}

// prepared is a turn ready to generate.
type prepared struct {
	t      *turn
	render chat.Options
	prompt []int
	n      int
	opts   k3.GenerateOptions
	// clamped reports that the context, not the request, bounds the reply
	// (clampMax lowered maxTokens).
	clamped bool
}

// errEnough, returned by a generation's emit, ends that sequence as a
// normal stop: its reply is complete (a stop sequence came, or the one
// tool call parallel_tool_calls false allows).
var errEnough = errors.New("the reply is complete")

// prepare validates t, renders its prompt in Kimi K3's chat format and
// turns its fields into generation options.
func (s *Server) prepare(t *turn) (*prepared, *apiError) {
	// Structured output: the grammar-constrained decoding of issue 26
	// hooks in here, for all three endpoints at once. Until it lands a
	// JSON format is refused: the reply could be anything, and a client
	// asking for JSON must not get text that may not parse.
	if f := t.format; f != nil {
		switch f.Type {
		case "", "text":
		case "json_object", "json_schema":
			return nil, unsupported(t.formatParam, "%s %q is not supported: this server does not constrain its output to JSON yet (only \"text\"); ask for JSON in the messages instead", t.formatParam, f.Type)
		default:
			return nil, badRequest(t.formatParam, "", "%s type %q is not supported (text, json_object, json_schema)", t.formatParam, f.Type)
		}
	}
	o := t.renderOptions()
	prompt, e := s.chatPrompt(t.msgs, o)
	if e != nil {
		return nil, e
	}
	room := s.opts.MaxContext - len(prompt)
	if room <= 0 {
		return nil, s.promptTooLong(len(prompt))
	}
	maxTokens, def, clamped := t.maxTokens, math.MaxInt, false
	if t.clampMax && maxTokens != nil {
		if *maxTokens < 1 {
			return nil, badRequest(t.maxParam, "", "%s must be at least 1", t.maxParam)
		}
		def, clamped, maxTokens = *maxTokens, *maxTokens > room, nil
	}
	opts, n, e := s.options(&t.params, len(prompt), maxTokens, def)
	if e != nil {
		return nil, e
	}
	if !t.params.IgnoreEOS {
		opts.StopTokens = slices.Clone(s.chatStop)
	}
	// Stop sequences end the content, not the markup around it: runTurn
	// matches them on the parsed reply.
	t.stop = append(t.stop, opts.StopStrings...)
	opts.StopStrings = nil
	return &prepared{t: t, render: o, prompt: prompt, n: n, opts: opts, clamped: clamped}, nil
}

// renderOptions are the chat format's options for t, with the release's
// defaults (thinking on, effort max).
func (t *turn) renderOptions() chat.Options {
	o := chat.Options{Tools: t.tools, NoThinking: t.noThinking, ToolChoice: t.toolChoice.mode, ResponseFormat: t.format}
	if !t.noThinking {
		o.ThinkingEffort = t.effort
	}
	return o.WithDefaults()
}

// promptTooLong is the error of a prompt of n tokens that leaves no room
// in the context; Anthropic's clients recognise its wording.
func (s *Server) promptTooLong(n int) *apiError {
	return badRequest("", "context_length_exceeded", "prompt is too long: %d tokens > %d maximum (the context of this server, --max-context)", n, s.opts.MaxContext)
}

// turnResult is what a turn produced.
type turnResult struct {
	promptTokens int
	// cachedTokens are the prompt tokens the prefix cache supplied (see
	// result.cachedTokens); every endpoint reports this one number.
	cachedTokens int
	choices      []*turnChoice
}

// turnChoice is one reply.
type turnChoice struct {
	msg chat.Message // reasoning, content (cut at a stop sequence) and tool calls
	// finish is "stop", "length" or "tool_calls"; stopSequence is the stop
	// sequence that ended the reply, if one did.
	finish           string
	stopSequence     string
	completionTokens int
	reasoningTokens  int // generated in the think channel
}

func (r *turnResult) completionTokens() int {
	n := 0
	for _, c := range r.choices {
		n += c.completionTokens
	}
	return n
}

// runTurn generates p's replies and parses them as they come: onToken (if
// not nil) sees every token of choice i, onDelta what the token adds to
// that reply (reasoning, content, a tool call once its call closes; never
// empty). An error from onDelta ends the generation.
func (s *Server) runTurn(ctx context.Context, p *prepared, onToken func(i int, t k3.Token), onDelta func(i int, d chat.Delta) error) (*turnResult, error) {
	type state struct {
		parser  *chat.Parser
		stop    stopper
		content strings.Builder // what was released of the content
		calls   int
		ended   bool // a stop sequence or the one call allowed ended it
		think   int
	}
	st := make([]*state, p.n)
	for i := range st {
		ps, err := chat.NewParser(s.tok, p.render.Thinking())
		if err != nil {
			return nil, err
		}
		st[i] = &state{parser: ps, stop: stopper{stops: p.t.stop}}
	}
	// deliver passes d on, cut at a stop sequence, and reports errEnough
	// when the reply is complete.
	deliver := func(i int, d chat.Delta) error {
		q := st[i]
		if q.ended {
			return errEnough
		}
		var stopped bool
		if d.Content != "" {
			d.Content, stopped = q.stop.write(d.Content)
			q.content.WriteString(d.Content)
		}
		if stopped {
			d.ToolCall = nil
		}
		if d.ToolCall != nil {
			q.calls++
			stopped = p.t.oneCall
		}
		if !d.Empty() {
			if err := onDelta(i, d); err != nil {
				return err
			}
		}
		if stopped {
			q.ended = true
			return errEnough
		}
		return nil
	}
	res, err := s.generate(ctx, genInput{prompt: p.prompt, n: p.n, opts: p.opts, cacheKey: p.t.cacheKey}, func(i int, t k3.Token) error {
		if onToken != nil {
			onToken(i, t)
		}
		q := st[i]
		thinking := q.parser.Thinking()
		d := q.parser.Write(t.ID)
		if thinking {
			q.think++
		}
		return deliver(i, d)
	})
	if err != nil {
		return nil, err
	}
	out := &turnResult{promptTokens: res.promptTokens, cachedTokens: res.cachedTokens}
	for i, seq := range res.seqs {
		q := st[i]
		if !q.ended {
			if err := deliver(i, q.parser.Finish()); err != nil && err != errEnough {
				return nil, err
			}
		}
		if !q.ended {
			if rest := q.stop.flush(); rest != "" {
				q.content.WriteString(rest)
				if err := onDelta(i, chat.Delta{Content: rest}); err != nil {
					return nil, err
				}
			}
		}
		msg := q.parser.Message()
		msg.Content = q.content.String()
		if len(msg.ToolCalls) > q.calls {
			msg.ToolCalls = msg.ToolCalls[:q.calls]
		}
		c := &turnChoice{msg: msg, finish: seq.finish, stopSequence: q.stop.hit,
			completionTokens: seq.completionTokens, reasoningTokens: q.think}
		if len(msg.ToolCalls) > 0 {
			c.finish = "tool_calls"
		}
		out.choices = append(out.choices, c)
	}
	return out, nil
}

// stopper cuts a stream of content at the first of its stop sequences,
// holding back text that may be the start of one until it is clear.
type stopper struct {
	stops []string
	buf   string // held back
	hit   string // the stop sequence found
}

// write takes the next content and returns what may be released now, and
// whether a stop sequence ended the content (nothing more is released).
func (st *stopper) write(s string) (string, bool) {
	if st.hit != "" {
		return "", true
	}
	if len(st.stops) == 0 {
		return s, false
	}
	st.buf += s
	at := -1
	for _, stop := range st.stops {
		if i := strings.Index(st.buf, stop); i >= 0 && (at < 0 || i < at) {
			at, st.hit = i, stop
		}
	}
	if at >= 0 {
		out := st.buf[:at]
		st.buf = ""
		return out, true
	}
	keep := 0
	for _, stop := range st.stops {
		for k := min(len(stop)-1, len(st.buf)); k > keep; k-- {
			if strings.HasSuffix(st.buf, stop[:k]) {
				keep = k
				break
			}
		}
	}
	out := st.buf[:len(st.buf)-keep]
	st.buf = st.buf[len(st.buf)-keep:]
	return out, false
}

// flush returns the text held back at the end of the content.
func (st *stopper) flush() string {
	out := st.buf
	st.buf = ""
	return out
}

// functionTool is a tool in chat completions' shape, the one the renderer
// declares; the other APIs' tools are translated into it.
type functionTool struct {
	Type     string         `json:"type"`
	Function functionSchema `json:"function"`
}

type functionSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// toolsJSON returns tools as the renderer's JSON, nil for none.
func toolsJSON(tools []functionTool) json.RawMessage {
	if len(tools) == 0 {
		return nil
	}
	b, _ := json.Marshal(tools) // only strings and raw JSON already validated
	return b
}

// effortFor maps an effort name of the OpenAI or Anthropic API onto K3's
// three: minimal and low are low; medium and high are high; xhigh and max
// are max. ok is false for a name neither API has.
func effortFor(name string) (effort string, ok bool) {
	switch name {
	case "minimal", "low":
		return chat.EffortLow, true
	case "medium", "high":
		return chat.EffortHigh, true
	case "xhigh", "max":
		return chat.EffortMax, true
	}
	return "", false
}

// rawString reads a JSON string; ok is false for anything else.
func rawString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// notFound is a 404 naming what was not found.
func notFound(param, code, format string, args ...any) *apiError {
	return newAPIError(http.StatusNotFound, "invalid_request_error", param, code, format, args...)
}

// itemParam names element i of a list field: "input[3]", "messages[0]".
func itemParam(list string, i int) string { return fmt.Sprintf("%s[%d]", list, i) }
