package responses

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// responseObject is a Responses API response.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       json.RawMessage   `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	Reasoning          responsesReason   `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *responseUsage    `json:"usage"`
	Metadata           json.RawMessage   `json:"metadata"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Output items.
type (
	reasoningItem struct {
		ID               string        `json:"id"`
		Type             string        `json:"type"`
		Status           string        `json:"status"`
		Summary          []summaryPart `json:"summary"`
		EncryptedContent *string       `json:"encrypted_content,omitempty"`
	}
	summaryPart struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	messageItem struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Status  string       `json:"status"`
		Role    string       `json:"role"`
		Content []outputText `json:"content"`
	}
	outputText struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Annotations []any  `json:"annotations"`
		Logprobs    []any  `json:"logprobs"`
	}
	functionCallItem struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
		Arguments string `json:"arguments"`
	}
	customCallItem struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
		Input     string `json:"input"`
	}
)

// Reply builds a response from a turn's deltas, and streams it as
// Responses events when stream is set: one item per run of reasoning
// (as summary text), content (an output_text message) or tool call.
type Reply struct {
	resp      responseObject
	tools     *Tools
	encrypted bool // include reasoning.encrypted_content
	stream    *wire.SSE
	seq       int
	cur       *openItem
	callIDs   []string // of the reply's tool calls, in order
}

type openItem struct {
	kind  string // "reasoning" or "message"
	id    string
	index int
	text  strings.Builder
}

func (o *Reply) emit(typ string, fields map[string]any) error {
	if o.stream == nil {
		return nil
	}
	fields["type"], fields["sequence_number"] = typ, o.seq
	o.seq++
	return o.stream.Event(typ, fields)
}

// Start sends the stream's first events: response.created and
// response.in_progress.
func (o *Reply) Start() error {
	if err := o.emit("response.created", map[string]any{"response": o.resp}); err != nil {
		return err
	}
	return o.emit("response.in_progress", map[string]any{"response": o.resp})
}

// Delta adds what one token added to the reply.
func (o *Reply) Delta(d chat.Delta) error {
	if d.Reasoning != "" {
		if err := o.open("reasoning"); err != nil {
			return err
		}
		o.cur.text.WriteString(d.Reasoning)
		if err := o.emit("response.reasoning_summary_text.delta", map[string]any{"item_id": o.cur.id, "output_index": o.cur.index, "summary_index": 0, "delta": d.Reasoning}); err != nil {
			return err
		}
	}
	if d.Content != "" {
		if err := o.open("message"); err != nil {
			return err
		}
		o.cur.text.WriteString(d.Content)
		if err := o.emit("response.output_text.delta", map[string]any{"item_id": o.cur.id, "output_index": o.cur.index, "content_index": 0, "delta": d.Content, "logprobs": []any{}}); err != nil {
			return err
		}
	}
	if d.ToolCall != nil {
		if err := o.closeItem("completed"); err != nil {
			return err
		}
		return o.call(d.ToolCall.Function, "completed")
	}
	return nil
}

// open starts an item of kind unless one is open.
func (o *Reply) open(kind string) error {
	if o.cur != nil && o.cur.kind == kind {
		return nil
	}
	if err := o.closeItem("completed"); err != nil {
		return err
	}
	it := &openItem{kind: kind, index: len(o.resp.Output)}
	o.cur = it
	if kind == "reasoning" {
		it.id = wire.NewID("rs_")
		if err := o.emit("response.output_item.added", map[string]any{"output_index": it.index,
			"item": reasoningItem{ID: it.id, Type: "reasoning", Status: "in_progress", Summary: []summaryPart{}}}); err != nil {
			return err
		}
		return o.emit("response.reasoning_summary_part.added", map[string]any{"item_id": it.id, "output_index": it.index, "summary_index": 0,
			"part": summaryPart{Type: "summary_text"}})
	}
	it.id = wire.NewID("msg_")
	if err := o.emit("response.output_item.added", map[string]any{"output_index": it.index,
		"item": messageItem{ID: it.id, Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}}); err != nil {
		return err
	}
	return o.emit("response.content_part.added", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0,
		"part": outputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}})
}

// closeItem ends the open item, if any, with status.
func (o *Reply) closeItem(status string) error {
	it := o.cur
	if it == nil {
		return nil
	}
	o.cur = nil
	text := it.text.String()
	var item any
	if it.kind == "reasoning" {
		part := summaryPart{Type: "summary_text", Text: text}
		ri := reasoningItem{ID: it.id, Type: "reasoning", Status: status, Summary: []summaryPart{part}}
		if o.encrypted {
			enc := wire.EncodeReasoning(text)
			ri.EncryptedContent = &enc
		}
		item = ri
		if err := o.emit("response.reasoning_summary_text.done", map[string]any{"item_id": it.id, "output_index": it.index, "summary_index": 0, "text": text}); err != nil {
			return err
		}
		if err := o.emit("response.reasoning_summary_part.done", map[string]any{"item_id": it.id, "output_index": it.index, "summary_index": 0, "part": part}); err != nil {
			return err
		}
	} else {
		part := outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
		item = messageItem{ID: it.id, Type: "message", Status: status, Role: "assistant", Content: []outputText{part}}
		if err := o.emit("response.output_text.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "text": text, "logprobs": []any{}}); err != nil {
			return err
		}
		if err := o.emit("response.content_part.done", map[string]any{"item_id": it.id, "output_index": it.index, "content_index": 0, "part": part}); err != nil {
			return err
		}
	}
	o.resp.Output = append(o.resp.Output, item)
	return o.emit("response.output_item.done", map[string]any{"output_index": it.index, "item": item})
}

// call adds a tool call item: a function_call, or a custom_tool_call for
// a custom tool (its "input" argument as the input), under the API's
// name and namespace of the tool, with status: completed, or incomplete
// for a call max_output_tokens cut (its arguments the JSON text so far,
// a custom call's input the text so far).
func (o *Reply) call(f chat.FunctionCall, status string) error {
	ref, known := o.tools.byFlat[f.Name]
	name, ns := f.Name, ""
	if known {
		name, ns = ref.name, ref.namespace
	}
	callID := wire.NewID("call_")
	o.callIDs = append(o.callIDs, callID)
	index := len(o.resp.Output)
	if known && ref.custom {
		input := f.Arguments
		var args struct {
			Input *string `json:"input"`
		}
		if json.Unmarshal([]byte(f.Arguments), &args) == nil && args.Input != nil {
			input = *args.Input
		} else if s, ok := cutString(f.Arguments, "input"); ok {
			input = s
		}
		it := customCallItem{ID: wire.NewID("ctc_"), Type: "custom_tool_call", Status: "in_progress", CallID: callID, Name: name, Namespace: ns}
		if err := o.emit("response.output_item.added", map[string]any{"output_index": index, "item": it}); err != nil {
			return err
		}
		if err := o.emit("response.custom_tool_call_input.delta", map[string]any{"item_id": it.ID, "output_index": index, "delta": input}); err != nil {
			return err
		}
		if err := o.emit("response.custom_tool_call_input.done", map[string]any{"item_id": it.ID, "output_index": index, "input": input}); err != nil {
			return err
		}
		it.Status, it.Input = status, input
		o.resp.Output = append(o.resp.Output, it)
		return o.emit("response.output_item.done", map[string]any{"output_index": index, "item": it})
	}
	it := functionCallItem{ID: wire.NewID("fc_"), Type: "function_call", Status: "in_progress", CallID: callID, Name: name, Namespace: ns}
	if err := o.emit("response.output_item.added", map[string]any{"output_index": index, "item": it}); err != nil {
		return err
	}
	if err := o.emit("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": index, "delta": f.Arguments}); err != nil {
		return err
	}
	if err := o.emit("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": index, "name": name, "arguments": f.Arguments}); err != nil {
		return err
	}
	it.Status, it.Arguments = status, f.Arguments
	o.resp.Output = append(o.resp.Output, it)
	return o.emit("response.output_item.done", map[string]any{"output_index": index, "item": it})
}

// Finish closes the response with the turn's result: completed, or
// incomplete when max_output_tokens (or the context) cut it. end sends
// the last event.
func (o *Reply) Finish(res *wire.TurnResult) error {
	c := res.Choices[0]
	status := "completed"
	if c.Finish == "length" {
		status = "incomplete"
		o.resp.IncompleteDetails = &incomplete{Reason: "max_output_tokens"}
	}
	if c.Cut != nil {
		// The items before the cut call are whole; the call is not.
		if err := o.closeItem("completed"); err != nil {
			return err
		}
		if err := o.call(c.Cut.Function, "incomplete"); err != nil {
			return err
		}
	}
	if err := o.closeItem(status); err != nil {
		return err
	}
	o.resp.Status = status
	u := &responseUsage{InputTokens: res.PromptTokens, OutputTokens: c.CompletionTokens}
	u.InputTokensDetails.CachedTokens = res.CachedTokens
	u.OutputTokensDetails.ReasoningTokens = c.ReasoningTokens
	u.TotalTokens = u.InputTokens + u.OutputTokens
	o.resp.Usage = u
	return nil
}

// End sends the last event: response.completed or response.incomplete.
func (o *Reply) End() error {
	return o.emit("response."+o.resp.Status, map[string]any{"response": o.resp})
}

// Fail ends a stream whose generation failed: response.failed, with the
// error's code (context_length_exceeded tells Codex to compact).
func (o *Reply) Fail(e *wire.APIError) {
	o.resp.Status = "failed"
	code := "server_error"
	if e.Code != nil {
		code = *e.Code
	}
	o.resp.Error = &responseError{Code: code, Message: e.Message}
	o.emit("response.failed", map[string]any{"response": o.resp})
}

// Settings are what a response echoes besides its request: the model,
// and the sampling and storage the server settled on.
type Settings struct {
	Model             string
	ParallelToolCalls bool
	Temperature, TopP float64
	Store             bool
}

// newResponseObject is the response as it starts: the request's settings
// echoed, in progress, no output.
func newResponseObject(req *Request, set Settings) responseObject {
	o := responseObject{ID: wire.NewID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: set.Model, Output: []any{},
		ParallelToolCalls: set.ParallelToolCalls, Store: set.Store, Temperature: set.Temperature,
		TopP: set.TopP, Truncation: "disabled", Tools: req.Tools, Metadata: req.Metadata}
	if wire.IsNull(o.Instructions) {
		o.Instructions = json.RawMessage("null")
	}
	if wire.IsNull(o.Metadata) {
		o.Metadata = json.RawMessage("{}")
	}
	if o.Tools == nil {
		o.Tools = []json.RawMessage{}
	}
	if req.Truncation != "" {
		o.Truncation = req.Truncation
	}
	o.ToolChoice = req.ToolChoice
	if wire.IsNull(o.ToolChoice) {
		o.ToolChoice = json.RawMessage(`"auto"`)
	}
	o.Text = json.RawMessage(`{"format":{"type":"text"}}`)
	if req.Text != nil && !wire.IsNull(req.Text.Format) {
		o.Text, _ = json.Marshal(map[string]json.RawMessage{"format": req.Text.Format})
	}
	if req.PreviousResponseID != "" {
		o.PreviousResponseID = &req.PreviousResponseID
	}
	if req.PromptCacheKey != "" {
		o.PromptCacheKey = &req.PromptCacheKey
	}
	if req.Reasoning != nil {
		o.Reasoning = *req.Reasoning
	}
	return o
}

// NewReply starts the response to req, streamed to stream unless it is
// nil, calling the tools by their names in the request. A streamed
// response begins with Start.
func NewReply(req *Request, set Settings, tools *Tools, stream *wire.SSE) *Reply {
	return &Reply{resp: newResponseObject(req, set), tools: tools, encrypted: wantsEncryptedReasoning(req.Include), stream: stream}
}

// Object is the response as a whole, the body of a response not
// streamed.
func (o *Reply) Object() any { return o.resp }

// Stored is the response to keep for a follow-up: its object, and the
// conversation through reply (the turn t's reply, whose tool calls take
// the call ids the response gave them), in the chain prev (nil for a
// first response) continues.
func (o *Reply) Stored(req *Request, t *wire.Turn, reply chat.Message, prev *Stored) *Stored {
	for k := range reply.ToolCalls {
		reply.ToolCalls[k].ID = o.callIDs[k]
	}
	object, _ := json.Marshal(o.resp)
	conv := o.resp.ID
	if prev != nil {
		conv = prev.conversation
	}
	return &Stored{id: o.resp.ID, object: object, conversation: conv,
		history: historyOf(t, hasInstructions(req), reply)}
}

// hasInstructions reports whether the turn's first message is the
// request's instructions.
func hasInstructions(req *Request) bool {
	str, ok := wire.RawString(req.Instructions)
	return ok && str != ""
}

// cutString reads the string value of key in the arguments of a call cut
// short, {"key": "text so far: the text so far, unescaped; ok is false
// when the arguments are not that.
func cutString(args, key string) (string, bool) {
	k, _ := json.Marshal(key)
	rest, ok := strings.CutPrefix(args, "{"+string(k)+": \"")
	if !ok {
		return "", false
	}
	var s string
	if json.Unmarshal([]byte(`"`+rest+`"`), &s) != nil {
		// Cut inside an escape: drop the escape's start.
		if i := strings.LastIndexByte(rest, '\\'); i >= 0 && json.Unmarshal([]byte(`"`+rest[:i]+`"`), &s) == nil {
			return s, true
		}
		return "", false
	}
	return s, true
}
