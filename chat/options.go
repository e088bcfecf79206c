package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Thinking efforts the release accepts.
const (
	EffortLow  = "low"
	EffortHigh = "high"
	EffortMax  = "max"
	// DefaultEffort is the effort the release's apply_chat_template adds
	// when thinking is on and none is given ([Options.WithDefaults]).
	DefaultEffort = EffortMax
)

// Tool choices that add a system message; "auto" (or "") adds none.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceRequired = "required"
	ToolChoiceNone     = "none"
)

// Options are the rendering options: the goldens' kwargs. The zero value
// thinks, adds the generation prompt, and adds no effort message (the
// release's encoder); [Options.WithDefaults] gives what the release's
// public apply_chat_template renders.
type Options struct {
	// Tools declares tools before the conversation: any JSON (normally a
	// list of OpenAI tool objects), written compact with sorted keys.
	// null, [] and {} declare none.
	Tools json.RawMessage
	// NoThinking turns reasoning off: the prompt opens the response
	// channel, no effort message is added, and earlier reasoning is
	// dropped from the history.
	NoThinking bool
	// ThinkingEffort, if set, adds the thinking-effort message: low, high
	// or max.
	ThinkingEffort string
	// ToolChoice "required" or "none" adds a tool-choice message after the
	// last user message. (A named function, in OpenAI's object form,
	// reads as "required".)
	ToolChoice string
	// ToolChoiceFunction is the function a tool_choice object names (see
	// ParseToolChoiceFunction). Rendering does not use it (the object
	// renders as "required"); AnswerGrammar forces a call of it.
	ToolChoiceFunction string
	// ResponseFormat json_object or json_schema adds a response-format
	// message after the last user message.
	ResponseFormat *ResponseFormat
	// ResponseSchema, if set, is the schema of a json_schema response
	// format, taking precedence over the one in ResponseFormat.
	ResponseSchema json.RawMessage
	// NoGenerationPrompt leaves out the opening of the assistant's turn.
	NoGenerationPrompt bool
}

// ResponseFormat is OpenAI's response_format.
type ResponseFormat struct {
	Type string `json:"type"` // "text", "json_object" or "json_schema"
	// JSONSchema is {"name": ..., "schema": {...}}, or a schema nested as
	// {"json_schema": {...}}.
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
}

// WithDefaults returns o as the release's apply_chat_template fills it
// in: with thinking on and no effort given, the effort is DefaultEffort.
func (o Options) WithDefaults() Options {
	if !o.NoThinking && o.ThinkingEffort == "" {
		o.ThinkingEffort = DefaultEffort
	}
	return o
}

// Thinking reports whether the answer starts in the think channel.
func (o Options) Thinking() bool { return !o.NoThinking }

// kwargs is the JSON form of Options (the goldens' kwargs).
type kwargs struct {
	Thinking            *bool           `json:"thinking,omitempty"`
	ThinkingEffort      string          `json:"thinking_effort,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	ResponseSchema      json.RawMessage `json:"response_schema,omitempty"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
}

// UnmarshalJSON reads the goldens' kwargs: thinking, thinking_effort,
// tool_choice, response_format, response_schema and add_generation_prompt
// (tools come beside them, see [Request]).
func (o *Options) UnmarshalJSON(data []byte) error {
	var k kwargs
	if err := json.Unmarshal(data, &k); err != nil {
		return err
	}
	tools := o.Tools
	*o = Options{Tools: tools, ThinkingEffort: k.ThinkingEffort, ResponseFormat: k.ResponseFormat, ResponseSchema: k.ResponseSchema}
	o.NoThinking = k.Thinking != nil && !*k.Thinking
	o.NoGenerationPrompt = k.AddGenerationPrompt != nil && !*k.AddGenerationPrompt
	tc, err := ParseToolChoice(k.ToolChoice)
	if err != nil {
		return err
	}
	o.ToolChoice = tc
	o.ToolChoiceFunction, err = ParseToolChoiceFunction(k.ToolChoice)
	return err
}

// MarshalJSON writes the kwargs form (without Tools).
func (o Options) MarshalJSON() ([]byte, error) {
	k := kwargs{ThinkingEffort: o.ThinkingEffort, ResponseFormat: o.ResponseFormat, ResponseSchema: o.ResponseSchema}
	if o.NoThinking {
		k.Thinking = new(bool)
	}
	if o.NoGenerationPrompt {
		k.AddGenerationPrompt = new(bool)
	}
	switch {
	case o.ToolChoiceFunction != "":
		var tc struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		tc.Type, tc.Function.Name = "function", o.ToolChoiceFunction
		k.ToolChoice, _ = json.Marshal(tc)
	case o.ToolChoice != "":
		k.ToolChoice, _ = json.Marshal(o.ToolChoice)
	}
	return json.Marshal(k)
}

// ParseToolChoice reads OpenAI's tool_choice: a string ("auto", "none",
// "required"), or an object naming a function, which reads as "required".
func ParseToolChoice(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '{' {
		return ToolChoiceRequired, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("chat: tool_choice: %w", err)
	}
	return s, nil
}

// Request is a conversation with its options, in the goldens' JSON shape:
// {"messages": [...], "tools": ..., "kwargs": {...}}.
type Request struct {
	Messages []Message
	Options
}

type requestJSON struct {
	Messages []Message       `json:"messages"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	Kwargs   json.RawMessage `json:"kwargs,omitempty"`
}

// UnmarshalJSON reads the goldens' shape.
func (r *Request) UnmarshalJSON(data []byte) error {
	var j requestJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*r = Request{Messages: j.Messages}
	if len(j.Kwargs) > 0 && string(j.Kwargs) != "null" {
		if err := json.Unmarshal(j.Kwargs, &r.Options); err != nil {
			return fmt.Errorf("chat: kwargs: %w", err)
		}
	}
	r.Tools = j.Tools
	return nil
}

// MarshalJSON writes the goldens' shape.
func (r Request) MarshalJSON() ([]byte, error) {
	kw, err := json.Marshal(r.Options)
	if err != nil {
		return nil, err
	}
	return json.Marshal(requestJSON{Messages: r.Messages, Tools: r.Tools, Kwargs: kw})
}
