package server

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// prepared is a turn ready to generate.
type prepared struct {
	t      *wire.Turn
	render chat.Options
	prompt []int
	// counted is the prompt's length as the release's template counts
	// it, what usage reports (see chatPrompt).
	counted int
	n       int
	opts    k3.GenerateOptions
	// grammar, if not nil, is what every reply must match (see
	// chat.AnswerGrammar); each choice gets its own constraint of it.
	grammar *grammar.Grammar
	// clamped reports that the context, not the request, bounds the reply
	// (ClampMax lowered MaxTokens).
	clamped bool
	// onStart, if set, is called when the generation has its places and
	// starts (Ollama's timings count the wait before it as loading).
	onStart func()
}

// errEnough, returned by a generation's emit, ends that sequence as a
// normal stop: its reply is complete (a stop sequence came, or the one
// tool call parallel_tool_calls false allows).
var errEnough = errors.New("the reply is complete")

// prepare validates t, renders its prompt in Kimi K3's chat format and
// turns its fields into generation options.
func (s *Server) prepare(t *wire.Turn) (*prepared, *wire.APIError) {
	if f := t.Format; f != nil {
		switch f.Type {
		case "", "text", "json_object", "json_schema":
		default:
			return nil, wire.BadRequest(t.FormatParam, "", "%s type %q is not supported (text, json_object, json_schema)", t.FormatParam, f.Type)
		}
	}
	o := t.RenderOptions()
	prompt, counted, e := s.chatPrompt(t.Msgs, o)
	if e != nil {
		return nil, e
	}
	// Structured output, forced and forbidden tool calls, strict tools:
	// the reply's grammar, enforced on every token (nil when the request
	// constrains nothing, and then the reply is sampled exactly as
	// without this).
	co := chat.ConstrainOptions{}
	if t.OneCall {
		co.MaxToolCalls = 1
	}
	g, err := chat.AnswerGrammar(t.Msgs, o, co)
	if err != nil {
		return nil, t.ConstraintError(err)
	}
	room := s.opts.MaxContext - len(prompt)
	if room <= 0 {
		return nil, s.promptTooLong(len(prompt))
	}
	maxTokens, def, clamped := t.MaxTokens, math.MaxInt, false
	if t.ClampMax && maxTokens != nil {
		if *maxTokens < 1 {
			return nil, wire.BadRequest(t.MaxParam, "", "%s must be at least 1", t.MaxParam)
		}
		def, clamped, maxTokens = *maxTokens, *maxTokens > room, nil
	}
	opts, n, e := s.options(&t.Params, len(prompt), maxTokens, def)
	if e != nil {
		return nil, e
	}
	if !t.Params.IgnoreEOS {
		opts.StopTokens = slices.Clone(s.chatStop)
	}
	// Stop sequences end the content, not the markup around it: runTurn
	// matches them on the parsed reply.
	t.Stop = append(t.Stop, opts.StopStrings...)
	opts.StopStrings = nil
	return &prepared{t: t, render: o, prompt: prompt, counted: counted, n: n, opts: opts, grammar: g, clamped: clamped}, nil
}

// promptTooLong is the error of a prompt of n tokens that leaves no room
// in the context; Anthropic's clients recognise its wording.
func (s *Server) promptTooLong(n int) *wire.APIError {
	return wire.BadRequest("", "context_length_exceeded", "prompt is too long: %d tokens > %d maximum (the context of this server, --max-context)", n, s.opts.MaxContext)
}

// runTurn generates p's replies and parses them as they come: onToken (if
// not nil) sees every token of choice i, onDelta what the token adds to
// that reply (reasoning, content, a tool call once its call closes; never
// empty). An error from onDelta ends the generation.
func (s *Server) runTurn(ctx context.Context, p *prepared, onToken func(i int, t k3.Token), onDelta func(i int, d chat.Delta) error) (*wire.TurnResult, error) {
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
		st[i] = &state{parser: ps, stop: stopper{stops: p.t.Stop}}
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
			stopped = p.t.OneCall
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
	res, err := s.generate(ctx, genInput{prompt: p.prompt, n: p.n, opts: p.opts, grammar: p.grammar, cacheKey: p.t.CacheKey, onStart: p.onStart}, func(i int, t k3.Token) error {
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
	// Usage counts the prompt as the release's template does (the
	// channel's opening is the answer's); the prefix cache may have
	// restored those tokens too, but never reports more than the prompt.
	out := &wire.TurnResult{PromptTokens: p.counted, CachedTokens: min(res.cachedTokens, p.counted)}
	if info, ok := ctx.Value(genInfoKey{}).(*genInfo); ok {
		// The access log says what the client's usage says.
		info.promptTokens, info.cachedTokens = out.PromptTokens, out.CachedTokens
	}
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
		c := &wire.TurnChoice{Msg: msg, Finish: seq.finish, StopSequence: q.stop.hit,
			CompletionTokens: seq.completionTokens, ReasoningTokens: q.think}
		if seq.finish == "length" && !q.ended {
			if cut, ok := q.parser.Cut(); ok {
				c.Cut = &cut
			}
		}
		if len(msg.ToolCalls) > 0 && c.Cut == nil {
			c.Finish = "tool_calls"
		}
		out.Choices = append(out.Choices, c)
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
