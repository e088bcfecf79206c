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
	"github.com/k3go/k3/grammar"
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
	// cacheKey groups requests that share a prompt prefix: the
	// prompt_cache_key of a Responses or chat completions body, or the
	// conversation a previous_response_id continues. The prefix cache needs no key (it matches prompts by
	// their tokens); the key is logged, for a router in front of several
	// servers to send a conversation to one (docs/SCALING.md).
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
	// grammar, if not nil, is what every reply must match (see
	// chat.AnswerGrammar); each choice gets its own constraint of it.
	grammar *grammar.Grammar
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
	if f := t.format; f != nil {
		switch f.Type {
		case "", "text", "json_object", "json_schema":
		default:
			return nil, badRequest(t.formatParam, "", "%s type %q is not supported (text, json_object, json_schema)", t.formatParam, f.Type)
		}
	}
	o := t.renderOptions()
	prompt, e := s.chatPrompt(t.msgs, o)
	if e != nil {
		return nil, e
	}
	// Structured output, forced and forbidden tool calls, strict tools:
	// the reply's grammar, enforced on every token (nil when the request
	// constrains nothing, and then the reply is sampled exactly as
	// without this).
	co := chat.ConstrainOptions{}
	if t.oneCall {
		co.MaxToolCalls = 1
	}
	g, err := chat.AnswerGrammar(t.msgs, o, co)
	if err != nil {
		return nil, t.constraintError(err)
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
	return &prepared{t: t, render: o, prompt: prompt, n: n, opts: opts, grammar: g, clamped: clamped}, nil
}

// constraintError is the 400 of a request whose reply cannot be
// constrained as it asks: a schema keyword the grammar cannot enforce or
// an invalid schema (named by its JSON pointer), a tool choice naming an
// undeclared tool, a forced call with no tools. It names the request's
// own field (Responses' text.format, Anthropic's output_config.format).
func (t *turn) constraintError(err error) *apiError {
	msg := strings.TrimPrefix(err.Error(), chat.ErrConstraint.Error()+": ")
	param := ""
	switch {
	case strings.HasPrefix(msg, "response_format"):
		// The chat package names chat completions' fields; the schema of
		// Responses' and Anthropic's formats sits in the format itself.
		param = t.formatParam
		if t.formatParam != "response_format" {
			msg = strings.TrimPrefix(msg, "response_format.json_schema")
		}
		msg = t.formatParam + strings.TrimPrefix(msg, "response_format")
	case strings.HasPrefix(msg, "tool_choice"):
		param = "tool_choice"
	case strings.HasPrefix(msg, "tool "), strings.HasPrefix(msg, "tools"):
		param = "tools"
	}
	var se *grammar.SchemaError
	code := ""
	if errors.As(err, &se) {
		code = "invalid_json_schema"
		if errors.Is(se.Err, grammar.ErrUnsupported) {
			code = "unsupported_json_schema"
			msg += ` (with "strict": false the schema's other keywords are enforced, this one is not)`
		}
	}
	return badRequest(param, code, "the reply cannot be constrained: %s", msg)
}

// renderOptions are the chat format's options for t, with the release's
// defaults (thinking on, effort max).
func (t *turn) renderOptions() chat.Options {
	o := chat.Options{Tools: t.tools, NoThinking: t.noThinking, ToolChoice: t.toolChoice.mode, ToolChoiceFunction: t.toolChoice.name,
		ResponseFormat: t.format}
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
	res, err := s.generate(ctx, genInput{prompt: p.prompt, n: p.n, opts: p.opts, grammar: p.grammar, cacheKey: p.t.cacheKey}, func(i int, t k3.Token) error {
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
