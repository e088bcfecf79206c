// Package chat speaks Kimi K3's own chat format, XTML: it renders a
// conversation into the segments and token ids the released model was
// trained on, and parses the model's answer back into reasoning, content
// and tool calls.
//
// # The format
//
// Four control tokens frame everything: <|open|>, <|close|>, <|sep|> and
// <|end_of_msg|>. A message is
//
//	<|open|>message role="user"<|sep|>CONTENT<|close|>message<|sep|><|end_of_msg|>
//
// and an assistant turn carries a think channel (its reasoning), a
// response channel (its answer) and, when it calls tools, a tools channel
// with one call per tool and one typed argument per key. Tool results go
// back as role="tool" messages in call order. The renderer adds system
// messages of its own: the tool declarations, the thinking effort, the
// tool choice and the response format.
//
// # Segments
//
// [Render] returns segments: a special segment is exactly one control
// token, and every other segment is encoded as plain text on its own
// ([Encode]), so BPE never merges across a boundary and a control-token
// spelling typed by a user stays text. The segments and ids are exactly
// those of the release's encoder (the fixture goldens prove it).
//
// # Answers
//
// [Parse] turns the ids the model generated after the prompt into a
// [Message] with its reasoning, content and tool calls (OpenAI's shapes);
// a [Parser] does the same one id at a time and reports deltas as they
// come, and a tool call when its call closes.
//
// # Beyond the goldens
//
// A few choices are not pinned down by the release's goldens and follow
// the format's description instead: JSON values are written as Python's
// json.dumps writes them with ensure_ascii=False, non-ASCII text kept as
// it is, as the release's encoder writes them (typed arguments with ", "
// and ": ", declarations and schemas compact with sorted keys; a prompt
// rendered so has the token count Moonshot's API reports for it); with
// thinking off, earlier assistant turns are rendered
// without their think channel; the thinking-effort message comes right
// after the tool declarations; a tool choice naming a function reads as
// "required"; tool results without a tool_call_id answer the calls not
// yet answered, in order.
//
// The package depends only on the standard library and the tokenizer.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The control tokens of the format, as spelled in the tokenizer's
// added tokens.
const (
	TokOpen     = "<|open|>"
	TokClose    = "<|close|>"
	TokSep      = "<|sep|>"
	TokEndOfMsg = "<|end_of_msg|>"
	// TokEOS is the end-of-sequence token the released model may emit
	// instead of <|end_of_msg|>; a reply stops at either.
	TokEOS = "[EOS]"
)

// Roles of messages.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ErrFormat is wrapped by the errors of rendering a conversation that the
// format cannot express (an unknown role, arguments that are not a JSON
// object, an unknown effort).
var ErrFormat = errors.New("chat: cannot render")

// Message is one message of a conversation, in the shape of OpenAI's chat
// API (its JSON form reads and writes that shape).
type Message struct {
	Role string `json:"role"`
	// Name, if set, is the name attribute of the message.
	Name string `json:"name,omitempty"`
	// Content is the text of the message, unless Parts is set.
	Content string `json:"-"`
	// Parts is content given as text parts, one segment each.
	Parts []Part `json:"-"`
	// ReasoningContent is an assistant's reasoning, its think channel.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ToolCalls are the tools an assistant called.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is, on a tool result, the id of the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Tool is, on a tool result, the name of the tool; when empty it is
	// found from ToolCallID.
	Tool string `json:"tool,omitempty"`
	// Tools, on a system message, declares tools mid-conversation (any
	// JSON, normally a list of OpenAI tool objects).
	Tools json.RawMessage `json:"tools,omitempty"`
}

// Part is one part of a message's content. Only text parts are rendered.
type Part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ToolCall is one call of a tool by the assistant, as OpenAI shapes it.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and holds its arguments.
type FunctionCall struct {
	Name string `json:"name"`
	// Arguments is a JSON object of the arguments, as text (OpenAI's
	// shape). Reading JSON accepts the object itself as well as a string
	// holding it.
	Arguments string `json:"arguments"`
}

// UnmarshalJSON reads arguments given as a JSON string or as an object.
func (f *FunctionCall) UnmarshalJSON(data []byte) error {
	var raw struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	f.Name = raw.Name
	f.Arguments = ""
	a := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(a) == 0 || string(a) == "null":
	case a[0] == '"':
		return json.Unmarshal(a, &f.Arguments)
	default:
		f.Arguments = string(a)
	}
	return nil
}

type messageJSON struct {
	Role             string          `json:"role"`
	Name             string          `json:"name,omitempty"`
	Content          json.RawMessage `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	Tool             string          `json:"tool,omitempty"`
	Tools            json.RawMessage `json:"tools,omitempty"`
}

// MarshalJSON writes content as a string, or as a list of parts.
func (m Message) MarshalJSON() ([]byte, error) {
	j := messageJSON{Role: m.Role, Name: m.Name, ReasoningContent: m.ReasoningContent,
		ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Tool: m.Tool, Tools: m.Tools}
	var err error
	if m.Parts != nil {
		j.Content, err = json.Marshal(m.Parts)
	} else {
		j.Content, err = json.Marshal(m.Content)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads content given as a string, a list of parts, or null.
func (m *Message) UnmarshalJSON(data []byte) error {
	var j messageJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*m = Message{Role: j.Role, Name: j.Name, ReasoningContent: j.ReasoningContent,
		ToolCalls: j.ToolCalls, ToolCallID: j.ToolCallID, Tool: j.Tool, Tools: j.Tools}
	c := bytes.TrimSpace(j.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		m.Parts = []Part{}
		return json.Unmarshal(c, &m.Parts)
	default:
		return fmt.Errorf("chat: content of a %s message is neither a string nor a list of parts", j.Role)
	}
	return nil
}

// Text returns the content as one string: Content, or the text parts
// joined.
func (m Message) Text() string {
	if m.Parts == nil {
		return m.Content
	}
	var b []byte
	for _, p := range m.Parts {
		b = append(b, p.Text...)
	}
	return string(b)
}

// Tool is a function tool in OpenAI's shape, a convenience for building
// the JSON of [Options.Tools] with [ToolsJSON].
type Tool struct {
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function declares a function tool.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolsJSON returns the JSON list of tools; an empty Type is "function".
// It fails only when a Parameters is not valid JSON.
func ToolsJSON(tools ...Tool) (json.RawMessage, error) {
	ts := make([]Tool, len(tools))
	for k, t := range tools {
		if t.Type == "" {
			t.Type = "function"
		}
		ts[k] = t
	}
	return json.Marshal(ts)
}
