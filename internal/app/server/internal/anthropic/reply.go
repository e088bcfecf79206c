package anthropic

import (
	"encoding/json"
	"net/http"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
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

// Reply builds a reply from a turn's deltas, and streams it as
// Messages events when stream is set: a thinking block per run of
// reasoning (its signature carries the reasoning, so that a client that
// gives the block back has it rendered again exactly), a text block per
// run of content, a tool_use block per call.
type Reply struct {
	msg     anthropicMessage
	omit    bool // thinking.display "omitted": no thinking text, only the signature
	stream  *wire.SSE
	cur     string // the open block's type: "thinking", "text" or ""
	curText []byte
}

// NewReply starts the reply of model to a prompt of promptTokens tokens,
// streamed to stream unless it is nil; omit leaves the thinking text out
// (thinking.display "omitted"). A streamed reply begins with Start.
func NewReply(model string, promptTokens int, omit bool, stream *wire.SSE) *Reply {
	return &Reply{omit: omit, stream: stream, msg: anthropicMessage{ID: wire.NewID("msg_"), Type: "message", Role: "assistant",
		Model: model, Content: []any{}, Usage: anthropicUsage{InputTokens: promptTokens}}}
}

// Message is the reply as a whole, the body of a reply not streamed.
func (o *Reply) Message() any { return o.msg }

// Fail ends a stream whose generation failed with an error event.
func (o *Reply) Fail(e *wire.APIError) {
	o.stream.Event("error", ErrorBody(e))
}

// ErrorBody is e in Anthropic's error shape, the type chosen by the
// status as Anthropic's API chooses it. Anthropic's shape has no param:
// the messages name their field themselves.
func ErrorBody(e *wire.APIError) map[string]any {
	typ := "api_error"
	switch e.Status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestTimeout, http.StatusUnprocessableEntity:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		typ = "overloaded_error"
	case http.StatusGatewayTimeout:
		typ = "timeout_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.Message}}
}

func (o *Reply) emit(typ string, fields map[string]any) error {
	if o.stream == nil {
		return nil
	}
	fields["type"] = typ
	return o.stream.Event(typ, fields)
}

// Start sends the stream's first events: message_start and a ping.
func (o *Reply) Start() error {
	start := o.msg
	start.Content = []any{}
	if err := o.emit("message_start", map[string]any{"message": start}); err != nil {
		return err
	}
	return o.emit("ping", map[string]any{})
}

// Delta adds what one token added to the reply.
func (o *Reply) Delta(d chat.Delta) error {
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
		return o.toolUse(d.ToolCall.Function.Name, d.ToolCall.Function.Arguments)
	}
	return nil
}

// toolUse adds a tool_use block of the call with arguments args (a JSON
// object).
func (o *Reply) toolUse(name, args string) error {
	if err := o.closeBlock(); err != nil {
		return err
	}
	input := json.RawMessage(args)
	if !json.Valid(input) {
		input = json.RawMessage("{}")
	}
	b := toolUseBlock{Type: "tool_use", ID: wire.NewID("toolu_"), Name: name, Input: input}
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

func (o *Reply) open(typ string) error {
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

func (o *Reply) closeBlock() error {
	if o.cur == "" {
		return nil
	}
	index, text := len(o.msg.Content), string(o.curText)
	var block any = textBlock{Type: "text", Text: text}
	if o.cur == "thinking" {
		b := thinkingBlock{Type: "thinking", Thinking: text, Signature: wire.EncodeReasoning(text)}
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

// Finish sets the stop reason and usage and ends the stream.
func (o *Reply) Finish(res *wire.TurnResult, clamped bool) error {
	if err := o.closeBlock(); err != nil {
		return err
	}
	c := res.Choices[0]
	if c.Cut != nil {
		// A call max_tokens cut: its input must be an object, so it holds
		// what of the arguments is whole (a string cut short included);
		// stop_reason max_tokens says it is not complete.
		if err := o.toolUse(c.Cut.Function.Name, c.Cut.Closed); err != nil {
			return err
		}
	}
	reason := "end_turn"
	switch {
	case c.Finish == "tool_calls":
		reason = "tool_use"
	case c.Finish == "length" && clamped:
		reason = "model_context_window_exceeded"
	case c.Finish == "length":
		reason = "max_tokens"
	case c.StopSequence != "":
		reason = "stop_sequence"
		o.msg.StopSequence = &c.StopSequence
	}
	o.msg.StopReason = &reason
	o.msg.Usage = anthropicUsage{InputTokens: res.PromptTokens - res.CachedTokens, OutputTokens: c.CompletionTokens,
		CacheReadInputTokens: res.CachedTokens}
	if err := o.emit("message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": o.msg.StopSequence},
		"usage": o.msg.Usage}); err != nil {
		return err
	}
	return o.emit("message_stop", map[string]any{})
}
