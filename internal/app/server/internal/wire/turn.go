package wire

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
)

// Params are the request fields both OpenAI generation endpoints share
// (chat completions and completions embed them); the agent APIs fill the
// few they have. Every field a request may carry is here: the decoder
// refuses the others.
type Params struct {
	Model            string          `json:"model"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stream           bool            `json:"stream"`
	StreamOptions    *StreamOptions  `json:"stream_options"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	PresencePenalty  float64         `json:"presence_penalty"`
	FrequencyPenalty float64         `json:"frequency_penalty"`
	LogitBias        map[string]any  `json:"logit_bias"`
	// User is an end-user id for abuse monitoring; it has no effect here.
	User string `json:"user"`
	// Extensions that vLLM and llama.cpp accept too.
	TopK              int     `json:"top_k"`
	MinP              float64 `json:"min_p"`
	RepetitionPenalty float64 `json:"repetition_penalty"`
	// IgnoreEOS generates past the stop tokens, to max_tokens (for
	// benchmarks).
	IgnoreEOS bool `json:"ignore_eos"`
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Turn is the server's internal chat request. /v1/chat/completions,
// /v1/responses and /v1/messages each translate their body into one
// (the server's chat.go, the responses and anthropic packages), and from
// there every request takes one path: the server's prepare renders and
// validates it, its runTurn generates and parses the reply under the
// same admission, limits and cancellation. The endpoints differ only in
// their mappings in and out.
type Turn struct {
	Msgs []chat.Message
	// Tools are the tools declared, in chat completions' shape: a list of
	// {"type": "function", "function": {"name", "description",
	// "parameters"}}.
	Tools      json.RawMessage
	NoThinking bool
	Effort     string // low, high, max, or "" for the release's default
	ToolChoice ToolChoice
	// Format is the structured output asked for: chat completions'
	// response_format, Responses' text.format, Anthropic's
	// output_config.format. FormatParam is its name in the request's
	// API, for errors.
	Format      *chat.ResponseFormat
	FormatParam string
	// OneCall ends the reply at its first tool call (chat completions'
	// and Responses' parallel_tool_calls false, Anthropic's
	// disable_parallel_tool_use).
	OneCall bool
	// Params are the sampling fields, the model and n.
	Params Params
	// MaxTokens bounds the reply (nil: the rest of the context);
	// MaxParam is its name in the request's API. With ClampMax (the
	// agent APIs, whose clients ask for more than any context holds) a
	// bound beyond the context is lowered to what the context holds;
	// otherwise it is refused.
	MaxTokens *int
	MaxParam  string
	ClampMax  bool
	// Stop ends a reply's content at the first of these strings, which
	// are left out.
	Stop []string
	// CacheKey groups requests that share a prompt prefix: the
	// prompt_cache_key of a Responses or chat completions body, or the
	// conversation a previous_response_id continues. The prefix cache
	// needs no key (it matches prompts by their tokens); the key is
	// logged, for a router in front of several servers to send a
	// conversation to one (docs/SCALING.md).
	CacheKey string
}

// ToolChoice is the tool choice of a turn: Mode "" or "auto" (the model
// decides), "none", or "required", with Name set when one function is
// required (chat completions' {"type": "function"}, Anthropic's
// {"type": "tool"}).
type ToolChoice struct {
	Mode, Name string
}

// RenderOptions are the chat format's options for t, with the release's
// defaults (thinking on, effort max).
func (t *Turn) RenderOptions() chat.Options {
	o := chat.Options{Tools: t.Tools, NoThinking: t.NoThinking, ToolChoice: t.ToolChoice.Mode, ToolChoiceFunction: t.ToolChoice.Name,
		ResponseFormat: t.Format}
	if !t.NoThinking {
		o.ThinkingEffort = t.Effort
	}
	return o.WithDefaults()
}

// ConstraintError is the 400 of a request whose reply cannot be
// constrained as it asks: a schema keyword the grammar cannot enforce or
// an invalid schema (named by its JSON pointer), a tool choice naming an
// undeclared tool, a forced call with no tools. It names the request's
// own field (Responses' text.format, Anthropic's output_config.format).
func (t *Turn) ConstraintError(err error) *APIError {
	msg := strings.TrimPrefix(err.Error(), chat.ErrConstraint.Error()+": ")
	param := ""
	switch {
	case strings.HasPrefix(msg, "response_format"):
		// The chat package names chat completions' fields; the schema of
		// Responses' and Anthropic's formats sits in the format itself.
		param = t.FormatParam
		if t.FormatParam != "response_format" {
			msg = strings.TrimPrefix(msg, "response_format.json_schema")
		}
		msg = t.FormatParam + strings.TrimPrefix(msg, "response_format")
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
	return BadRequest(param, code, "the reply cannot be constrained: %s", msg)
}

// TurnResult is what a turn produced.
type TurnResult struct {
	PromptTokens int
	// CachedTokens are the prompt tokens the prefix cache supplied;
	// every endpoint reports this one number.
	CachedTokens int
	Choices      []*TurnChoice
}

// TurnChoice is one reply.
type TurnChoice struct {
	Msg chat.Message // reasoning, content (cut at a stop sequence) and tool calls
	// Finish is "stop", "length" or "tool_calls"; StopSequence is the
	// stop sequence that ended the reply, if one did.
	Finish       string
	StopSequence string
	// Cut is the tool call the reply was in when the token limit (or the
	// context) cut it: Finish is "length", and each API returns the call
	// so far in its own shape, as OpenAI does, rather than drop it.
	Cut              *chat.CutCall
	CompletionTokens int
	ReasoningTokens  int // generated in the think channel
}

// CompletionTokens is the tokens generated over every choice.
func (r *TurnResult) CompletionTokens() int {
	n := 0
	for _, c := range r.Choices {
		n += c.CompletionTokens
	}
	return n
}
