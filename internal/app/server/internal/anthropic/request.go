// Package anthropic translates Anthropic's Messages API (POST
// /v1/messages and /v1/messages/count_tokens) to and from the server's
// internal turn: the request body into a wire.Turn (Turn), a turn's
// deltas into a reply or its stream of events (Reply), an error into
// Anthropic's error shape (ErrorBody). The HTTP handlers stay in the
// server package, which runs the turn.
package anthropic

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// Request is a POST /v1/messages (or /v1/messages/count_tokens)
// body: Anthropic's Messages API. Every documented field is listed; those
// with no meaning here are accepted and ignored (see the server's decodeAgent).
type Request struct {
	Model         string            `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	Messages      []json.RawMessage `json:"messages"`
	System        json.RawMessage   `json:"system"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	StopSequences []string          `json:"stop_sequences"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Stream        bool              `json:"stream"`
	Thinking      json.RawMessage   `json:"thinking"`
	OutputConfig  *struct {
		Effort string          `json:"effort"`
		Format json.RawMessage `json:"format"`
	} `json:"output_config"`
	OutputFormat json.RawMessage `json:"output_format"` // the beta's name for output_config.format
	// Refused unless empty: the server cannot reach MCP servers.
	MCPServers json.RawMessage `json:"mcp_servers"`
	// Accepted, no effect here.
	Metadata            json.RawMessage `json:"metadata"`
	ContextManagement   json.RawMessage `json:"context_management"`
	CacheControl        json.RawMessage `json:"cache_control"`
	Container           json.RawMessage `json:"container"`
	ServiceTier         string          `json:"service_tier"`
	InferenceGeo        string          `json:"inference_geo"`
	Speed               string          `json:"speed"`
	Diagnostics         json.RawMessage `json:"diagnostics"`
	BillingPolicy       json.RawMessage `json:"billing_policy"`
	Compaction          json.RawMessage `json:"compaction"`
	Fallbacks           json.RawMessage `json:"fallbacks"`
	FallbackCreditToken json.RawMessage `json:"fallback_credit_token"`
	Thread              json.RawMessage `json:"thread"`
}

// anthropicTool is a tool of a Messages request: a custom tool (type
// absent or "custom"), or one of Anthropic's server or client tools
// (bash_20250124, web_search_20250305, ...), which K3 has no schema for:
// dropped, each type logged once.
type anthropicTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	Strict       *bool           `json:"strict"`
	DeferLoading bool            `json:"defer_loading"`
}

// anthropicBlock is a content block: text, tool_use, tool_result,
// thinking, redacted_thinking, tool_reference (in a tool result).
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	ToolName  string          `json:"tool_name"`
}

// toolSet is a request's tools: those declared up front, and the
// deferred ones (defer_loading), declared when a tool result references
// them, as Anthropic's tool search loads them.
type toolSet struct {
	decl     []wire.FunctionTool
	deferred map[string]wire.FunctionTool
}

func readTools(raw []json.RawMessage, note Note) (*toolSet, *wire.APIError) {
	ts := &toolSet{deferred: map[string]wire.FunctionTool{}}
	seen := map[string]bool{}
	for i, r := range raw {
		var t anthropicTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, wire.BadRequest(wire.ItemParam("tools", i), "", "tools.%d is not a valid tool: %s", i, wire.JSONMessage(err))
		}
		if t.Type != "" && t.Type != "custom" {
			note("messages tool "+t.Type, "dropping an Anthropic-defined tool: K3 has no schema for it", slog.String("type", t.Type))
			continue
		}
		if t.Name == "" {
			return nil, wire.BadRequest(fmt.Sprintf("tools[%d].name", i), "", "tools.%d.name is required", i)
		}
		if seen[t.Name] {
			return nil, wire.BadRequest(wire.ItemParam("tools", i), "", "tools.%d: two tools are named %q", i, t.Name)
		}
		seen[t.Name] = true
		ft := wire.FunctionTool{Type: "function", Function: wire.FunctionSchema{Name: t.Name, Description: t.Description, Parameters: t.InputSchema, Strict: t.Strict}}
		if t.DeferLoading {
			ts.deferred[t.Name] = ft
		} else {
			ts.decl = append(ts.decl, ft)
		}
	}
	return ts, nil
}

// messagesSystem reads system: a string or text blocks (one segment each).
func messagesSystem(raw json.RawMessage) ([]chat.Message, *wire.APIError) {
	if wire.IsNull(raw) {
		return nil, nil
	}
	m, e := anthropicText("system", raw)
	if e != nil {
		return nil, e
	}
	m.Role = chat.RoleSystem
	return []chat.Message{m}, nil
}

// anthropicText reads content that may only be text: a string or text
// blocks.
func anthropicText(param string, raw json.RawMessage) (chat.Message, *wire.APIError) {
	var m chat.Message
	if str, ok := wire.RawString(raw); ok {
		m.Content = str
		return m, nil
	}
	var blocks []anthropicBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return m, wire.BadRequest(param, "", "%s must be a string or an array of text blocks", param)
	}
	m.Parts = []chat.Part{}
	for k, b := range blocks {
		if b.Type != "text" {
			return m, blockError(fmt.Sprintf("%s.%d", param, k), b.Type, "text")
		}
		m.Parts = append(m.Parts, chat.Part{Type: "text", Text: b.Text})
	}
	return m, nil
}

// blockError refuses a block of type typ where only want are taken;
// images and documents are refused as such.
func blockError(param, typ, want string) *wire.APIError {
	switch typ {
	case "image", "document", "search_result", "file":
		return wire.BadRequest(param+".type", "", "%s is a %s block: this server reads text only (Kimi K3 here has no vision or document input)", param, typ)
	case "":
		return wire.BadRequest(param+".type", "", "%s.type is required", param)
	}
	return wire.BadRequest(param+".type", "", "%s.type %q is not supported here (%s)", param, typ, want)
}

// messagesConversation translates messages into chat messages: user
// text, and tool results (in order, before the user's text, as Anthropic
// requires them first); assistant thinking, text and tool_use; system
// turns in the conversation (Claude Code sends some). A tool_result must
// answer a tool_use made before it; a tool_reference in it declares the
// deferred tool it names.
func messagesConversation(raw []json.RawMessage, tools *toolSet) ([]chat.Message, *wire.APIError) {
	if len(raw) == 0 {
		return nil, wire.BadRequest("messages", "", "messages: at least one message is required")
	}
	var msgs []chat.Message
	uses := map[string]string{} // tool_use id -> tool name
	for i, r := range raw {
		p := fmt.Sprintf("messages.%d", i)
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, wire.BadRequest(wire.ItemParam("messages", i), "", "%s is not a valid message: %s", p, wire.JSONMessage(err))
		}
		switch m.Role {
		case chat.RoleUser, chat.RoleAssistant, chat.RoleSystem:
		default:
			return nil, wire.BadRequest(wire.ItemParam("messages", i)+".role", "", "%s.role %q is not supported (user, assistant)", p, m.Role)
		}
		if str, ok := wire.RawString(m.Content); ok {
			msgs = append(msgs, chat.Message{Role: m.Role, Content: str})
			continue
		}
		var blocks []anthropicBlock
		if wire.IsNull(m.Content) || json.Unmarshal(m.Content, &blocks) != nil {
			return nil, wire.BadRequest(wire.ItemParam("messages", i)+".content", "", "%s.content must be a string or an array of content blocks", p)
		}
		if m.Role == chat.RoleSystem {
			sm, e := anthropicText(p+".content", m.Content)
			if e != nil {
				return nil, e
			}
			sm.Role = chat.RoleSystem
			msgs = append(msgs, sm)
			continue
		}
		if m.Role == chat.RoleAssistant {
			a := chat.Message{Role: chat.RoleAssistant}
			for k, b := range blocks {
				bp := fmt.Sprintf("%s.content.%d", p, k)
				switch b.Type {
				case "text":
					a.Parts = append(a.Parts, chat.Part{Type: "text", Text: b.Text})
				case "thinking":
					text, ok := wire.DecodeReasoning(b.Signature)
					if !ok {
						text = b.Thinking
					}
					a.ReasoningContent += text
				case "redacted_thinking":
					// Another server's encrypted reasoning: nothing K3 can read.
				case "tool_use":
					if b.ID == "" || b.Name == "" {
						return nil, wire.BadRequest(bp, "", "%s: a tool_use needs an id and a name", bp)
					}
					args := "{}"
					if !wire.IsNull(b.Input) {
						args = string(b.Input)
					}
					a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: b.ID, Type: "function", Function: chat.FunctionCall{Name: b.Name, Arguments: args}})
					uses[b.ID] = b.Name
				default:
					return nil, blockError(bp, b.Type, "text, thinking, redacted_thinking, tool_use")
				}
			}
			if len(a.Parts) == 1 {
				a.Content, a.Parts = a.Parts[0].Text, nil
			}
			msgs = append(msgs, a)
			continue
		}
		var results []chat.Message
		var loaded json.RawMessage
		user := chat.Message{Role: chat.RoleUser}
		for k, b := range blocks {
			bp := fmt.Sprintf("%s.content.%d", p, k)
			switch b.Type {
			case "text":
				user.Parts = append(user.Parts, chat.Part{Type: "text", Text: b.Text})
			case "tool_result":
				if _, ok := uses[b.ToolUseID]; !ok {
					return nil, wire.BadRequest(wire.ItemParam("messages", i)+".content", "", "%s.tool_use_id %q answers no tool_use made earlier in the conversation", bp, b.ToolUseID)
				}
				res, refs, e := toolResult(bp, b.Content)
				if e != nil {
					return nil, e
				}
				res.Role, res.ToolCallID = chat.RoleTool, b.ToolUseID
				results = append(results, res)
				var decl []wire.FunctionTool
				for _, name := range refs {
					if t, ok := tools.deferred[name]; ok {
						decl = append(decl, t)
						delete(tools.deferred, name)
					}
				}
				if len(decl) > 0 {
					loaded = wire.ToolsJSON(decl)
				}
			default:
				return nil, blockError(bp, b.Type, "text, tool_result")
			}
		}
		msgs = append(msgs, results...)
		if loaded != nil {
			msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Tools: loaded})
		}
		if len(user.Parts) > 0 || len(results) == 0 {
			if len(user.Parts) == 1 {
				user.Content, user.Parts = user.Parts[0].Text, nil
			}
			msgs = append(msgs, user)
		}
	}
	return msgs, nil
}

// toolResult reads a tool_result's content: a string, or blocks of text
// (one segment each) and tool_reference (the tool's name; returned in
// refs).
func toolResult(param string, raw json.RawMessage) (m chat.Message, refs []string, e *wire.APIError) {
	if wire.IsNull(raw) {
		return m, nil, nil
	}
	if str, ok := wire.RawString(raw); ok {
		m.Content = str
		return m, nil, nil
	}
	var blocks []anthropicBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return m, nil, wire.BadRequest(param+".content", "", "%s.content must be a string or an array of blocks", param)
	}
	for k, b := range blocks {
		switch b.Type {
		case "text":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: b.Text})
		case "tool_reference":
			m.Parts = append(m.Parts, chat.Part{Type: "text", Text: "Tool loaded: " + b.ToolName})
			refs = append(refs, b.ToolName)
		default:
			return m, nil, blockError(fmt.Sprintf("%s.content.%d", param, k), b.Type, "text, tool_reference")
		}
	}
	if len(m.Parts) == 1 {
		m.Content, m.Parts = m.Parts[0].Text, nil
	}
	return m, refs, nil
}

// thinkingFor maps thinking and output_config.effort onto K3's thinking
// and effort. disabled is off, and so is an absent thinking (Anthropic's
// default). enabled, adaptive and between_tools are on, at
// output_config.effort (low: low; medium and high: high; xhigh and max:
// max); without one, enabled goes by budget_tokens (under 4096: low,
// under 16384: high, else max) and the others take K3's default (max).
// The K3 API's thinking options are taken too: true and false, a type
// left out (enabled), keep ("all") and effort (low, high or max, which
// wins over output_config.effort and budget_tokens).
func thinkingFor(raw json.RawMessage, effort string) (off bool, k3Effort string, display string, e *wire.APIError) {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "false":
		return true, "", "", nil
	case "true":
		raw = json.RawMessage("{}")
	}
	var th struct {
		Type         *string         `json:"type"`
		BudgetTokens *int            `json:"budget_tokens"`
		Display      string          `json:"display"`
		Keep         json.RawMessage `json:"keep"`
		Effort       json.RawMessage `json:"effort"`
	}
	if json.Unmarshal(raw, &th) != nil {
		return false, "", "", wire.BadRequest("thinking", "", "thinking must be true, false or an object with a type")
	}
	typ := "enabled"
	if th.Type != nil {
		typ = *th.Type
	}
	switch typ {
	case "disabled":
		return true, "", "", nil
	case "enabled", "adaptive", "between_tools":
	default:
		return false, "", "", wire.BadRequest("thinking.type", "", "thinking.type %q is not supported (enabled, adaptive, between_tools, disabled)", typ)
	}
	if e := wire.CheckKeep("thinking.keep", th.Keep); e != nil {
		return false, "", "", e
	}
	k3Effort, e = wire.ThinkingEffort("thinking.effort", th.Effort)
	if e != nil || k3Effort != "" {
		return false, k3Effort, th.Display, e
	}
	if effort != "" {
		eff, ok := wire.EffortFor(effort)
		if !ok {
			return false, "", "", wire.BadRequest("output_config.effort", "", "output_config.effort %q is not supported (low, medium, high, xhigh, max)", effort)
		}
		return false, eff, th.Display, nil
	}
	if th.Type != nil && typ == "enabled" {
		if th.BudgetTokens == nil || *th.BudgetTokens < 1 {
			return false, "", "", wire.BadRequest("thinking.budget_tokens", "", "thinking.budget_tokens is required with thinking enabled, and must be positive")
		}
		switch n := *th.BudgetTokens; {
		case n < 4096:
			return false, chat.EffortLow, th.Display, nil
		case n < 16384:
			return false, chat.EffortHigh, th.Display, nil
		}
		return false, chat.EffortMax, th.Display, nil
	}
	return false, "", th.Display, nil
}

// messagesToolChoice reads tool_choice: auto, any (required), tool (that
// one), none; disable_parallel_tool_use allows one call per reply.
func messagesToolChoice(raw json.RawMessage) (wire.ToolChoice, bool, *wire.APIError) {
	if wire.IsNull(raw) {
		return wire.ToolChoice{}, false, nil
	}
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if json.Unmarshal(raw, &tc) != nil {
		return wire.ToolChoice{}, false, wire.BadRequest("tool_choice", "", "tool_choice must be an object with a type")
	}
	switch tc.Type {
	case "auto", "none":
		return wire.ToolChoice{Mode: tc.Type}, tc.DisableParallelToolUse, nil
	case "any":
		return wire.ToolChoice{Mode: chat.ToolChoiceRequired}, tc.DisableParallelToolUse, nil
	case "tool":
		if tc.Name == "" {
			return wire.ToolChoice{}, false, wire.BadRequest("tool_choice.name", "", "tool_choice.name is required with type tool")
		}
		return wire.ToolChoice{Mode: chat.ToolChoiceRequired, Name: tc.Name}, tc.DisableParallelToolUse, nil
	}
	return wire.ToolChoice{}, false, wire.BadRequest("tool_choice.type", "", "tool_choice.type %q is not supported (auto, any, tool, none)", tc.Type)
}

// Turn translates a Messages request into the internal turn (counting:
// for count_tokens, which needs no max_tokens); note logs what is dropped;
// display is thinking.display ("omitted" leaves the thinking text out of
// the reply, its signature still carrying it).
func Turn(req *Request, counting bool, note Note) (*wire.Turn, string, *wire.APIError) {
	if !counting && req.MaxTokens == nil {
		return nil, "", wire.BadRequest("max_tokens", "", "max_tokens: Field required")
	}
	if t := strings.TrimSpace(string(req.MCPServers)); t != "" && t != "null" && t != "[]" {
		return nil, "", wire.Unsupported("mcp_servers", "mcp_servers is not supported: this server cannot reach MCP servers; run them in the client")
	}
	for i, st := range req.StopSequences {
		if st == "" {
			return nil, "", wire.BadRequest(wire.ItemParam("stop_sequences", i), "", "stop_sequences.%d must not be empty", i)
		}
	}
	tools, e := readTools(req.Tools, note)
	if e != nil {
		return nil, "", e
	}
	t := &wire.Turn{Params: wire.Params{Model: req.Model, Temperature: req.Temperature, TopP: req.TopP},
		MaxTokens: req.MaxTokens, MaxParam: "max_tokens", ClampMax: true, Stop: req.StopSequences, FormatParam: "output_config.format"}
	if req.TopK != nil {
		t.Params.TopK = *req.TopK
	}
	if t.Msgs, e = messagesSystem(req.System); e != nil {
		return nil, "", e
	}
	conv, e := messagesConversation(req.Messages, tools)
	if e != nil {
		return nil, "", e
	}
	t.Msgs = append(t.Msgs, conv...)
	t.Tools = wire.ToolsJSON(tools.decl)
	if t.ToolChoice, t.OneCall, e = messagesToolChoice(req.ToolChoice); e != nil {
		return nil, "", e
	}
	var effort string
	format := req.OutputFormat
	if oc := req.OutputConfig; oc != nil {
		effort = oc.Effort
		if !wire.IsNull(oc.Format) {
			format = oc.Format
		}
	}
	var display string
	if t.NoThinking, t.Effort, display, e = thinkingFor(req.Thinking, effort); e != nil {
		return nil, "", e
	}
	if !wire.IsNull(format) {
		var f chat.ResponseFormat
		if json.Unmarshal(format, &f) != nil {
			return nil, "", wire.BadRequest("output_config.format", "", "output_config.format must be an object with a type")
		}
		// Anthropic's json_schema holds its schema beside its type.
		f.JSONSchema = format
		t.Format = &f
		if f.Type == "json_schema" {
			var fields map[string]json.RawMessage
			json.Unmarshal(format, &fields)
			if e := wire.CheckSchemaFormat("output_config.format", fields, false); e != nil {
				return nil, "", e
			}
		}
	}
	return t, display, nil
}

// Note logs msg at Warn the first time key is seen (the server's
// noteOnce): what a request carries that the server drops is said once.
type Note func(key, msg string, attrs ...slog.Attr)
