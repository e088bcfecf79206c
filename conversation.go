package k3

import (
	"context"
	"fmt"
	"io"
	"iter"
	"slices"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/tokenizer"
)

// ChatOptions configure a [Conversation].
type ChatOptions struct {
	// Options are the rendering options of Kimi K3's chat format: tools,
	// thinking, effort, tool choice, response format. Thinking is on by
	// default; its effort defaults to [chat.DefaultEffort], as the
	// release's apply_chat_template does.
	chat.Options
	// System, if not empty, is the system message.
	System string
	// StopTokens are ids a reply stops at, besides [Model.StopTokens]
	// (generation_config.json's eos_token_id, <|end_of_msg|> and [EOS]).
	StopTokens []int
}

// Conversation is a chat with the model in Kimi K3's own format (XTML, see
// package [github.com/k3go/k3/chat]): messages framed by <|open|>,
// <|close|>, <|sep|> and <|end_of_msg|>, replies with reasoning in a think
// channel, content in a response channel, and tool calls. It keeps its
// session between turns, so a turn feeds only its own tokens, never an
// earlier turn's again; SaveFile and LoadFile persist it. Message contents
// are encoded as plain text: a user who types "<|end_of_msg|>" gets those
// characters, not the control token. A Conversation is not safe for
// concurrent use.
type Conversation struct {
	m     *Model
	s     *Session
	tok   *tokenizer.Tokenizer
	opts  chat.Options
	stops []int

	lastCalls []chat.ToolCall // of the last reply, for the results that answer them
	reply     chat.Message
}

// ChatDelta is one generated token of a reply and what it adds to it.
type ChatDelta struct {
	Token
	// Delta is the reasoning or content text the token adds, or the tool
	// call it completes. The control tokens and tags of the format add
	// nothing.
	chat.Delta
}

// NewConversation starts a chat; system, if not empty, is the system
// message. The model needs a tokenizer with K3's control tokens.
func (m *Model) NewConversation(system string) (*Conversation, error) {
	return m.NewChat(ChatOptions{System: system})
}

// NewChat starts a chat with options: a system message, tools, thinking
// and effort, tool choice, response format, stop tokens.
func (m *Model) NewChat(opts ChatOptions) (*Conversation, error) {
	if m.tok == nil {
		return nil, fmt.Errorf("k3: NewChat: %w", ErrNoTokenizer)
	}
	for _, s := range []string{chat.TokOpen, chat.TokClose, chat.TokSep, chat.TokEndOfMsg} {
		if _, ok := m.tok.ID(s); !ok {
			return nil, fmt.Errorf("k3: NewChat: %w: the tokenizer has no %s token (K3's chat format needs it)", ErrNoTokenizer, s)
		}
	}
	o := opts.Options.WithDefaults()
	if _, err := chat.Render(nil, o); err != nil {
		return nil, fmt.Errorf("k3: NewChat: %w: %v", ErrBadOptions, err)
	}
	c := &Conversation{m: m, s: m.NewSession(), tok: m.tok, opts: o}
	c.stops = append(slices.Clone(opts.StopTokens), m.StopTokens()...)
	// The start: tool declarations, effort and system message, pending
	// until the first turn. The tool choice and response format come
	// after each user message, with the turns.
	var sys []chat.Message
	if opts.System != "" {
		sys = []chat.Message{{Role: chat.RoleSystem, Content: opts.System}}
	}
	start := o
	start.ToolChoice, start.ResponseFormat, start.NoGenerationPrompt = "", nil, true
	segs, err := chat.Render(sys, start)
	if err == nil {
		var pending []int
		pending, err = chat.AppendEncode(c.s.s.Pending(), c.tok, segs)
		c.s.s.SetPending(pending)
	}
	if err != nil {
		return nil, fmt.Errorf("k3: NewChat: %w", err)
	}
	return c, nil
}

// Send adds a user message and streams the reply's content: each Token's
// Text is the answer text it adds (reasoning and the format's markup
// left out; see [Conversation.Reply] for the whole reply). The reply ends
// at a stop token (yielded, with no text), at opts.MaxTokens, or at a stop
// string; a reply cut short is closed as the format closes a message
// before the next turn.
func (c *Conversation) Send(ctx context.Context, user string, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		for d, err := range c.Stream(ctx, []chat.Message{{Role: chat.RoleUser, Content: user}}, opts) {
			t := d.Token
			t.Text = d.Content
			if !yield(t, err) {
				return
			}
		}
	}
}

// Stream adds messages (a user message, tool results, a system message
// declaring new tools) and streams the assistant's reply token by token,
// with the reasoning, content or tool call each token adds. Tool results
// are matched to the last reply's calls by ToolCallID, else in order, and
// fed in call order. The reply, parsed, is [Conversation.Reply]
// afterwards. Messages may also be empty: the model then continues with a
// new reply.
func (c *Conversation) Stream(ctx context.Context, msgs []chat.Message, opts GenerateOptions) iter.Seq2[ChatDelta, error] {
	return func(yield func(ChatDelta, error) bool) {
		ids, err := c.turn(msgs)
		if err != nil {
			yield(ChatDelta{}, err)
			return
		}
		p, err := chat.NewParser(c.tok, c.opts.Thinking())
		if err != nil {
			yield(ChatDelta{}, fmt.Errorf("k3: %w", err))
			return
		}
		o := opts
		o.StopTokens = append(slices.Clone(opts.StopTokens), c.stops...)
		if o.Constraint == nil {
			if o.Constraint, err = c.constraint(msgs); err != nil {
				yield(ChatDelta{}, err)
				return
			}
		}
		defer c.finish(p)
		for t, err := range c.s.Generate(ctx, ids, o) {
			if err != nil {
				yield(ChatDelta{Token: t}, err)
				return
			}
			if !yield(ChatDelta{Token: t, Delta: p.Write(t.ID)}, nil) {
				return
			}
		}
		if d := p.Finish(); !d.Empty() {
			yield(ChatDelta{Token: Token{ID: -1, Index: -1}, Delta: d}, nil)
		}
	}
}

// constraint returns what the chat options require of the reply to msgs
// (a response format, a forced or forbidden tool call, strict tools) as a
// constraint on its tokens, nil when they require nothing.
func (c *Conversation) constraint(msgs []chat.Message) (grammar.Constraint, error) {
	g, err := chat.AnswerGrammar(msgs, c.opts, chat.ConstrainOptions{})
	if err != nil {
		return nil, fmt.Errorf("k3: %w: %w", ErrBadOptions, err)
	}
	if g == nil {
		return nil, nil
	}
	v, err := c.m.GrammarVocab()
	if err != nil {
		return nil, err
	}
	con, err := g.Constraint(v)
	if err != nil {
		return nil, fmt.Errorf("k3: %w: %w", ErrBadOptions, err)
	}
	return con, nil
}

// turn returns the ids of msgs and the generation prompt.
func (c *Conversation) turn(msgs []chat.Message) ([]int, error) {
	// The history stands for what was fed: a user message (so that the
	// messages that follow the last user message are not repeated) and
	// the last reply, whose calls the tool results answer.
	hist := []chat.Message{{Role: chat.RoleUser}, {Role: chat.RoleAssistant, ToolCalls: c.lastCalls}}
	segs, err := chat.RenderFrom(append(hist, msgs...), len(hist), c.opts)
	if err != nil {
		return nil, fmt.Errorf("k3: %w: %v", ErrBadOptions, err)
	}
	ids, err := chat.Encode(c.tok, segs)
	if err != nil {
		return nil, fmt.Errorf("k3: %w: %v", ErrNoTokenizer, err)
	}
	return ids, nil
}

// finish records the reply and closes it in the session: a reply that
// ended at [EOS], at MaxTokens or at a stop string gets the tokens that
// end a message, fed with the next turn.
func (c *Conversation) finish(p *chat.Parser) {
	c.reply = p.Message()
	c.lastCalls = c.reply.ToolCalls
	closing := p.Closing()
	if len(closing) == 0 {
		return
	}
	pending := c.s.s.Pending()
	if eos, ok := c.tok.ID(chat.TokEOS); ok {
		if n := len(pending); n > 0 && pending[n-1] == eos {
			pending = pending[:n-1]
		}
	}
	pending, _ = chat.AppendEncode(pending, c.tok, closing)
	c.s.s.SetPending(pending)
}

// Reply returns the last reply: its reasoning, content and tool calls.
func (c *Conversation) Reply() chat.Message {
	r := c.reply
	r.ToolCalls = slices.Clone(r.ToolCalls)
	return r
}

// Close releases the conversation's state and its place in the RAM budget;
// the conversation is then unusable (ErrClosed), see Session.Close.
func (c *Conversation) Close() { c.s.Close() }

// Session returns the conversation's session (its tokens and state).
func (c *Conversation) Session() *Session { return c.s }

// Save writes the conversation's state; see Session.Save.
func (c *Conversation) Save(w io.Writer) error { return c.s.Save(w) }

// SaveFile writes the conversation's state to path; see Session.SaveFile.
func (c *Conversation) SaveFile(path string) error { return c.s.SaveFile(path) }

// Load restores a conversation written by Save; see LoadFile and
// Session.Load.
func (c *Conversation) Load(r io.Reader) error {
	if err := c.s.Load(r); err != nil {
		return err
	}
	c.restored()
	return nil
}

// LoadFile restores a conversation saved with SaveFile: the next turn
// continues it without re-reading earlier ones. The last reply (and the
// calls the next tool results answer) is read back from the tokens.
func (c *Conversation) LoadFile(path string) error {
	if err := c.s.LoadFile(path); err != nil {
		return err
	}
	c.restored()
	return nil
}

// restored sets the conversation's own state from the session's tokens.
func (c *Conversation) restored() {
	ids := c.s.Tokens()
	c.reply, c.lastCalls = chat.Message{}, nil
	header, err := chat.Encode(c.tok, []chat.Segment{{Text: chat.TokOpen, Special: true}, {Text: "message"}, {Text: " role"},
		{Text: `="`}, {Text: chat.RoleAssistant}, {Text: `"`}, {Text: chat.TokSep, Special: true}})
	if err != nil {
		return
	}
	for i := len(ids) - len(header); i >= 0; i-- {
		if slices.Equal(ids[i:i+len(header)], header) {
			// The reply starts with its first channel's opening.
			c.reply, _ = chat.Parse(c.tok, ids[i+len(header):], false)
			c.lastCalls = c.reply.ToolCalls
			return
		}
	}
}
