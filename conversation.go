package k3

import (
	"context"
	"fmt"
	"io"
	"iter"

	"github.com/k3go/k3/tokenizer"
)

// The Kimi chat layout is made of these added tokens: each message is
// <|im_ROLE|>ROLE<|im_middle|>CONTENT<|im_end|>, and the assistant's turn
// starts with <|im_assistant|>assistant<|im_middle|>.
const (
	tokSystem    = "<|im_system|>"
	tokUser      = "<|im_user|>"
	tokAssistant = "<|im_assistant|>"
	tokMiddle    = "<|im_middle|>"
	tokEnd       = "<|im_end|>"
)

// Conversation is a chat with the model in the Kimi chat layout. It keeps
// its session between turns, so turn two feeds only its own tokens, never
// turn one's again; SaveFile and LoadFile persist it. Message contents are
// encoded as plain text: a user who types "<|im_end|>" gets those
// characters, not the control token. A Conversation is not safe for
// concurrent use.
type Conversation struct {
	m   *Model
	s   *Session
	tok *tokenizer.Tokenizer
	ids chatIDs
}

type chatIDs struct{ system, user, assistant, middle, end int }

// NewConversation starts a chat; system, if not empty, is the system
// message. The model needs a tokenizer with the chat tokens.
func (m *Model) NewConversation(system string) (*Conversation, error) {
	if m.tok == nil {
		return nil, fmt.Errorf("k3: NewConversation: %w", ErrNoTokenizer)
	}
	c := &Conversation{m: m, s: m.NewSession(), tok: m.tok}
	for _, x := range []struct {
		name string
		dst  *int
	}{{tokSystem, &c.ids.system}, {tokUser, &c.ids.user}, {tokAssistant, &c.ids.assistant}, {tokMiddle, &c.ids.middle}, {tokEnd, &c.ids.end}} {
		id, ok := m.tok.ID(x.name)
		if !ok {
			return nil, fmt.Errorf("k3: NewConversation: %w: the tokenizer has no %s token", ErrNoTokenizer, x.name)
		}
		*x.dst = id
	}
	if system != "" {
		c.s.pending = append(c.s.pending, c.message(c.ids.system, "system", system)...)
	}
	return c, nil
}

// message lays out one message: <|im_ROLE|>ROLE<|im_middle|>CONTENT<|im_end|>.
func (c *Conversation) message(roleTok int, role, content string) []int {
	ids := []int{roleTok}
	ids = c.tok.AppendEncode(ids, role, tokenizer.EncodeOptions{NoAddedTokens: true})
	ids = append(ids, c.ids.middle)
	ids = c.tok.AppendEncode(ids, content, tokenizer.EncodeOptions{NoAddedTokens: true})
	return append(ids, c.ids.end)
}

// Send adds a user message and streams the assistant's reply. The reply
// ends at <|im_end|> (not yielded as text), at opts.MaxTokens, or at a stop
// string. A reply cut short by MaxTokens or a stop string is closed with
// <|im_end|> before the next turn.
func (c *Conversation) Send(ctx context.Context, user string, opts GenerateOptions) iter.Seq2[Token, error] {
	return func(yield func(Token, error) bool) {
		// Close an unfinished previous reply.
		if n := len(c.s.pending); n > 0 && c.s.pending[n-1] != c.ids.end && c.lastFedOrPending() != c.ids.end {
			c.s.pending = append(c.s.pending, c.ids.end)
		}
		turn := c.message(c.ids.user, "user", user)
		turn = append(turn, c.ids.assistant)
		turn = c.tok.AppendEncode(turn, "assistant", tokenizer.EncodeOptions{NoAddedTokens: true})
		turn = append(turn, c.ids.middle)
		o := opts
		o.StopTokens = append(append([]int(nil), opts.StopTokens...), c.ids.end)
		for t, err := range c.s.Generate(ctx, turn, o) {
			if !yield(t, err) || err != nil {
				return
			}
		}
		if c.lastFedOrPending() != c.ids.end {
			c.s.pending = append(c.s.pending, c.ids.end)
		}
	}
}

func (c *Conversation) lastFedOrPending() int {
	if n := len(c.s.pending); n > 0 {
		return c.s.pending[n-1]
	}
	if n := len(c.s.tokens); n > 0 {
		return c.s.tokens[n-1]
	}
	return -1
}

// Close releases the conversation's state and its place in the RAM budget;
// see Session.Close.
func (c *Conversation) Close() { c.s.Close() }

// Session returns the conversation's session (its tokens and state).
func (c *Conversation) Session() *Session { return c.s }

// Save writes the conversation's state; see Session.Save.
func (c *Conversation) Save(w io.Writer) error { return c.s.Save(w) }

// SaveFile writes the conversation's state to path; see Session.SaveFile.
func (c *Conversation) SaveFile(path string) error { return c.s.SaveFile(path) }

// LoadFile restores a conversation saved with SaveFile: the next Send
// continues it without re-reading earlier turns.
func (c *Conversation) LoadFile(path string) error { return c.s.LoadFile(path) }
