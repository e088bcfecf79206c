package chat

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/k3go/k3/tokenizer"
)

// Segment is one piece of a rendered conversation: a control token
// (Special) or text encoded on its own. Its JSON form is [text, special].
type Segment struct {
	Text    string
	Special bool
}

// MarshalJSON writes [text, special].
func (s Segment) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{s.Text, s.Special})
}

// UnmarshalJSON reads [text, special].
func (s *Segment) UnmarshalJSON(data []byte) error {
	var a []json.RawMessage
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	if len(a) != 2 {
		return fmt.Errorf("chat: segment has %d elements, want 2", len(a))
	}
	if err := json.Unmarshal(a[0], &s.Text); err != nil {
		return err
	}
	return json.Unmarshal(a[1], &s.Special)
}

// Text joins the segments: the rendered text.
func Text(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteString(s.Text)
	}
	return b.String()
}

// Encode returns the ids of segments: a special segment is the id of its
// control token, and every other segment is encoded as plain text on its
// own (control-token spellings in it stay text).
func Encode(tok *tokenizer.Tokenizer, segs []Segment) ([]int, error) {
	return AppendEncode(nil, tok, segs)
}

// AppendEncode is [Encode] appending to dst.
func AppendEncode(dst []int, tok *tokenizer.Tokenizer, segs []Segment) ([]int, error) {
	for _, s := range segs {
		if s.Special {
			id, ok := tok.ID(s.Text)
			if !ok {
				return dst, fmt.Errorf("chat: the tokenizer has no %s token", s.Text)
			}
			dst = append(dst, id)
			continue
		}
		dst = tok.AppendEncode(dst, s.Text, tokenizer.EncodeOptions{NoAddedTokens: true})
	}
	return dst, nil
}

// Render lays out a conversation as the release's encoder does and
// returns its segments: the tool declarations (when opts.Tools has any),
// the thinking effort (when opts.ThinkingEffort is set and thinking is
// on), the messages with the tool-choice and response-format messages
// after the last user message, and the generation prompt (unless
// opts.NoGenerationPrompt). Use opts.WithDefaults() for what the release's
// apply_chat_template renders.
func Render(msgs []Message, opts Options) ([]Segment, error) {
	segs, _, err := render(msgs, opts)
	return segs, err
}

// RenderFrom renders the conversation as Render does and returns only the
// segments from message from on (from may be len(msgs): the generation
// prompt and anything added after the last message). It is how a turn is
// added to a conversation whose earlier messages were already fed.
func RenderFrom(msgs []Message, from int, opts Options) ([]Segment, error) {
	if from < 0 || from > len(msgs) {
		return nil, fmt.Errorf("chat: RenderFrom: message %d of %d", from, len(msgs))
	}
	segs, starts, err := render(msgs, opts)
	if err != nil {
		return nil, err
	}
	return segs[starts[from]:], nil
}

type renderer struct {
	segs []Segment
	opts Options
}

func (r *renderer) special(s string) { r.segs = append(r.segs, Segment{s, true}) }

func (r *renderer) text(s string) {
	if s != "" {
		r.segs = append(r.segs, Segment{s, false})
	}
}

// open writes <|open|>NAME KEY="VALUE"...<|sep|>, attrs being key, value
// pairs.
func (r *renderer) open(name string, attrs ...string) {
	r.special(TokOpen)
	r.text(name)
	for k := 0; k+1 < len(attrs); k += 2 {
		r.text(" " + attrs[k])
		r.text(`="`)
		r.text(escapeAttr(attrs[k+1]))
		r.text(`"`)
	}
	r.special(TokSep)
}

// close writes <|close|>NAME<|sep|>.
func (r *renderer) close(name string) {
	r.special(TokClose)
	r.text(name)
	r.special(TokSep)
}

func (r *renderer) endMessage() {
	r.close("message")
	r.special(TokEndOfMsg)
}

// escapeAttr escapes an attribute value: & as &amp; and " as &quot;.
func escapeAttr(s string) string {
	if !strings.ContainsAny(s, `&"`) {
		return s
	}
	return strings.NewReplacer("&", "&amp;", `"`, "&quot;").Replace(s)
}

func (r *renderer) system(typ, body string) {
	r.open("message", "role", RoleSystem, "type", typ)
	r.text(body)
	r.endMessage()
}

func roleAttrs(role, name string, more ...string) []string {
	a := []string{"role", role}
	if name != "" {
		a = append(a, "name", name)
	}
	return append(a, more...)
}

// render returns the segments and, for each message (and len(msgs)), the
// index of the segment where it starts.
func render(msgs []Message, opts Options) ([]Segment, []int, error) {
	r := &renderer{opts: opts}
	if tools, err := toolsValue(opts.Tools); err != nil {
		return nil, nil, err
	} else if tools != nil {
		r.system("tool-declare", "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"+
			tools.format(pyCompactSorted)+"\n```")
	}
	if opts.Thinking() && opts.ThinkingEffort != "" {
		switch opts.ThinkingEffort {
		case EffortLow, EffortHigh, EffortMax:
		default:
			return nil, nil, fmt.Errorf("%w: thinking effort %q (want low, high or max)", ErrFormat, opts.ThinkingEffort)
		}
		r.system("thinking-effort", "`thinking_effort` guides on how much to think in your thinking channel "+
			"(not including the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"+
			"Now the system is invoked with `thinking_effort="+opts.ThinkingEffort+"`.")
	}
	after, err := afterLastUser(opts)
	if err != nil {
		return nil, nil, err
	}
	lastUser := -1
	for i, m := range msgs {
		if m.Role == RoleUser {
			lastUser = i
		}
	}
	starts := make([]int, len(msgs)+1)
	var calls []ToolCall // of the last assistant message
	for i := 0; i < len(msgs); i++ {
		starts[i] = len(r.segs)
		m := msgs[i]
		switch m.Role {
		case RoleSystem, RoleUser:
			if m.Role == RoleSystem && len(m.Tools) > 0 {
				tools, err := toolsValue(m.Tools)
				if err != nil {
					return nil, nil, err
				}
				if tools != nil {
					r.system("tool-declare", "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\n"+
						"You have access to all existing and extended tools.\nHere are the specs for the extended tools.\n\n```json\n"+
						tools.format(pyCompactSorted)+"\n```")
				}
				if m.Text() == "" {
					break
				}
			}
			r.open("message", roleAttrs(m.Role, m.Name)...)
			r.content(m)
			r.endMessage()
		case RoleAssistant:
			if err := r.assistant(m); err != nil {
				return nil, nil, fmt.Errorf("%w: message %d: %v", ErrFormat, i, err)
			}
			calls = m.ToolCalls
		case RoleTool:
			j := i
			for j < len(msgs) && msgs[j].Role == RoleTool {
				starts[j] = starts[i]
				j++
			}
			r.toolResults(msgs[i:j], calls)
			i = j - 1
		default:
			return nil, nil, fmt.Errorf("%w: message %d has role %q", ErrFormat, i, m.Role)
		}
		if i == lastUser {
			after(r)
		}
	}
	if lastUser < 0 {
		after(r)
	}
	starts[len(msgs)] = len(r.segs)
	if !opts.NoGenerationPrompt {
		r.open("message", "role", RoleAssistant)
		if opts.Thinking() {
			r.open("think")
		} else {
			r.open("response")
		}
	}
	return r.segs, starts, nil
}

// content writes a message's content: one segment per text part.
func (r *renderer) content(m Message) {
	if m.Parts == nil {
		r.text(m.Content)
		return
	}
	for _, p := range m.Parts {
		r.text(p.Text)
	}
}

func (r *renderer) assistant(m Message) error {
	r.open("message", roleAttrs(RoleAssistant, m.Name)...)
	if r.opts.Thinking() {
		r.open("think")
		r.text(m.ReasoningContent)
		r.close("think")
	}
	r.open("response")
	r.content(m)
	r.close("response")
	if len(m.ToolCalls) > 0 {
		r.open("tools")
		for k, c := range m.ToolCalls {
			args, err := arguments(c.Function.Arguments)
			if err != nil {
				return fmt.Errorf("tool call %d (%s): %w", k+1, c.Function.Name, err)
			}
			r.open("call", "tool", c.Function.Name, "index", strconv.Itoa(k+1))
			for n, key := range args.keys {
				v := args.vals[n]
				r.open("argument", "key", key, "type", v.typeName())
				if v.kind == 's' {
					r.text(v.str)
				} else {
					r.text(v.format(pyDefault))
				}
				r.close("argument")
			}
			r.close("call")
		}
		r.close("tools")
	}
	r.endMessage()
	return nil
}

// arguments parses the arguments of a call: a JSON object (empty text is
// no arguments). Its errors name no package.
func arguments(s string) (*value, error) {
	if strings.TrimSpace(s) == "" {
		return &value{kind: 'o'}, nil
	}
	v, err := parseValue([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("arguments: %v", err)
	}
	if v.kind != 'o' {
		return nil, fmt.Errorf("arguments are a JSON %s, not an object", v.typeName())
	}
	return v, nil
}

// toolResults writes a run of tool results in the order of the calls
// they answer: by tool_call_id, else the next call not yet answered.
func (r *renderer) toolResults(results []Message, calls []ToolCall) {
	type res struct {
		m     Message
		index int
		tool  string
	}
	claimed := make([]bool, len(calls))
	out := make([]res, len(results))
	for k, m := range results {
		idx := -1
		if m.ToolCallID != "" {
			idx = slices.IndexFunc(calls, func(c ToolCall) bool { return c.ID == m.ToolCallID })
			if idx >= 0 && claimed[idx] {
				idx = -1
			}
		}
		if idx < 0 {
			idx = slices.Index(claimed, false)
		}
		x := res{m: m, tool: m.Tool, index: k + 1}
		if idx >= 0 {
			claimed[idx] = true
			x.index = idx + 1
			if x.tool == "" {
				x.tool = calls[idx].Function.Name
			}
		}
		out[k] = x
	}
	slices.SortStableFunc(out, func(a, b res) int { return a.index - b.index })
	for _, x := range out {
		r.open("message", roleAttrs(RoleTool, x.m.Name, "tool", x.tool, "index", strconv.Itoa(x.index))...)
		r.content(x.m)
		r.endMessage()
	}
}

// toolsValue parses a tools declaration; nil when it declares none.
func toolsValue(raw json.RawMessage) (*value, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, nil
	}
	v, err := parseValue(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: tools: %v", ErrFormat, err)
	}
	switch {
	case v.kind == 'z', (v.kind == 'a' || v.kind == 'o') && len(v.vals) == 0:
		return nil, nil
	}
	return v, nil
}

// afterLastUser returns what is written after the last user message: the
// tool-choice and response-format messages.
func afterLastUser(opts Options) (func(*renderer), error) {
	var choice string
	switch opts.ToolChoice {
	case "", ToolChoiceAuto:
	case ToolChoiceRequired:
		choice = "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message."
	case ToolChoiceNone:
		choice = "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message."
	default:
		return nil, fmt.Errorf("%w: tool_choice %q (want auto, required or none)", ErrFormat, opts.ToolChoice)
	}
	var format string
	const raw = "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting."
	if rf := opts.ResponseFormat; rf != nil {
		switch rf.Type {
		case "", "text":
		case "json_object":
			format = "The system is invoked with `response_format=json_object`.\n" + raw
		case "json_schema":
			format = "The system is invoked with `response_format=json_schema`.\n" + raw
			schema, err := responseSchema(opts)
			if err != nil {
				return nil, err
			}
			if schema != nil {
				format += "\nThe JSON data must match the following schema:\n```json\n" + schema.format(pyCompactSorted) + "\n```"
			}
		default:
			return nil, fmt.Errorf("%w: response_format type %q (want text, json_object or json_schema)", ErrFormat, rf.Type)
		}
	}
	return func(r *renderer) {
		if choice != "" {
			r.system("tool-choice", choice)
		}
		if format != "" {
			r.system("response-format", format)
		}
	}, nil
}

// responseSchema finds the schema of a json_schema response format:
// ResponseSchema, else json_schema's "schema", else its nested
// "json_schema".
func responseSchema(opts Options) (*value, error) {
	if s := strings.TrimSpace(string(opts.ResponseSchema)); s != "" && s != "null" {
		v, err := parseValue(opts.ResponseSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: response_schema: %v", ErrFormat, err)
		}
		return v, nil
	}
	js := opts.ResponseFormat.JSONSchema
	if len(strings.TrimSpace(string(js))) == 0 {
		return nil, nil
	}
	v, err := parseValue(js)
	if err != nil {
		return nil, fmt.Errorf("%w: response_format.json_schema: %v", ErrFormat, err)
	}
	if v.kind != 'o' {
		return nil, nil
	}
	for _, key := range []string{"schema", "json_schema"} {
		if i := slices.Index(v.keys, key); i >= 0 && v.vals[i].kind != 'z' {
			return v.vals[i], nil
		}
	}
	return nil, nil
}

// RenderAnswer returns the segments a model generates for the assistant
// message m after a prompt rendered with opts: what follows the
// generation prompt, through the closing <|end_of_msg|>. [Parse] reads
// them back into m's reasoning, content and tool calls.
func RenderAnswer(m Message, opts Options) ([]Segment, error) {
	m.Role, m.Name = RoleAssistant, ""
	r := &renderer{opts: opts}
	if err := r.assistant(m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	// Drop what the generation prompt already holds: the message's
	// opening and that of its first channel, up to their second <|sep|>.
	skip, n := 0, 0
	for k, s := range r.segs {
		if s.Special && s.Text == TokSep {
			n++
			if n == 2 {
				skip = k + 1
				break
			}
		}
	}
	return r.segs[skip:], nil
}
