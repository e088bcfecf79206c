package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/k3go/k3/chat"
)

// anthropicMessage is a Messages API reply.
type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []any            `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
	Container    *json.RawMessage `json:"container"`
}

// anthropicUsage counts as Anthropic does: input_tokens are the prompt
// tokens not read from the cache, cache_read_input_tokens those the
// prefix cache supplied.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// Content blocks of a reply.
type (
	thinkingBlock struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	toolUseBlock struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
)

// messagesOut builds a reply from a turn's deltas, and streams it as
// Messages events when stream is set: a thinking block per run of
// reasoning (its signature carries the reasoning, so that a client that
// gives the block back has it rendered again exactly), a text block per
// run of content, a tool_use block per call.
type messagesOut struct {
	msg     anthropicMessage
	omit    bool // thinking.display "omitted": no thinking text, only the signature
	stream  *sse
	cur     string // the open block's type: "thinking", "text" or ""
	curText []byte
}

func (o *messagesOut) emit(typ string, fields map[string]any) error {
	if o.stream == nil {
		return nil
	}
	fields["type"] = typ
	return o.stream.event(typ, fields)
}

func (o *messagesOut) start() error {
	start := o.msg
	start.Content = []any{}
	if err := o.emit("message_start", map[string]any{"message": start}); err != nil {
		return err
	}
	return o.emit("ping", map[string]any{})
}

func (o *messagesOut) delta(d chat.Delta) error {
	if d.Reasoning != "" {
		if err := o.open("thinking"); err != nil {
			return err
		}
		o.curText = append(o.curText, d.Reasoning...)
		if !o.omit {
			if err := o.emit("content_block_delta", map[string]any{"index": len(o.msg.Content),
				"delta": map[string]string{"type": "thinking_delta", "thinking": d.Reasoning}}); err != nil {
				return err
			}
		}
	}
	if d.Content != "" {
		if err := o.open("text"); err != nil {
			return err
		}
		o.curText = append(o.curText, d.Content...)
		if err := o.emit("content_block_delta", map[string]any{"index": len(o.msg.Content),
			"delta": map[string]string{"type": "text_delta", "text": d.Content}}); err != nil {
			return err
		}
	}
	if d.ToolCall != nil {
		if err := o.closeBlock(); err != nil {
			return err
		}
		input := json.RawMessage(d.ToolCall.Function.Arguments)
		if !json.Valid(input) {
			input = json.RawMessage("{}")
		}
		b := toolUseBlock{Type: "tool_use", ID: newID("toolu_"), Name: d.ToolCall.Function.Name, Input: input}
		index := len(o.msg.Content)
		start := b
		start.Input = json.RawMessage("{}")
		if err := o.emit("content_block_start", map[string]any{"index": index, "content_block": start}); err != nil {
			return err
		}
		if err := o.emit("content_block_delta", map[string]any{"index": index,
			"delta": map[string]string{"type": "input_json_delta", "partial_json": string(input)}}); err != nil {
			return err
		}
		o.msg.Content = append(o.msg.Content, b)
		return o.emit("content_block_stop", map[string]any{"index": index})
	}
	return nil
}

func (o *messagesOut) open(typ string) error {
	if o.cur == typ {
		return nil
	}
	if err := o.closeBlock(); err != nil {
		return err
	}
	o.cur, o.curText = typ, o.curText[:0]
	var block any = textBlock{Type: "text"}
	if typ == "thinking" {
		block = thinkingBlock{Type: "thinking"}
	}
	return o.emit("content_block_start", map[string]any{"index": len(o.msg.Content), "content_block": block})
}

func (o *messagesOut) closeBlock() error {
	if o.cur == "" {
		return nil
	}
	index, text := len(o.msg.Content), string(o.curText)
	var block any = textBlock{Type: "text", Text: text}
	if o.cur == "thinking" {
		b := thinkingBlock{Type: "thinking", Thinking: text, Signature: encodeReasoning(text)}
		if o.omit {
			b.Thinking = ""
		}
		block = b
		if err := o.emit("content_block_delta", map[string]any{"index": index,
			"delta": map[string]string{"type": "signature_delta", "signature": b.Signature}}); err != nil {
			return err
		}
	}
	o.cur = ""
	o.msg.Content = append(o.msg.Content, block)
	return o.emit("content_block_stop", map[string]any{"index": index})
}

// finish sets the stop reason and usage and ends the stream.
func (o *messagesOut) finish(res *turnResult, clamped bool) error {
	if err := o.closeBlock(); err != nil {
		return err
	}
	c := res.choices[0]
	reason := "end_turn"
	switch {
	case c.finish == "tool_calls":
		reason = "tool_use"
	case c.finish == "length" && clamped:
		reason = "model_context_window_exceeded"
	case c.finish == "length":
		reason = "max_tokens"
	case c.stopSequence != "":
		reason = "stop_sequence"
		o.msg.StopSequence = &c.stopSequence
	}
	o.msg.StopReason = &reason
	o.msg.Usage = anthropicUsage{InputTokens: res.promptTokens - res.cachedTokens, OutputTokens: c.completionTokens,
		CacheReadInputTokens: res.cachedTokens}
	if err := o.emit("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": o.msg.StopSequence},
		"usage": o.msg.Usage}); err != nil {
		return err
	}
	return o.emit("message_stop", map[string]any{})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req messagesRequest
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		t, display, e := s.messagesTurn(&req, false)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		t.msgs, req.Messages, req.Tools = nil, nil, nil // the body's memory goes before the request waits
		return func(ctx context.Context) { s.reply(ctx, w, req.Stream, display == "omitted", p) }
	})
}

func (s *Server) reply(ctx context.Context, w http.ResponseWriter, stream, omit bool, p *prepared) {
	o := &messagesOut{omit: omit, msg: anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant",
		Model: s.opts.Name, Content: []any{}, Usage: anthropicUsage{InputTokens: len(p.prompt)}}}
	if stream {
		o.stream = startSSE(w)
		if o.start() != nil {
			return
		}
	}
	res, err := s.runTurn(ctx, p, nil, func(_ int, d chat.Delta) error { return o.delta(d) })
	if err == nil {
		err = o.finish(res, p.clamped)
	}
	if err != nil {
		switch {
		case o.stream == nil:
			writeAPIError(w, s.serverError(err))
		case context.Cause(ctx) != context.Canceled:
			o.stream.event("error", anthropicError(s.serverError(err)))
		}
		return
	}
	if o.stream == nil {
		writeJSON(w, http.StatusOK, o.msg)
	}
}

// countTokens answers POST /v1/messages/count_tokens: the prompt tokens
// the request would render to, tools and system included.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	s.withDecode(w, r, func() {
		var req messagesRequest
		if e := s.decodeAgent(w, r, &req); e != nil {
			writeAPIError(w, e)
			return
		}
		if req.Model != "" && req.Model != s.opts.Name {
			writeAPIError(w, notFound("model", "model_not_found", "model: the model %q does not exist (this server has %q)", req.Model, s.opts.Name))
			return
		}
		t, _, e := s.messagesTurn(&req, true)
		if e != nil {
			writeAPIError(w, e)
			return
		}
		prompt, e := s.chatPrompt(t.msgs, t.renderOptions())
		if e != nil {
			writeAPIError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(prompt)})
	})
}
