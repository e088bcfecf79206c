package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/k3go/k3/chat"
)

// responsesRequest is a POST /v1/responses body (OpenAI's Responses API).
// Every documented field is listed; those with no meaning here are
// accepted and ignored (see decodeAgent), the others are mapped onto the
// internal turn or refused with a 400 that names them.
type responsesRequest struct {
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

// responsesTools are a request's tools as K3 sees them: flat function
// names, and the way back to the API's names.
type responsesTools struct {
	decl   []functionTool
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
func (s *Server) translateTools(raw []json.RawMessage) (*responsesTools, *apiError) {
	ts := &responsesTools{byFlat: map[string]toolRef{}, flat: map[toolKey]string{}}
	type entry struct {
		ref  toolRef
		tool responsesTool
	}
	var all []entry
	for i, r := range raw {
		var t responsesTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, badRequest(itemParam("tools", i), "", "tools[%d] is not a valid tool: %s", i, jsonMessage(err))
		}
		switch t.Type {
		case "function", "custom":
			all = append(all, entry{toolRef{toolKey{"", t.Name}, t.Type == "custom"}, t})
		case "namespace":
			for k, rr := range t.Tools {
				var nt responsesTool
				if err := json.Unmarshal(rr, &nt); err != nil || (nt.Type != "function" && nt.Type != "custom") {
					return nil, badRequest(fmt.Sprintf("tools[%d].tools[%d]", i, k), "", "tools[%d].tools[%d] must be a function or custom tool", i, k)
				}
				all = append(all, entry{toolRef{toolKey{t.Name, nt.Name}, nt.Type == "custom"}, nt})
			}
		case "":
			return nil, badRequest(itemParam("tools", i)+".type", "", "tools[%d].type is required", i)
		default:
			s.noteOnce("responses tool "+t.Type, "dropping a hosted tool: the model cannot run it here", slog.String("type", t.Type))
		}
	}
	names := map[string]int{}
	for _, e := range all {
		names[e.ref.name]++
	}
	for i, e := range all {
		if e.ref.name == "" {
			return nil, badRequest("tools", "", "tool %d has no name", i)
		}
		flat := e.ref.name
		if e.ref.namespace != "" && names[flat] > 1 {
			flat = strings.TrimRight(e.ref.namespace, "_") + "__" + strings.TrimLeft(e.ref.name, "_")
		}
		if _, dup := ts.byFlat[flat]; dup {
			return nil, badRequest("tools", "", "two tools are named %q", flat)
		}
		ts.byFlat[flat], ts.flat[e.ref.toolKey] = e.ref, flat
		fs := functionSchema{Name: flat, Description: e.tool.Description, Parameters: e.tool.Parameters, Strict: e.tool.Strict}
		if e.ref.custom {
			fs.Parameters, fs.Strict = customParameters, nil
		}
		ts.decl = append(ts.decl, functionTool{Type: "function", Function: fs})
	}
	return ts, nil
}

// flatName is the name K3 knows a called tool by.
func (ts *responsesTools) flatName(namespace, name string) string {
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

// reasoningPrefix marks the encrypted_content this server writes: K3's
// reasoning, base64-encoded, not encrypted. A client that keeps no state
// (store: false with include reasoning.encrypted_content, as Codex runs)
// gives it back, and the reasoning is rendered again exactly.
const reasoningPrefix = "k3-reasoning-v1:"

func encodeReasoning(r string) string {
	return reasoningPrefix + base64.StdEncoding.EncodeToString([]byte(r))
}

// decodeReasoning reads encrypted_content written by encodeReasoning.
func decodeReasoning(s string) (string, bool) {
	b64, ok := strings.CutPrefix(s, reasoningPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	return string(b), err == nil
}

// responsesInput translates input (a string or a list of items) after
// history into chat messages. Assistant-side items in a row (reasoning,
// an assistant message, tool calls) make one assistant message, as K3
// renders a turn; a reasoning item after content or calls starts the
// next. A tool output must answer a call made before it.
func responsesInput(raw json.RawMessage, history []chat.Message, tools *responsesTools) ([]chat.Message, *apiError) {
	msgs := history
	if str, ok := rawString(raw); ok {
		return append(msgs, chat.Message{Role: chat.RoleUser, Content: str}), nil
	}
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, badRequest("input", "", "input must be a string or an array of items")
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
		p := itemParam("input", i)
		var it responsesItem
		if err := json.Unmarshal(r, &it); err != nil {
			return nil, badRequest(p, "", "%s is not a valid item: %s", p, jsonMessage(err))
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
				return nil, badRequest(p+".role", "", "%s.role %q is not supported (user, system, developer, assistant)", p, it.Role)
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
				text, ok = decodeReasoning(*it.EncryptedContent)
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
				return nil, badRequest(p+".call_id", "", "%s.call_id is required", p)
			}
			args := ""
			if it.Type == "custom_tool_call" {
				b, _ := json.Marshal(map[string]string{"input": it.Input})
				args = string(b)
			} else if a, ok := rawString(it.Arguments); ok {
				args = a
			} else if !isNull(it.Arguments) {
				args = string(it.Arguments)
			}
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: it.CallID, Type: "function",
				Function: chat.FunctionCall{Name: tools.flatName(it.Namespace, it.Name), Arguments: args}})
			calls[it.CallID] = true
		case "function_call_output", "custom_tool_call_output":
			if !calls[it.CallID] {
				return nil, badRequest(p+".call_id", "", "%s.call_id %q answers no function call made earlier in the conversation", p, it.CallID)
			}
			flush()
			out, e := responsesContent(p+".output", it.Output)
			if e != nil {
				return nil, e
			}
			out.Role, out.ToolCallID = chat.RoleTool, it.CallID
			msgs = append(msgs, out)
		case "":
			return nil, badRequest(p+".type", "", "%s.type is required", p)
		default:
			return nil, badRequest(p+".type", "", "%s.type %q is not supported (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning)", p, it.Type)
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
func responsesContent(param string, raw json.RawMessage) (chat.Message, *apiError) {
	var m chat.Message
	if str, ok := rawString(raw); ok {
		m.Content = str
		return m, nil
	}
	var parts []responsesPart
	if isNull(raw) || json.Unmarshal(raw, &parts) != nil {
		return m, badRequest(param, "", "%s must be a string or an array of content parts", param)
	}
	m.Parts = []chat.Part{}
	for k, pt := range parts {
		switch pt.Type {
		case "input_text", "output_text", "text":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: pt.Text})
		case "refusal":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: pt.Refusal})
		case "input_image", "input_file", "input_audio":
			return m, badRequest(fmt.Sprintf("%s[%d].type", param, k), "", "%s[%d] is %s: this server reads text only (Kimi K3 here has no vision or file input)", param, k, pt.Type)
		default:
			return m, badRequest(fmt.Sprintf("%s[%d].type", param, k), "", "%s[%d].type %q is not supported (input_text, output_text, refusal)", param, k, pt.Type)
		}
	}
	return m, nil
}

// responsesToolChoice reads tool_choice: "none", "auto", "required", a
// function or custom tool by name, allowed_tools (its mode; the list
// does not narrow the tools declared), or a hosted tool (dropped, so
// auto).
func responsesToolChoice(raw json.RawMessage, tools *responsesTools) (toolChoice, *apiError) {
	if isNull(raw) {
		return toolChoice{}, nil
	}
	if str, ok := rawString(raw); ok {
		switch str {
		case "none", "auto", "required":
			return toolChoice{mode: str}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "", "tool_choice %q is not supported (none, auto, required, or an object)", str)
	}
	var o struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Mode      string `json:"mode"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return toolChoice{}, badRequest("tool_choice", "", "tool_choice must be a string or an object")
	}
	switch o.Type {
	case "function", "custom":
		if o.Name == "" {
			return toolChoice{}, badRequest("tool_choice.name", "", "tool_choice.name is required")
		}
		return toolChoice{mode: chat.ToolChoiceRequired, name: tools.flatName(o.Namespace, o.Name)}, nil
	case "allowed_tools":
		switch o.Mode {
		case "auto", "required":
			return toolChoice{mode: o.Mode}, nil
		}
		return toolChoice{}, badRequest("tool_choice.mode", "", "tool_choice.mode must be auto or required")
	case "":
		return toolChoice{}, badRequest("tool_choice.type", "", "tool_choice.type is required")
	}
	return toolChoice{mode: chat.ToolChoiceAuto}, nil
}

// responsesTurn translates a Responses request, after the history of its
// previous response, into the internal turn.
func (s *Server) responsesTurn(req *responsesRequest, prev *storedResponse) (*turn, *responsesTools, *apiError) {
	switch {
	case req.Background != nil && *req.Background:
		return nil, nil, unsupported("background", "background responses are not supported by this server; send the request and wait (or stream it)")
	case !isNull(req.Conversation):
		return nil, nil, unsupported("conversation", "the Conversations API is not supported by this server; use previous_response_id or send the whole input")
	case !isNull(req.Prompt):
		return nil, nil, unsupported("prompt", "prompt templates are not supported by this server; send instructions and input")
	case req.TopLogprobs != nil && *req.TopLogprobs > 0:
		return nil, nil, unsupported("top_logprobs", "top_logprobs is not supported on /v1/responses; /v1/chat/completions has logprobs")
	}
	switch req.Truncation {
	case "", "disabled", "auto":
	default:
		return nil, nil, badRequest("truncation", "", "truncation must be auto or disabled")
	}
	tools, e := s.translateTools(req.Tools)
	if e != nil {
		return nil, nil, e
	}
	t := &turn{tools: toolsJSON(tools.decl), params: params{Model: req.Model, Temperature: req.Temperature, TopP: req.TopP},
		maxTokens: req.MaxOutputTokens, maxParam: "max_output_tokens", clampMax: true, formatParam: "text.format", cacheKey: req.PromptCacheKey}
	var msgs []chat.Message
	if !isNull(req.Instructions) {
		str, ok := rawString(req.Instructions)
		if !ok {
			return nil, nil, badRequest("instructions", "", "instructions must be a string")
		}
		if str != "" {
			msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: str})
		}
	}
	if prev != nil {
		msgs = append(msgs, prev.history...)
		if t.cacheKey == "" {
			t.cacheKey = prev.conversation
		}
	}
	if t.msgs, e = responsesInput(req.Input, msgs, tools); e != nil {
		return nil, nil, e
	}
	if t.toolChoice, e = responsesToolChoice(req.ToolChoice, tools); e != nil {
		return nil, nil, e
	}
	t.oneCall = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	if r := req.Reasoning; r != nil && r.Effort != nil && *r.Effort != "" {
		switch eff := *r.Effort; eff {
		case "none":
			t.noThinking = true
		default:
			var ok bool
			if t.effort, ok = effortFor(eff); !ok {
				return nil, nil, badRequest("reasoning.effort", "", "reasoning.effort %q is not supported (none, minimal, low, medium, high, xhigh)", eff)
			}
		}
	}
	if req.Text != nil && !isNull(req.Text.Format) {
		var f chat.ResponseFormat
		if json.Unmarshal(req.Text.Format, &f) != nil {
			return nil, nil, badRequest("text.format", "", "text.format must be an object with a type")
		}
		// json_schema's name, schema and strict sit beside its type here;
		// the renderer finds the schema in the object itself.
		f.JSONSchema = req.Text.Format
		t.format = &f
	}
	return t, tools, nil
}

// historyOf is the conversation a stored response continues: the turn's
// messages without the instructions, and the reply.
func historyOf(t *turn, hasInstructions bool, reply chat.Message) []chat.Message {
	msgs := t.msgs
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

// responseNotFound is the 404 of a response id the store does not hold.
func responseNotFound(param, id string) *apiError {
	return notFound(param, "not_found", "no response with id %q: it was never stored (store: false), was deleted, or was evicted (the server keeps a bounded number, --stored-responses)", id)
}
