package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// chatRequest is a POST /v1/chat/completions body.
type chatRequest struct {
	wire.Params
	Messages            []json.RawMessage    `json:"messages"`
	MaxTokens           *int                 `json:"max_tokens"`
	MaxCompletionTokens *int                 `json:"max_completion_tokens"`
	Logprobs            bool                 `json:"logprobs"`
	TopLogprobs         *int                 `json:"top_logprobs"`
	ParallelToolCalls   *bool                `json:"parallel_tool_calls"`
	Tools               json.RawMessage      `json:"tools"`
	ToolChoice          json.RawMessage      `json:"tool_choice"`
	ResponseFormat      *chat.ResponseFormat `json:"response_format"`
	ReasoningEffort     string               `json:"reasoning_effort"`
	// PromptCacheKey groups requests that share a prefix: the access log
	// records it, for a router (the prefix cache itself needs no key).
	PromptCacheKey string `json:"prompt_cache_key"`
	// Thinking is the K3 API's thinking option (wire.ParseThinking):
	// {"type", "keep", "effort"}, or true or false.
	Thinking json.RawMessage `json:"thinking"`
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
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []chatChoice   `json:"choices"`
	Usage   *chatUsageJSON `json:"usage,omitempty"`
}

// chatUsageJSON is a chat completion's usage, with OpenAI's details:
// prompt tokens the prefix cache supplied and reasoning tokens.
type chatUsageJSON struct {
	usage
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func chatUsage(r *wire.TurnResult) *chatUsageJSON {
	u := &chatUsageJSON{usage: usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens()}}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails.CachedTokens = r.CachedTokens
	for _, c := range r.Choices {
		u.CompletionTokensDetails.ReasoningTokens += c.ReasoningTokens
	}
	return u
}

// chatMessages reads the messages: roles system (or developer), user,
// assistant (with reasoning_content and tool_calls) and tool; content a
// string or text parts.
func chatMessages(raw []json.RawMessage) ([]chat.Message, *wire.APIError) {
	if len(raw) == 0 {
		return nil, wire.BadRequest("messages", "", "messages must not be empty")
	}
	msgs := make([]chat.Message, len(raw))
	for i, r := range raw {
		var m chat.Message
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, wire.BadRequest(fmt.Sprintf("messages[%d]", i), "", "messages[%d] is not a valid message: %s", i, wire.JSONMessage(err))
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
			return nil, wire.BadRequest(fmt.Sprintf("messages[%d].role", i), "", "role %q is not supported (system, developer, user, assistant, tool)", m.Role)
		}
		for _, p := range m.Parts {
			if p.Type != "text" {
				return nil, wire.BadRequest(fmt.Sprintf("messages[%d].content", i), "", "content parts of type %q are not supported", p.Type)
			}
		}
		msgs[i] = m
	}
	return msgs, nil
}

// chatTurn translates a chat completions request into the internal turn:
// tools, tool_choice, response_format, parallel_tool_calls,
// reasoning_effort (K3's low, high, max) and thinking (the K3 API's
// {"type", "keep", "effort"}, or true or false; its effort wins over
// reasoning_effort).
func chatTurn(req *chatRequest, msgs []chat.Message) (*wire.Turn, *wire.APIError) {
	t := &wire.Turn{Msgs: msgs, Params: req.Params, Format: req.ResponseFormat, FormatParam: "response_format", MaxParam: "max_tokens",
		CacheKey: req.PromptCacheKey}
	// The contract's checks, before anything is rendered: tools,
	// dynamic tools and tool results, response_format (contract.go).
	names, declared := toolNames{}, 0
	toolsGiven := !wire.IsNull(req.Tools)
	if toolsGiven {
		k, e := checkTools("tools", req.Tools, false, names)
		if e != nil {
			return nil, e
		}
		declared += k
		t.Tools = req.Tools
	}
	k, e := checkMessages(msgs, names)
	if e != nil {
		return nil, e
	}
	declared += k
	if toolsGiven && declared == 0 && !wire.IsNull(req.ToolChoice) {
		return nil, wire.BadRequest("tools", "", "tools is empty: tool_choice needs at least one tool declared (declare tools, or leave tool_choice out)")
	}
	if e := checkResponseFormat(req.ResponseFormat); e != nil {
		return nil, e
	}
	tc, err := chat.ParseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, wire.BadRequest("tool_choice", "", "tool_choice must be \"auto\", \"none\", \"required\" or a function")
	}
	switch tc {
	case "", chat.ToolChoiceAuto, chat.ToolChoiceNone:
		t.ToolChoice.Mode = tc
	case chat.ToolChoiceRequired:
		t.ToolChoice.Mode = tc
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(req.ToolChoice, &named) == nil {
			t.ToolChoice.Name = named.Function.Name
		}
	default:
		return nil, wire.BadRequest("tool_choice", "", "tool_choice %q is not supported (auto, none, required)", tc)
	}
	t.OneCall = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	th, e := wire.ParseThinking("thinking", req.Thinking)
	if e != nil {
		return nil, e
	}
	t.NoThinking = th.Off
	switch req.ReasoningEffort {
	case "":
	case chat.EffortLow, chat.EffortHigh, chat.EffortMax:
		if t.NoThinking {
			return nil, wire.BadRequest("reasoning_effort", "", "reasoning_effort needs thinking (thinking is disabled)")
		}
		t.Effort = req.ReasoningEffort
	default:
		return nil, wire.BadRequest("reasoning_effort", "", "reasoning_effort %q is not supported (low, high, max)", req.ReasoningEffort)
	}
	if th.Effort != "" && !th.Off {
		// thinking.effort, when given, wins over reasoning_effort (as the
		// K3 API has it).
		t.Effort = th.Effort
	}
	t.MaxTokens = req.MaxCompletionTokens
	if t.MaxTokens == nil {
		t.MaxTokens = req.MaxTokens
	}
	return t, nil
}

// chatPrompt renders the messages in Kimi K3's chat format, as the
// release's apply_chat_template does. Contents are plain text:
// "<|end_of_msg|>" in a message is not a control token. counted is the
// prompt's length as the release's template counts it, which the APIs'
// usage reports: without the opening of the channel the answer starts in
// (<|open|>think<|sep|>, or <|open|>response<|sep|> with thinking off),
// which the server writes for the model but the K3 API counts as the
// answer's, not the prompt's.
func (s *Server) chatPrompt(msgs []chat.Message, o chat.Options) (ids []int, counted int, e *wire.APIError) {
	segs, err := chat.Render(msgs, o)
	if err != nil {
		if errors.Is(err, chat.ErrFormat) {
			return nil, 0, wire.BadRequest("messages", "", "%s", strings.TrimPrefix(err.Error(), "chat: "))
		}
		return nil, 0, s.serverError(err)
	}
	size := 0
	for _, sg := range segs {
		size += len(sg.Text)
	}
	if size > s.opts.MaxContext*s.maxTokenBytes {
		return nil, 0, wire.BadRequest("", "context_length_exceeded", "prompt is too long: %d bytes cannot fit the context of %d tokens (--max-context)", size, s.opts.MaxContext)
	}
	ids, err = chat.Encode(s.tok, segs)
	if err != nil {
		return nil, 0, s.serverError(err)
	}
	counted = len(ids)
	if n := len(segs); !o.NoGenerationPrompt && n >= 3 && segs[n-3] == (chat.Segment{Text: chat.TokOpen, Special: true}) {
		channel, err := chat.Encode(s.tok, segs[n-3:])
		if err != nil {
			return nil, 0, s.serverError(err)
		}
		counted -= len(channel)
	}
	return ids, counted, nil
}

// chatLogprob is one token's entry in a chat choice's logprobs.content.
type chatLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []chatTopOne `json:"top_logprobs"`
}

type chatTopOne struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal []chatLogprob `json:"refusal"`
}

func (s *Server) chatLogprobOf(t k3.Token) chatLogprob {
	text, b := s.tokenText(t.ID)
	e := chatLogprob{Token: text, Logprob: t.Logprob, Bytes: b, TopLogprobs: make([]chatTopOne, 0, len(t.TopLogprobs))}
	for _, a := range t.TopLogprobs {
		at, ab := s.tokenText(a.ID)
		e.TopLogprobs = append(e.TopLogprobs, chatTopOne{Token: at, Logprob: a.Logprob, Bytes: ab})
	}
	return e
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	s.admitted(w, r, func(r *http.Request) func(context.Context) {
		var req chatRequest
		if e := s.decode(w, r, &req); e != nil {
			writeAPIError(w, e)
			return nil
		}
		if req.TopLogprobs != nil {
			switch {
			case *req.TopLogprobs < 0 || *req.TopLogprobs > k3.MaxTopLogprobs:
				writeAPIError(w, wire.BadRequest("top_logprobs", "", "top_logprobs must be between 0 and %d", k3.MaxTopLogprobs))
				return nil
			case !req.Logprobs:
				writeAPIError(w, wire.BadRequest("top_logprobs", "", "top_logprobs needs logprobs: true"))
				return nil
			}
		}
		msgs, e := chatMessages(req.Messages)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		t, e := chatTurn(&req, msgs)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		p, e := s.prepare(t)
		if e != nil {
			writeAPIError(w, e)
			return nil
		}
		if req.Logprobs {
			p.opts.Logprobs = true
			if req.TopLogprobs != nil {
				p.opts.TopLogprobs = *req.TopLogprobs
			}
		}
		req.Messages, req.Tools, t.Msgs = nil, nil, nil // the body's memory goes before the request waits
		return func(ctx context.Context) { s.chat(ctx, w, &req, p) }
	})
}

func (s *Server) chat(ctx context.Context, w http.ResponseWriter, req *chatRequest, p *prepared) {
	n, opts := p.n, p.opts
	callID := wire.NewID("call_")
	id := func(i, k int) string { return fmt.Sprintf("%s_%d_%d", callID, i, k) }
	lps := make([]*chatLogprobs, n)
	if opts.Logprobs {
		for i := range lps {
			lps[i] = &chatLogprobs{Content: []chatLogprob{}}
		}
	}
	resp := chatResponse{ID: wire.NewID("chatcmpl-"), Created: time.Now().Unix(), Model: s.opts.Name}
	if !req.Stream {
		res, err := s.runTurn(ctx, p, func(i int, t k3.Token) {
			if opts.Logprobs && !isStop(&opts, t.ID) {
				lps[i].Content = append(lps[i].Content, s.chatLogprobOf(t))
			}
		}, func(int, chat.Delta) error { return nil })
		if err != nil {
			writeAPIError(w, s.serverError(err))
			return
		}
		resp.Object = "chat.completion"
		for i, c := range res.Choices {
			m := c.Msg
			msg := &chatMessage{Role: "assistant"}
			for k, call := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: id(i, k), Type: "function", Function: call.Function})
			}
			if c.Cut != nil {
				// Cut by max_tokens: the call so far, as OpenAI returns it.
				msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: id(i, len(m.ToolCalls)), Type: "function", Function: c.Cut.Function})
			}
			if m.Content != "" || len(msg.ToolCalls) == 0 {
				msg.Content = &m.Content
			}
			if m.ReasoningContent != "" {
				msg.ReasoningContent = &m.ReasoningContent
			}
			cc := chatChoice{Index: i, Message: msg, FinishReason: &c.Finish}
			if lps[i] != nil {
				cc.Logprobs = lps[i]
			}
			resp.Choices = append(resp.Choices, cc)
		}
		resp.Usage = chatUsage(res)
		wire.WriteJSON(w, http.StatusOK, resp)
		return
	}
	resp.Object = "chat.completion.chunk"
	stream := wire.StartSSE(w)
	chunk := func(i int, d chatDelta, lp *chatLogprobs, finish *string) error {
		c := chatChoice{Index: i, Delta: &d, FinishReason: finish}
		if lp != nil {
			c.Logprobs = lp
		}
		resp.Choices = []chatChoice{c}
		return stream.Send(resp)
	}
	empty := ""
	for i := range n {
		if chunk(i, chatDelta{Role: "assistant", Content: &empty}, nil, nil) != nil {
			return
		}
	}
	ncalls := make([]int, n)
	// held are logprobs of tokens whose text the parser has not released
	// yet: they go with the next chunk of that choice.
	held := make([][]chatLogprob, n)
	takeHeld := func(i int) *chatLogprobs {
		if len(held[i]) == 0 {
			return nil
		}
		lp := &chatLogprobs{Content: held[i]}
		held[i] = nil
		return lp
	}
	res, err := s.runTurn(ctx, p, func(i int, t k3.Token) {
		if opts.Logprobs && !isStop(&opts, t.ID) {
			held[i] = append(held[i], s.chatLogprobOf(t))
		}
	}, func(i int, d chat.Delta) error {
		var cd chatDelta
		if d.Reasoning != "" {
			cd.ReasoningContent = &d.Reasoning
		}
		if d.Content != "" {
			cd.Content = &d.Content
		}
		if d.ToolCall != nil {
			k := ncalls[i]
			ncalls[i]++
			cd.ToolCalls = []toolCall{{Index: &k, ID: id(i, k), Type: "function", Function: d.ToolCall.Function}}
		}
		return chunk(i, cd, takeHeld(i), nil)
	})
	if err != nil {
		if context.Cause(ctx) != context.Canceled {
			stream.Fail(s.serverError(err))
		}
		return
	}
	for i, c := range res.Choices {
		if c.Cut != nil {
			k := ncalls[i]
			cut := chatDelta{ToolCalls: []toolCall{{Index: &k, ID: id(i, k), Type: "function", Function: c.Cut.Function}}}
			if chunk(i, cut, nil, nil) != nil {
				return
			}
		}
		if chunk(i, chatDelta{}, takeHeld(i), &c.Finish) != nil {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		resp.Choices = []chatChoice{}
		resp.Usage = chatUsage(res)
		stream.Send(resp)
	}
	stream.Done()
}
