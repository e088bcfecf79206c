package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
)

// chatRequest is a POST /v1/chat/completions body.
type chatRequest struct {
	params
	Messages            []json.RawMessage    `json:"messages"`
	MaxTokens           *int                 `json:"max_tokens"`
	MaxCompletionTokens *int                 `json:"max_completion_tokens"`
	Logprobs            bool                 `json:"logprobs"`
	Tools               json.RawMessage      `json:"tools"`
	ToolChoice          json.RawMessage      `json:"tool_choice"`
	ResponseFormat      *chat.ResponseFormat `json:"response_format"`
	ReasoningEffort     string               `json:"reasoning_effort"`
	Thinking            *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

type chatDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

// chatMessage is a reply: its content is null when the reply only calls
// tools.
type chatMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	Index    *int              `json:"index,omitempty"` // in stream deltas
	ID       string            `json:"id"`
	Type     string            `json:"type"`
	Function chat.FunctionCall `json:"function"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatDelta   `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

// chatMessages reads the messages: roles system (or developer), user,
// assistant (with reasoning_content and tool_calls) and tool; content a
// string or text parts.
func chatMessages(raw []json.RawMessage) ([]chat.Message, *apiError) {
	if len(raw) == 0 {
		return nil, badRequest("messages", "", "messages must not be empty")
	}
	msgs := make([]chat.Message, len(raw))
	for i, r := range raw {
		var m chat.Message
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, badRequest(fmt.Sprintf("messages[%d]", i), "", "%v", err)
		}
		switch m.Role {
		case "developer":
			m.Role = chat.RoleSystem
		case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant:
		case chat.RoleTool:
			if m.Tool == "" && m.Name != "" { // the legacy name of the function
				m.Tool, m.Name = m.Name, ""
			}
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "", "role %q is not supported (system, developer, user, assistant, tool)", m.Role)
		}
		for _, p := range m.Parts {
			if p.Type != "text" {
				return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "", "content parts of type %q are not supported", p.Type)
			}
		}
		msgs[i] = m
	}
	return msgs, nil
}

// chatOptions turns the request's tools, tool_choice, response_format,
// reasoning_effort and thinking into rendering options, with the defaults
// of the release's apply_chat_template (thinking on, effort max).
func chatOptions(req *chatRequest) (chat.Options, *apiError) {
	var o chat.Options
	if t := bytes.TrimSpace(req.Tools); len(t) > 0 && string(t) != "null" {
		if t[0] != '[' {
			return o, badRequest("tools", "", "tools must be an array")
		}
		o.Tools = req.Tools
	}
	tc, err := chat.ParseToolChoice(req.ToolChoice)
	if err != nil {
		return o, badRequest("tool_choice", "", "tool_choice must be \"auto\", \"none\", \"required\" or a function")
	}
	switch tc {
	case "", chat.ToolChoiceAuto, chat.ToolChoiceNone, chat.ToolChoiceRequired:
	default:
		return o, badRequest("tool_choice", "", "tool_choice %q is not supported (auto, none, required)", tc)
	}
	o.ToolChoice = tc
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "json_object", "json_schema":
		default:
			return o, badRequest("response_format.type", "", "response_format type %q is not supported (text, json_object, json_schema)", rf.Type)
		}
		o.ResponseFormat = rf
	}
	if req.Thinking != nil {
		switch req.Thinking.Type {
		case "enabled":
		case "disabled":
			o.NoThinking = true
		default:
			return o, badRequest("thinking.type", "", "thinking.type must be \"enabled\" or \"disabled\"")
		}
	}
	switch req.ReasoningEffort {
	case "":
	case chat.EffortLow, chat.EffortHigh, chat.EffortMax:
		if o.NoThinking {
			return o, badRequest("reasoning_effort", "", "reasoning_effort needs thinking (thinking is disabled)")
		}
		o.ThinkingEffort = req.ReasoningEffort
	default:
		return o, badRequest("reasoning_effort", "", "reasoning_effort %q is not supported (low, high, max)", req.ReasoningEffort)
	}
	return o.WithDefaults(), nil
}

// chatPrompt renders the messages in Kimi K3's chat format, as the
// release's apply_chat_template does. Contents are plain text:
// "<|end_of_msg|>" in a message is not a control token.
func (s *Server) chatPrompt(msgs []chat.Message, o chat.Options) ([]int, *apiError) {
	segs, err := chat.Render(msgs, o)
	if err != nil {
		if errors.Is(err, chat.ErrFormat) {
			return nil, badRequest("messages", "", "%v", err)
		}
		return nil, serverError(err)
	}
	ids, err := chat.Encode(s.tok, segs)
	if err != nil {
		return nil, serverError(err)
	}
	return ids, nil
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if e := decode(w, r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	if req.Logprobs {
		writeAPIError(w, badRequest("logprobs", "", "logprobs are not supported"))
		return
	}
	msgs, e := chatMessages(req.Messages)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	copts, e := chatOptions(&req)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	prompt, e := s.chatPrompt(msgs, copts)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	opts, e := s.options(&req.params, len(prompt), maxTokens, math.MaxInt)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	opts.StopTokens = slices.Clone(s.chatStops)
	p, err := chat.NewParser(s.tok, copts.Thinking())
	if err != nil {
		writeAPIError(w, serverError(err))
		return
	}
	callID := newID("call_")
	calls := func(cs []chat.ToolCall, stream bool) []toolCall {
		var out []toolCall
		for _, c := range cs {
			k := len(out)
			tc := toolCall{ID: fmt.Sprintf("%s_%d", callID, k), Type: "function", Function: c.Function}
			if stream {
				tc.Index = &k
			}
			out = append(out, tc)
		}
		return out
	}
	finish := func(res *result) *string {
		f := res.finish
		if len(p.Message().ToolCalls) > 0 {
			f = "tool_calls"
		}
		return &f
	}
	resp := chatResponse{ID: newID("chatcmpl-"), Created: time.Now().Unix(), Model: s.name}
	if !req.Stream {
		res, err := s.generate(r.Context(), prompt, opts, func(t k3.Token) error { p.Write(t.ID); return nil })
		if err != nil {
			writeAPIError(w, serverError(err))
			return
		}
		p.Finish()
		m := p.Message()
		msg := &chatMessage{Role: "assistant", ToolCalls: calls(m.ToolCalls, false)}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			msg.Content = &m.Content
		}
		if m.ReasoningContent != "" {
			msg.ReasoningContent = &m.ReasoningContent
		}
		resp.Object = "chat.completion"
		resp.Choices = []chatChoice{{Message: msg, FinishReason: finish(res)}}
		resp.Usage = res.usage()
		writeJSON(w, http.StatusOK, resp)
		return
	}
	resp.Object = "chat.completion.chunk"
	stream := startSSE(w)
	chunk := func(d chatDelta, finish *string) error {
		resp.Choices = []chatChoice{{Delta: &d, FinishReason: finish}}
		return stream.send(resp)
	}
	empty := ""
	if chunk(chatDelta{Role: "assistant", Content: &empty}, nil) != nil {
		return
	}
	ncalls := 0
	send := func(d chat.Delta) error {
		var cd chatDelta
		if d.Reasoning != "" {
			cd.ReasoningContent = &d.Reasoning
		}
		if d.Content != "" {
			cd.Content = &d.Content
		}
		if d.ToolCall != nil {
			k := ncalls
			ncalls++
			cd.ToolCalls = []toolCall{{Index: &k, ID: fmt.Sprintf("%s_%d", callID, k), Type: "function", Function: d.ToolCall.Function}}
		}
		if cd.ReasoningContent == nil && cd.Content == nil && cd.ToolCalls == nil {
			return nil
		}
		return chunk(cd, nil)
	}
	res, err := s.generate(r.Context(), prompt, opts, func(t k3.Token) error { return send(p.Write(t.ID)) })
	if err != nil {
		if r.Context().Err() == nil {
			stream.fail(err)
		}
		return
	}
	if send(p.Finish()) != nil {
		return
	}
	if chunk(chatDelta{}, finish(res)) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []chatChoice{}
		resp.Usage = res.usage()
		stream.send(resp)
	}
	stream.done()
}
