// Package responses translates OpenAI's Responses API (POST
// /v1/responses) to and from the server's internal turn: the request
// body, after a previous response's history, into a wire.Turn (Turn),
// a turn's deltas into a response or its stream of events (Reply), and
// keeps the responses a follow-up continues, bounded (Store). The HTTP
// handlers stay in the server package, which runs the turn.
package responses

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// Request is a POST /v1/responses body (OpenAI's Responses API).
// Every documented field is listed; those with no meaning here are
// accepted and ignored (see the server's decodeAgent), the others are mapped onto the
// internal turn or refused with a 400 that names them.
type Request struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       json.RawMessage   `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Reasoning          *responsesReason  `json:"reasoning"`
	Text               *responsesText    `json:"text"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID string            `json:"previous_response_id"`
	Include            []string          `json:"include"`
	// Thinking is the K3 API's thinking option ({"type", "keep",
	// "effort"}, true or false; wire.ParseThinking), an extension here:
	// it decides thinking on or off, and its effort wins over
	// reasoning.effort.
	Thinking json.RawMessage `json:"thinking"`
	// PromptCacheKey groups requests that share a prefix (Codex sends its
	// session id): it becomes the turn's cacheKey, for the prefix cache.
	PromptCacheKey string `json:"prompt_cache_key"`
	// Refused unless absent or off: no background mode, no Conversations
	// API, no prompt templates, no logprobs.
	Background   *bool           `json:"background"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
	TopLogprobs  *int            `json:"top_logprobs"`
	Truncation   string          `json:"truncation"`
	// Accepted, no effect here.
	Metadata             json.RawMessage `json:"metadata"`
	ClientMetadata       json.RawMessage `json:"client_metadata"` // Codex's session and turn ids
	StreamOptions        json.RawMessage `json:"stream_options"`
	User                 string          `json:"user"`
	SafetyIdentifier     string          `json:"safety_identifier"`
	ServiceTier          string          `json:"service_tier"`
	PromptCacheRetention string          `json:"prompt_cache_retention"`
	PromptCacheOptions   json.RawMessage `json:"prompt_cache_options"`
	MaxToolCalls         *int            `json:"max_tool_calls"` // counts hosted tools, which are dropped
	ContextManagement    json.RawMessage `json:"context_management"`
	Moderation           json.RawMessage `json:"moderation"`
	AccessPrograms       json.RawMessage `json:"access_programs"`
	Image                json.RawMessage `json:"image"`
}

type responsesReason struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

type responsesText struct {
	Format    json.RawMessage `json:"format"`
	Verbosity string          `json:"verbosity"`
}

// responsesTool is a tool of a Responses request: function, custom (a
// free-form tool, declared to K3 as a function of one string "input"),
// namespace (a group of those, flattened), or a hosted tool, dropped.
type responsesTool struct {
	Type        string            `json:"type"`
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Parameters  json.RawMessage   `json:"parameters"`
	Strict      *bool             `json:"strict"`
	Tools       []json.RawMessage `json:"tools"`
}

// toolKey names a tool as the Responses API does: a namespace, if any,
// and a name.
type toolKey struct{ namespace, name string }

// toolRef is what a flattened tool name stands for.
type toolRef struct {
	toolKey
	custom bool // a custom tool: its call carries "input", not arguments
}

// Tools are a request's tools as K3 sees them: flat function
// names, and the way back to the API's names.
type Tools struct {
	decl   []wire.FunctionTool
	byFlat map[string]toolRef
	flat   map[toolKey]string
}

// customParameters are the parameters a custom tool is declared with.
var customParameters = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`)

// translateTools flattens a request's tools. Namespaced tools keep their
// own names unless another tool has the name; then they are
// NAMESPACE__NAME (Codex's flat form). Hosted tools (web_search,
// file_search, ...) cannot run here: they are dropped, and each type is
// logged once.
func translateTools(raw []json.RawMessage, note Note) (*Tools, *wire.APIError) {
	ts := &Tools{byFlat: map[string]toolRef{}, flat: map[toolKey]string{}}
	type entry struct {
		ref  toolRef
		tool responsesTool
	}
	var all []entry
	for i, r := range raw {
		var t responsesTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, wire.BadRequest(wire.ItemParam("tools", i), "", "tools[%d] is not a valid tool: %s", i, wire.JSONMessage(err))
		}
		switch t.Type {
		case "function", "custom":
			all = append(all, entry{toolRef{toolKey{"", t.Name}, t.Type == "custom"}, t})
		case "namespace":
			for k, rr := range t.Tools {
				var nt responsesTool
				if err := json.Unmarshal(rr, &nt); err != nil || (nt.Type != "function" && nt.Type != "custom") {
					return nil, wire.BadRequest(fmt.Sprintf("tools[%d].tools[%d]", i, k), "", "tools[%d].tools[%d] must be a function or custom tool", i, k)
				}
				all = append(all, entry{toolRef{toolKey{t.Name, nt.Name}, nt.Type == "custom"}, nt})
			}
		case "":
			return nil, wire.BadRequest(wire.ItemParam("tools", i)+".type", "", "tools[%d].type is required", i)
		default:
			note("responses tool "+t.Type, "dropping a hosted tool: the model cannot run it here", slog.String("type", t.Type))
		}
	}
	names := map[string]int{}
	for _, e := range all {
		names[e.ref.name]++
	}
	for i, e := range all {
		if e.ref.name == "" {
			return nil, wire.BadRequest("tools", "", "tool %d has no name", i)
		}
		flat := e.ref.name
		if e.ref.namespace != "" && names[flat] > 1 {
			flat = strings.TrimRight(e.ref.namespace, "_") + "__" + strings.TrimLeft(e.ref.name, "_")
		}
		if _, dup := ts.byFlat[flat]; dup {
			return nil, wire.BadRequest("tools", "", "two tools are named %q", flat)
		}
		ts.byFlat[flat], ts.flat[e.ref.toolKey] = e.ref, flat
		fs := wire.FunctionSchema{Name: flat, Description: e.tool.Description, Parameters: e.tool.Parameters, Strict: e.tool.Strict}
		if e.ref.custom {
			fs.Parameters, fs.Strict = customParameters, nil
		}
		ts.decl = append(ts.decl, wire.FunctionTool{Type: "function", Function: fs})
	}
	return ts, nil
}

// flatName is the name K3 knows a called tool by.
func (ts *Tools) flatName(namespace, name string) string {
	if f, ok := ts.flat[toolKey{namespace, name}]; ok {
		return f
	}
	return name
}

// responsesItem is one input item: a message, a function or custom tool
// call, its output, or reasoning given back.
type responsesItem struct {
	Type             string          `json:"type"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Namespace        string          `json:"namespace"`
	Arguments        json.RawMessage `json:"arguments"`
	Input            string          `json:"input"`
	Output           json.RawMessage `json:"output"`
	Summary          []responsesPart `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content"`
}

// responsesPart is a content part: input_text, output_text, refusal,
// summary_text, reasoning_text (images and files are refused).
type responsesPart struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// responsesInput translates input (a string or a list of items) after
// history into chat messages. Assistant-side items in a row (reasoning,
// an assistant message, tool calls) make one assistant message, as K3
// renders a turn; a reasoning item after content or calls starts the
// next. A tool output must answer a call made before it.
func responsesInput(raw json.RawMessage, history []chat.Message, tools *Tools) ([]chat.Message, *wire.APIError) {
	msgs := history
	if str, ok := wire.RawString(raw); ok {
		return append(msgs, chat.Message{Role: chat.RoleUser, Content: str}), nil
	}
	var items []json.RawMessage
	if wire.IsNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, wire.BadRequest("input", "", "input must be a string or an array of items")
	}
	calls := map[string]bool{}
	for _, m := range history {
		for _, c := range m.ToolCalls {
			calls[c.ID] = true
		}
	}
	var asst *chat.Message // the assistant message being gathered
	flush := func() {
		if asst != nil {
			msgs = append(msgs, *asst)
			asst = nil
		}
	}
	assistant := func() *chat.Message {
		if asst == nil {
			asst = &chat.Message{Role: chat.RoleAssistant}
		}
		return asst
	}
	for i, r := range items {
		p := wire.ItemParam("input", i)
		var it responsesItem
		if err := json.Unmarshal(r, &it); err != nil {
			return nil, wire.BadRequest(p, "", "%s is not a valid item: %s", p, wire.JSONMessage(err))
		}
		if it.Type == "" && it.Role != "" {
			it.Type = "message"
		}
		switch it.Type {
		case "message":
			role := it.Role
			switch role {
			case "developer", chat.RoleSystem:
				role = chat.RoleSystem
			case chat.RoleUser, chat.RoleAssistant:
			default:
				return nil, wire.BadRequest(p+".role", "", "%s.role %q is not supported (user, system, developer, assistant)", p, it.Role)
			}
			m, e := responsesContent(p+".content", it.Content)
			if e != nil {
				return nil, e
			}
			if role == chat.RoleAssistant {
				a := assistant()
				if len(a.ToolCalls) > 0 || a.Content != "" || a.Parts != nil {
					flush()
					a = assistant()
				}
				a.Content, a.Parts = m.Content, m.Parts
				continue
			}
			flush()
			m.Role = role
			msgs = append(msgs, m)
		case "reasoning":
			text, ok := "", false
			if it.EncryptedContent != nil {
				text, ok = wire.DecodeReasoning(*it.EncryptedContent)
			}
			if !ok {
				text = reasoningText(it.Summary, it.Content)
			}
			if asst != nil && (asst.Content != "" || asst.Parts != nil || len(asst.ToolCalls) > 0 || asst.ReasoningContent != "") {
				flush()
			}
			assistant().ReasoningContent = text
		case "function_call", "custom_tool_call":
			if it.CallID == "" {
				return nil, wire.BadRequest(p+".call_id", "", "%s.call_id is required", p)
			}
			args := ""
			if it.Type == "custom_tool_call" {
				b, _ := json.Marshal(map[string]string{"input": it.Input})
				args = string(b)
			} else if a, ok := wire.RawString(it.Arguments); ok {
				args = a
			} else if !wire.IsNull(it.Arguments) {
				args = string(it.Arguments)
			}
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: it.CallID, Type: "function",
				Function: chat.FunctionCall{Name: tools.flatName(it.Namespace, it.Name), Arguments: args}})
			calls[it.CallID] = true
		case "function_call_output", "custom_tool_call_output":
			if !calls[it.CallID] {
				return nil, wire.BadRequest(p+".call_id", "", "%s.call_id %q answers no function call made earlier in the conversation", p, it.CallID)
			}
			flush()
			out, e := responsesContent(p+".output", it.Output)
			if e != nil {
				return nil, e
			}
			out.Role, out.ToolCallID = chat.RoleTool, it.CallID
			msgs = append(msgs, out)
		case "":
			return nil, wire.BadRequest(p+".type", "", "%s.type is required", p)
		default:
			return nil, wire.BadRequest(p+".type", "", "%s.type %q is not supported (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning)", p, it.Type)
		}
	}
	flush()
	return msgs, nil
}

// reasoningText is the reasoning of an item from another server (or
// without encrypted_content): its reasoning_text content, else its
// summaries.
func reasoningText(summary []responsesPart, content json.RawMessage) string {
	var parts []responsesPart
	json.Unmarshal(content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "reasoning_text" || p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	if b.Len() > 0 {
		return b.String()
	}
	for k, p := range summary {
		if k > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// responsesContent reads a message's content, or a tool output: a string,
// or text parts (one segment each, as chat completions' parts).
func responsesContent(param string, raw json.RawMessage) (chat.Message, *wire.APIError) {
	var m chat.Message
	if str, ok := wire.RawString(raw); ok {
		m.Content = str
		return m, nil
	}
	var parts []responsesPart
	if wire.IsNull(raw) || json.Unmarshal(raw, &parts) != nil {
		return m, wire.BadRequest(param, "", "%s must be a string or an array of content parts", param)
	}
	m.Parts = []chat.Part{}
	for k, pt := range parts {
		switch pt.Type {
		case "input_text", "output_text", "text":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: pt.Text})
		case "refusal":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: pt.Refusal})
		case "input_image", "input_file", "input_audio":
			return m, wire.BadRequest(fmt.Sprintf("%s[%d].type", param, k), "", "%s[%d] is %s: this server reads text only (Kimi K3 here has no vision or file input)", param, k, pt.Type)
		default:
			return m, wire.BadRequest(fmt.Sprintf("%s[%d].type", param, k), "", "%s[%d].type %q is not supported (input_text, output_text, refusal)", param, k, pt.Type)
		}
	}
	return m, nil
}

// responsesToolChoice reads tool_choice: "none", "auto", "required", a
// function or custom tool by name, allowed_tools (its mode; the list
// does not narrow the tools declared), or a hosted tool (dropped, so
// auto).
func responsesToolChoice(raw json.RawMessage, tools *Tools) (wire.ToolChoice, *wire.APIError) {
	if wire.IsNull(raw) {
		return wire.ToolChoice{}, nil
	}
	if str, ok := wire.RawString(raw); ok {
		switch str {
		case "none", "auto", "required":
			return wire.ToolChoice{Mode: str}, nil
		}
		return wire.ToolChoice{}, wire.BadRequest("tool_choice", "", "tool_choice %q is not supported (none, auto, required, or an object)", str)
	}
	var o struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Mode      string `json:"mode"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return wire.ToolChoice{}, wire.BadRequest("tool_choice", "", "tool_choice must be a string or an object")
	}
	switch o.Type {
	case "function", "custom":
		if o.Name == "" {
			return wire.ToolChoice{}, wire.BadRequest("tool_choice.name", "", "tool_choice.name is required")
		}
		return wire.ToolChoice{Mode: chat.ToolChoiceRequired, Name: tools.flatName(o.Namespace, o.Name)}, nil
	case "allowed_tools":
		switch o.Mode {
		case "auto", "required":
			return wire.ToolChoice{Mode: o.Mode}, nil
		}
		return wire.ToolChoice{}, wire.BadRequest("tool_choice.mode", "", "tool_choice.mode must be auto or required")
	case "":
		return wire.ToolChoice{}, wire.BadRequest("tool_choice.type", "", "tool_choice.type is required")
	}
	return wire.ToolChoice{Mode: chat.ToolChoiceAuto}, nil
}

// Turn translates a Responses request, after the history of its
// previous response prev (nil for none), into the internal turn, with
// the tools it declares; note logs what is dropped.
func Turn(req *Request, prev *Stored, note Note) (*wire.Turn, *Tools, *wire.APIError) {
	switch {
	case req.Background != nil && *req.Background:
		return nil, nil, wire.Unsupported("background", "background responses are not supported by this server; send the request and wait (or stream it)")
	case !wire.IsNull(req.Conversation):
		return nil, nil, wire.Unsupported("conversation", "the Conversations API is not supported by this server; use previous_response_id or send the whole input")
	case !wire.IsNull(req.Prompt):
		return nil, nil, wire.Unsupported("prompt", "prompt templates are not supported by this server; send instructions and input")
	case req.TopLogprobs != nil && *req.TopLogprobs > 0:
		return nil, nil, wire.Unsupported("top_logprobs", "top_logprobs is not supported on /v1/responses; /v1/chat/completions has logprobs")
	}
	switch req.Truncation {
	case "", "disabled", "auto":
	default:
		return nil, nil, wire.BadRequest("truncation", "", "truncation must be auto or disabled")
	}
	tools, e := translateTools(req.Tools, note)
	if e != nil {
		return nil, nil, e
	}
	t := &wire.Turn{Tools: wire.ToolsJSON(tools.decl), Params: wire.Params{Model: req.Model, Temperature: req.Temperature, TopP: req.TopP},
		MaxTokens: req.MaxOutputTokens, MaxParam: "max_output_tokens", ClampMax: true, FormatParam: "text.format", CacheKey: req.PromptCacheKey}
	var msgs []chat.Message
	if !wire.IsNull(req.Instructions) {
		str, ok := wire.RawString(req.Instructions)
		if !ok {
			return nil, nil, wire.BadRequest("instructions", "", "instructions must be a string")
		}
		if str != "" {
			msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: str})
		}
	}
	if prev != nil {
		msgs = append(msgs, prev.history...)
		if t.CacheKey == "" {
			t.CacheKey = prev.conversation
		}
	}
	if t.Msgs, e = responsesInput(req.Input, msgs, tools); e != nil {
		return nil, nil, e
	}
	if t.ToolChoice, e = responsesToolChoice(req.ToolChoice, tools); e != nil {
		return nil, nil, e
	}
	t.OneCall = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	if r := req.Reasoning; r != nil && r.Effort != nil && *r.Effort != "" {
		switch eff := *r.Effort; eff {
		case "none":
			t.NoThinking = true
		default:
			var ok bool
			if t.Effort, ok = wire.EffortFor(eff); !ok {
				return nil, nil, wire.BadRequest("reasoning.effort", "", "reasoning.effort %q is not supported (none, minimal, low, medium, high, xhigh)", eff)
			}
		}
	}
	th, e := wire.ParseThinking("thinking", req.Thinking)
	if e != nil {
		return nil, nil, e
	}
	if th.Set {
		effortSet := req.Reasoning != nil && req.Reasoning.Effort != nil && *req.Reasoning.Effort != ""
		switch {
		case th.Off && effortSet && !t.NoThinking:
			return nil, nil, wire.BadRequest("reasoning.effort", "", "reasoning.effort %q needs thinking, and thinking is disabled", *req.Reasoning.Effort)
		case !th.Off && t.NoThinking:
			return nil, nil, wire.BadRequest("reasoning.effort", "", `reasoning.effort "none" turns thinking off, and thinking is enabled`)
		}
		t.NoThinking = th.Off
		if th.Off {
			t.Effort = ""
		} else if th.Effort != "" {
			t.Effort = th.Effort
		}
	}
	if req.Text != nil && !wire.IsNull(req.Text.Format) {
		var f chat.ResponseFormat
		if json.Unmarshal(req.Text.Format, &f) != nil {
			return nil, nil, wire.BadRequest("text.format", "", "text.format must be an object with a type")
		}
		// json_schema's name, schema and strict sit beside its type here;
		// the renderer finds the schema in the object itself.
		f.JSONSchema = req.Text.Format
		t.Format = &f
		if f.Type == "json_schema" {
			var fields map[string]json.RawMessage
			json.Unmarshal(req.Text.Format, &fields)
			if e := wire.CheckSchemaFormat("text.format", fields, true); e != nil {
				return nil, nil, e
			}
		}
	}
	return t, tools, nil
}

// historyOf is the conversation a stored response continues: the turn's
// messages without the instructions, and the reply.
func historyOf(t *wire.Turn, hasInstructions bool, reply chat.Message) []chat.Message {
	msgs := t.Msgs
	if hasInstructions {
		msgs = msgs[1:]
	}
	out := make([]chat.Message, 0, len(msgs)+1)
	return append(append(out, msgs...), reply)
}

// wantsEncryptedReasoning reports whether include asks for
// reasoning.encrypted_content.
func wantsEncryptedReasoning(include []string) bool {
	for _, x := range include {
		if x == "reasoning.encrypted_content" {
			return true
		}
	}
	return false
}

// NotFound is the 404 of a response id the store does not hold.
func NotFound(param, id string) *wire.APIError {
	return wire.NotFound(param, "not_found", "no response with id %q: it was never stored (store: false), was deleted, or was evicted (the server keeps a bounded number, --stored-responses)", id)
}

// Note logs msg at Warn the first time key is seen (the server's
// noteOnce): what a request carries that the server drops is said once.
type Note func(key, msg string, attrs ...slog.Attr)
