// Package ollama translates Ollama's API (POST /api/chat and
// /api/generate, and the model listings /api/tags, /api/show, /api/ps)
// to and from the server's internal turn: a request body into a
// wire.Turn and the Settings the turn does not carry (ChatTurn,
// GenerateTurn), a turn's deltas into a reply or its stream of NDJSON
// lines (Reply), an error into Ollama's {"error": "..."} (ErrorBody). The
// HTTP handlers stay in the server package, which runs the turn.
//
// The shapes follow Ollama's own server (api/types.go), version
// APIVersion: what its official clients send and read.
package ollama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/server/internal/wire"
)

// APIVersion is the Ollama version whose API the server speaks: what GET
// /api/version answers, so that a client checking for a feature's
// minimum version (tools, thinking, structured outputs) finds it.
const APIVersion = "0.32.15"

// Ollama's defaults for a model whose Modelfile sets none
// (api.DefaultOptions): a request that gives no sampling option samples
// as Ollama would, not as the OpenAI endpoints' defaults.
const (
	DefaultTemperature = 0.8
	DefaultTopK        = 40
	DefaultTopP        = 0.9
)

// maxStops bounds options.stop: each is matched against every token's
// text.
const maxStops = 64

// ChatRequest is a POST /api/chat body. Every field Ollama's server reads
// is listed; a field it does not know is accepted and ignored (as
// Ollama's server does), logged once by the server.
type ChatRequest struct {
	Model       string            `json:"model"`
	Messages    []json.RawMessage `json:"messages"`
	Tools       []json.RawMessage `json:"tools"`
	Format      json.RawMessage   `json:"format"`
	Options     json.RawMessage   `json:"options"`
	Stream      *bool             `json:"stream"`
	KeepAlive   json.RawMessage   `json:"keep_alive"`
	Think       json.RawMessage   `json:"think"`
	Truncate    *bool             `json:"truncate"`
	Shift       *bool             `json:"shift"`
	Logprobs    bool              `json:"logprobs"`
	TopLogprobs int               `json:"top_logprobs"`
	DebugRender bool              `json:"_debug_render_only"`
}

// GenerateRequest is a POST /api/generate body.
type GenerateRequest struct {
	Model       string            `json:"model"`
	Prompt      string            `json:"prompt"`
	Suffix      string            `json:"suffix"`
	System      string            `json:"system"`
	Template    string            `json:"template"`
	Context     []int             `json:"context"`
	Stream      *bool             `json:"stream"`
	Raw         bool              `json:"raw"`
	Format      json.RawMessage   `json:"format"`
	KeepAlive   json.RawMessage   `json:"keep_alive"`
	Images      []json.RawMessage `json:"images"`
	Options     json.RawMessage   `json:"options"`
	Think       json.RawMessage   `json:"think"`
	Truncate    *bool             `json:"truncate"`
	Shift       *bool             `json:"shift"`
	Logprobs    bool              `json:"logprobs"`
	TopLogprobs int               `json:"top_logprobs"`
	DebugRender bool              `json:"_debug_render_only"`
}

// ShowRequest is a POST /api/show body: the model by "model" (or the
// older "name").
type ShowRequest struct {
	Model   string          `json:"model"`
	Name    string          `json:"name"`
	System  string          `json:"system"`
	Verbose bool            `json:"verbose"`
	Options json.RawMessage `json:"options"`
}

// Settings are what a request asks beyond the turn: streaming, sampling
// as Ollama defines it, the context bound, logprobs, keep_alive.
type Settings struct {
	// Stream is true unless the request says "stream": false (Ollama
	// streams by default).
	Stream   bool
	Sampling Sampling
	// NumCtx is options.num_ctx: prompt and reply must fit in it (0: the
	// server's context).
	NumCtx      int
	Logprobs    bool
	TopLogprobs int
	// Load is a request with nothing to generate (no messages, an empty
	// prompt): Ollama loads the model and answers done_reason "load", or
	// "unload" with keep_alive 0 (Unload).
	Load, Unload bool
	// DebugRender asks for the rendered prompt instead of a generation
	// (_debug_render_only).
	DebugRender bool
}

// Sampling is options' sampling fields, validated, with Ollama's
// defaults; Seed is nil for a random one.
type Sampling struct {
	Temperature, TopP, MinP                          float64
	TopK                                             int
	RepeatPenalty, PresencePenalty, FrequencyPenalty float64
	Seed                                             *int64
}

// Note logs msg at Warn the first time key is seen (the server's
// noteOnce): what a request carries that the server ignores is said
// once.
type Note func(key, msg string, attrs ...slog.Attr)

// ErrorBody is e in Ollama's error shape: {"error": "message"}.
func ErrorBody(e *wire.APIError) map[string]string { return map[string]string{"error": e.Message} }

// badRequest is a 400 in Ollama's shape (only the message is sent).
func badRequest(param, format string, args ...any) *wire.APIError {
	return wire.BadRequest(param, "", format, args...)
}

// ModelMatches reports whether a request's model names the served one:
// Ollama's names carry a tag, ":latest" when none is given, and compare
// without regard to case.
func ModelMatches(asked, served string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		return strings.TrimSuffix(s, ":latest")
	}
	return norm(asked) == norm(served)
}

// TaggedName is the served model's name as Ollama lists it: with its tag
// (":latest" unless the name has one).
func TaggedName(served string) string {
	if strings.Contains(served, ":") {
		return served
	}
	return served + ":latest"
}

// ChatTurn translates an /api/chat body into the internal turn and its
// settings; note logs what is ignored. A request without messages is a
// load (Settings.Load) and has no turn.
func ChatTurn(req *ChatRequest, note Note) (*wire.Turn, *Settings, *wire.APIError) {
	set, e := settings(req.Stream, req.Options, req.KeepAlive, req.Truncate, req.Shift, req.Logprobs, req.TopLogprobs, "/api/chat", note)
	if e != nil {
		return nil, nil, e
	}
	set.DebugRender = req.DebugRender
	t := &wire.Turn{FormatParam: "format", MaxParam: "options.num_predict", ClampMax: true}
	if t.NoThinking, t.Effort, e = thinkFor(req.Think); e != nil {
		return nil, nil, e
	}
	if t.Format, e = formatFor(req.Format); e != nil {
		return nil, nil, e
	}
	if t.Tools, e = toolsFor(req.Tools); e != nil {
		return nil, nil, e
	}
	if len(req.Messages) == 0 {
		set.Load = true
		return nil, set, nil
	}
	if t.Msgs, e = messagesFor(req.Messages); e != nil {
		return nil, nil, e
	}
	if e := limits(t, set, req.Options); e != nil {
		return nil, nil, e
	}
	return t, set, nil
}

// GenerateTurn translates an /api/generate body that is not raw into the
// internal turn (the system message and the prompt as one user message)
// and its settings. An empty prompt is a load (Settings.Load) and has no
// turn. Raw requests take RawSettings instead.
func GenerateTurn(req *GenerateRequest, note Note) (*wire.Turn, *Settings, *wire.APIError) {
	set, e := generateSettings(req, note)
	if e != nil {
		return nil, nil, e
	}
	t := &wire.Turn{FormatParam: "format", MaxParam: "options.num_predict", ClampMax: true}
	if t.NoThinking, t.Effort, e = thinkFor(req.Think); e != nil {
		return nil, nil, e
	}
	if t.Format, e = formatFor(req.Format); e != nil {
		return nil, nil, e
	}
	if req.Template != "" {
		return nil, nil, wire.Unsupported("template", "template is not supported: k3 renders Kimi K3's own chat format, not a Go template (send \"raw\": true with a prompt already in that format)")
	}
	if req.Prompt == "" {
		set.Load = true
		return nil, set, nil
	}
	if req.System != "" {
		t.Msgs = append(t.Msgs, chat.Message{Role: chat.RoleSystem, Content: req.System})
	}
	t.Msgs = append(t.Msgs, chat.Message{Role: chat.RoleUser, Content: req.Prompt})
	if e := limits(t, set, req.Options); e != nil {
		return nil, nil, e
	}
	return t, set, nil
}

// RawSettings checks an /api/generate body with "raw": true (the prompt
// is sent to the model as it is, control tokens included) and returns its
// settings, its stop strings and its bound on the reply (nil: the rest of
// the context). Raw mode takes no template, system or context, as in
// Ollama; its reply is plain text (no thinking or format).
func RawSettings(req *GenerateRequest, note Note) (*Settings, []string, *int, *wire.APIError) {
	if req.Template != "" || req.System != "" || len(req.Context) > 0 {
		return nil, nil, nil, badRequest("raw", "raw mode does not support template, system, or context")
	}
	set, e := generateSettings(req, note)
	if e != nil {
		return nil, nil, nil, e
	}
	if !wire.IsNull(req.Format) && string(bytes.TrimSpace(req.Format)) != `""` {
		return nil, nil, nil, wire.Unsupported("format", "format is not supported with raw: true here (the reply of a raw prompt is not parsed)")
	}
	if !wire.IsNull(req.Think) {
		return nil, nil, nil, wire.Unsupported("think", "think is not supported with raw: true here (a raw prompt decides for itself whether the model thinks)")
	}
	if req.Prompt == "" {
		set.Load = true
		return set, nil, nil, nil
	}
	var t wire.Turn
	if e := limits(&t, set, req.Options); e != nil {
		return nil, nil, nil, e
	}
	return set, t.Stop, t.MaxTokens, nil
}

// generateSettings checks what /api/generate refuses in both modes and
// reads the settings.
func generateSettings(req *GenerateRequest, note Note) (*Settings, *wire.APIError) {
	switch {
	case len(req.Images) > 0:
		return nil, badRequest("images", "images: this server reads text only (Kimi K3 here has no vision input)")
	case req.Suffix != "":
		return nil, wire.Unsupported("suffix", "suffix (fill in the middle) is not supported: Kimi K3 has no insert mode")
	case len(req.Context) > 0:
		return nil, wire.Unsupported("context", "context (deprecated in Ollama) is not supported: send the conversation to /api/chat")
	}
	set, e := settings(req.Stream, req.Options, req.KeepAlive, req.Truncate, req.Shift, req.Logprobs, req.TopLogprobs, "/api/generate", note)
	if e != nil {
		return nil, e
	}
	set.DebugRender = req.DebugRender
	return set, nil
}

// settings reads what both endpoints share.
func settings(stream *bool, options, keepAlive json.RawMessage, truncate, shift *bool, logprobs bool, topLogprobs int, path string, note Note) (*Settings, *wire.APIError) {
	set := &Settings{Stream: stream == nil || *stream, Logprobs: logprobs, TopLogprobs: topLogprobs}
	if topLogprobs < 0 || topLogprobs > 20 {
		return nil, badRequest("top_logprobs", "top_logprobs must be between 0 and 20")
	}
	if topLogprobs > 0 && !logprobs {
		return nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
	}
	ka, given, e := keepAliveFor(keepAlive)
	if e != nil {
		return nil, e
	}
	set.Unload = given && ka == 0
	if given && ka != 0 {
		note(path+" keep_alive", "ignoring keep_alive: k3 serve keeps its one model loaded while it runs", slog.String("path", path))
	}
	// Ollama truncates a history that does not fit (truncate, default
	// true) and shifts the context when the reply reaches its end (shift,
	// default true); k3 does neither, as Ollama with both false.
	if truncate != nil && *truncate {
		note(path+" truncate", "truncate: true has no effect: a prompt that does not fit the context is refused, never truncated", slog.String("path", path))
	}
	if shift != nil && *shift {
		note(path+" shift", "shift: true has no effect: a reply ends (done_reason \"length\") when the context is full", slog.String("path", path))
	}
	var opts map[string]json.RawMessage
	if !wire.IsNull(options) {
		if err := json.Unmarshal(options, &opts); err != nil {
			return nil, badRequest("options", "options must be an object")
		}
	}
	if e := samplingFor(opts, &set.Sampling, path, note); e != nil {
		return nil, e
	}
	if raw, ok := opts["num_ctx"]; ok && !wire.IsNull(raw) {
		n, e := intOption("num_ctx", raw)
		if e != nil {
			return nil, e
		}
		if n < 0 {
			return nil, badRequest("options.num_ctx", "options.num_ctx must not be negative")
		}
		set.NumCtx = n
	}
	return set, nil
}

// limits sets the turn's reply bound (num_predict) and stop strings.
func limits(t *wire.Turn, set *Settings, options json.RawMessage) *wire.APIError {
	var opts map[string]json.RawMessage
	if !wire.IsNull(options) && json.Unmarshal(options, &opts) != nil {
		return badRequest("options", "options must be an object")
	}
	if raw, ok := opts["num_predict"]; ok && !wire.IsNull(raw) {
		n, e := intOption("num_predict", raw)
		if e != nil {
			return e
		}
		// -1 (no limit) and -2 (fill the context) both run to the end of
		// the context, as does 0 in Ollama's runner.
		if n > 0 {
			t.MaxTokens = &n
		}
	}
	if raw, ok := opts["stop"]; ok && !wire.IsNull(raw) {
		var stops []string
		if json.Unmarshal(raw, &stops) != nil {
			return badRequest("options.stop", "options.stop must be an array of strings")
		}
		if len(stops) > maxStops {
			return badRequest("options.stop", "options.stop: at most %d stop sequences", maxStops)
		}
		for i, s := range stops {
			if s == "" {
				return badRequest("options.stop", "options.stop[%d] must not be empty", i)
			}
		}
		t.Stop = stops
	}
	return nil
}

// optionKinds are the options Ollama's server reads (api.Options and
// api.Runner), with how k3 takes each: "sampling" and "limit" are
// honoured (samplingFor, limits, settings), "ignored" are accepted with
// a log line (they tune a runner k3 does not have, or are moot: see
// docs/AGENTS.md), "refused" values other than their neutral one get a
// 400 (neutral checks that).
var optionKinds = map[string]string{
	"temperature": "sampling", "top_k": "sampling", "top_p": "sampling", "min_p": "sampling", "seed": "sampling",
	"repeat_penalty": "sampling", "presence_penalty": "sampling", "frequency_penalty": "sampling", "repeat_last_n": "sampling",
	"num_predict": "limit", "stop": "limit", "num_ctx": "limit",
	"typical_p": "refused",
	"num_keep":  "ignored", "num_batch": "ignored", "num_gpu": "ignored", "main_gpu": "ignored", "use_mmap": "ignored",
	"num_thread": "ignored", "draft_num_predict": "ignored",
}

// samplingFor reads options' sampling fields into s, Ollama's defaults
// where absent, and notes the ignored and unknown ones.
func samplingFor(opts map[string]json.RawMessage, s *Sampling, path string, note Note) *wire.APIError {
	*s = Sampling{Temperature: DefaultTemperature, TopK: DefaultTopK, TopP: DefaultTopP, RepeatPenalty: 1}
	names := make([]string, 0, len(opts))
	for k := range opts {
		names = append(names, k)
	}
	sort.Strings(names) // the first error is the same every time
	repeatLastN := -1
	for _, k := range names {
		raw := opts[k]
		if wire.IsNull(raw) {
			continue // Ollama skips a null option
		}
		var e *wire.APIError
		switch k {
		case "temperature":
			s.Temperature, e = floatOption(k, raw, 0, math.Inf(1))
		case "top_p":
			s.TopP, e = floatOption(k, raw, 0, 1)
		case "min_p":
			s.MinP, e = floatOption(k, raw, 0, 1)
		case "top_k":
			s.TopK, e = intOption(k, raw)
			if e == nil && s.TopK < 0 {
				e = badRequest("options.top_k", "options.top_k must not be negative")
			}
		case "repeat_penalty":
			s.RepeatPenalty, e = floatOption(k, raw, 0, math.Inf(1))
		case "presence_penalty":
			s.PresencePenalty, e = floatOption(k, raw, math.Inf(-1), math.Inf(1))
		case "frequency_penalty":
			s.FrequencyPenalty, e = floatOption(k, raw, math.Inf(-1), math.Inf(1))
		case "repeat_last_n":
			repeatLastN, e = intOption(k, raw)
		case "seed":
			var n int
			if n, e = intOption(k, raw); e == nil && n >= 0 {
				seed := int64(n)
				s.Seed = &seed
			}
		case "typical_p":
			var v float64
			if v, e = floatOption(k, raw, 0, math.Inf(1)); e == nil && v != 1 {
				e = wire.Unsupported("options.typical_p", "options.typical_p is not supported: k3 has no locally typical sampling (1, its neutral value, is accepted)")
			}
		default:
			switch optionKinds[k] {
			case "ignored":
				note(path+" option "+k, "ignoring an Ollama option that tunes a runner k3 does not have", slog.String("option", k))
			case "":
				// Ollama's server, too, logs an option it does not know
				// and goes on.
				note(path+" option "+k, "ignoring an unknown Ollama option", slog.String("option", k))
			}
		}
		if e != nil {
			return e
		}
	}
	// k3 penalises repeats over the whole sequence, prompt included:
	// Ollama's repeat_last_n -1. 0 turns the penalties off; another window
	// cannot be honoured, and matters only when a penalty is on.
	penalised := s.RepeatPenalty != 1 && s.RepeatPenalty != 0 || s.PresencePenalty != 0 || s.FrequencyPenalty != 0
	switch {
	case repeatLastN == 0:
		s.RepeatPenalty, s.PresencePenalty, s.FrequencyPenalty = 1, 0, 0
	case repeatLastN != -1 && penalised:
		return wire.Unsupported("options.repeat_last_n", "options.repeat_last_n %d is not supported with a penalty: k3 penalises repeats over the whole sequence (-1) or not at all (0)", repeatLastN)
	}
	// Ollama's top_p 0 keeps only the most likely token.
	if s.TopP == 0 {
		s.Temperature, s.TopP = 0, 1
	}
	return nil
}

// intOption reads an integer option; Ollama takes a JSON number and
// drops its fraction.
func intOption(name string, raw json.RawMessage) (int, *wire.APIError) {
	var v float64
	if json.Unmarshal(raw, &v) != nil || math.IsNaN(v) || math.Abs(v) > 1<<53 {
		return 0, badRequest("options."+name, "options.%s must be an integer", name)
	}
	return int(v), nil
}

// floatOption reads a number option within [lo, hi].
func floatOption(name string, raw json.RawMessage, lo, hi float64) (float64, *wire.APIError) {
	var v float64
	if json.Unmarshal(raw, &v) != nil {
		return 0, badRequest("options."+name, "options.%s must be a number", name)
	}
	if !(v >= lo && v <= hi) {
		switch {
		case math.IsInf(hi, 1):
			return 0, badRequest("options."+name, "options.%s must be at least %v", name, lo)
		default:
			return 0, badRequest("options."+name, "options.%s must be between %v and %v", name, lo, hi)
		}
	}
	return v, nil
}

// keepAliveFor reads keep_alive: a duration string ("5m", "0") or a
// number of seconds (negative: forever), as Ollama reads it; given is
// false when it is absent.
func keepAliveFor(raw json.RawMessage) (d time.Duration, given bool, e *wire.APIError) {
	if wire.IsNull(raw) {
		return 0, false, nil
	}
	if s, ok := wire.RawString(raw); ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, false, badRequest("keep_alive", "keep_alive: %v", err)
		}
		return d, true, nil
	}
	var n float64
	if json.Unmarshal(raw, &n) != nil {
		return 0, false, badRequest("keep_alive", "keep_alive must be a duration (\"5m\") or a number of seconds")
	}
	if n < 0 {
		return time.Duration(math.MaxInt64), true, nil
	}
	return time.Duration(n * float64(time.Second)), true, nil
}

// thinkFor maps think onto K3's thinking and effort: absent or true is
// on at the release's default effort (max; Ollama turns thinking on by
// default for a model that thinks); false is off; "low" is low, "medium"
// and "high" are high, "max" is max.
func thinkFor(raw json.RawMessage) (off bool, effort string, e *wire.APIError) {
	if wire.IsNull(raw) {
		return false, "", nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return !b, "", nil
	}
	if s, ok := wire.RawString(raw); ok {
		switch s {
		case "low", "medium", "high", "max":
			eff, _ := wire.EffortFor(s)
			return false, eff, nil
		}
		return false, "", badRequest("think", "invalid think value: %q (must be \"high\", \"medium\", \"low\", \"max\", true, or false)", s)
	}
	return false, "", badRequest("think", "think must be a boolean or a string (\"high\", \"medium\", \"low\", \"max\", true, or false)")
}

// formatFor reads format: "json" (any JSON object) or a JSON schema, as
// the server's structured output (package grammar) enforces it. The
// schema is not strict: a keyword the grammar cannot enforce is left
// unenforced, as Ollama's schema converter leaves it.
func formatFor(raw json.RawMessage) (*chat.ResponseFormat, *wire.APIError) {
	raw = bytes.TrimSpace(raw)
	if wire.IsNull(raw) || string(raw) == `""` {
		return nil, nil
	}
	if string(raw) == `"json"` {
		return &chat.ResponseFormat{Type: "json_object"}, nil
	}
	var schema map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &schema) != nil {
		return nil, badRequest("format", "invalid format: %s; expected \"json\" or a valid JSON Schema object", raw)
	}
	js, err := json.Marshal(struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	}{"format", raw, false})
	if err != nil {
		return nil, badRequest("format", "invalid format: %v", err)
	}
	return &chat.ResponseFormat{Type: "json_schema", JSONSchema: js}, nil
}

// ollamaTool is a tool of a request: Ollama's shape is chat completions'
// ({"type": "function", "function": {"name", "description",
// "parameters"}}).
type ollamaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolsFor reads tools into the renderer's declaration.
func toolsFor(raw []json.RawMessage) (json.RawMessage, *wire.APIError) {
	var out []wire.FunctionTool
	seen := map[string]bool{}
	for i, r := range raw {
		var t ollamaTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, badRequest(wire.ItemParam("tools", i), "tools[%d] is not a valid tool: %s", i, wire.JSONMessage(err))
		}
		if t.Type != "" && t.Type != "function" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), "tools[%d].type %q is not supported (function)", i, t.Type)
		}
		if t.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "tools[%d].function.name is required", i)
		}
		if seen[t.Function.Name] {
			return nil, badRequest(wire.ItemParam("tools", i), "tools[%d]: two tools are named %q", i, t.Function.Name)
		}
		seen[t.Function.Name] = true
		params := t.Function.Parameters
		if wire.IsNull(params) {
			params = nil
		}
		out = append(out, wire.FunctionTool{Type: "function", Function: wire.FunctionSchema{Name: t.Function.Name, Description: t.Function.Description, Parameters: params}})
	}
	return wire.ToolsJSON(out), nil
}

// ollamaMessage is a message of /api/chat.
type ollamaMessage struct {
	Role       string            `json:"role"`
	Content    json.RawMessage   `json:"content"`
	Thinking   string            `json:"thinking"`
	Images     []json.RawMessage `json:"images"`
	ToolCalls  []ollamaToolCall  `json:"tool_calls"`
	ToolName   string            `json:"tool_name"`
	ToolCallID string            `json:"tool_call_id"`
}

// ollamaToolCall is a tool call: Ollama's arguments are a JSON object,
// not a string holding one.
type ollamaToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Index     *int            `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// messagesFor reads the messages: roles system, user, assistant (with
// thinking and tool_calls) and tool (with tool_name and tool_call_id);
// content a string. Images are refused.
func messagesFor(raw []json.RawMessage) ([]chat.Message, *wire.APIError) {
	msgs := make([]chat.Message, 0, len(raw))
	for i, r := range raw {
		p := wire.ItemParam("messages", i)
		var m ollamaMessage
		if err := json.Unmarshal(r, &m); err != nil {
			return nil, badRequest(p, "%s is not a valid message: %s", p, wire.JSONMessage(err))
		}
		if len(m.Images) > 0 {
			return nil, badRequest(p+".images", "%s.images: this server reads text only (Kimi K3 here has no vision input)", p)
		}
		content := ""
		if !wire.IsNull(m.Content) {
			s, ok := wire.RawString(m.Content)
			if !ok {
				return nil, badRequest(p+".content", "%s.content must be a string", p)
			}
			content = s
		}
		cm := chat.Message{Role: strings.ToLower(m.Role), Content: content}
		switch cm.Role {
		case chat.RoleSystem, chat.RoleUser:
		case chat.RoleAssistant:
			cm.ReasoningContent = m.Thinking
			for k, c := range m.ToolCalls {
				cp := fmt.Sprintf("%s.tool_calls[%d].function", p, k)
				if c.Function.Name == "" {
					return nil, badRequest(cp+".name", "%s.name is required", cp)
				}
				args := bytes.TrimSpace(c.Function.Arguments)
				switch {
				case wire.IsNull(args):
					args = []byte("{}")
				case args[0] != '{':
					return nil, badRequest(cp+".arguments", "%s.arguments must be a JSON object (Ollama's arguments are objects, not strings)", cp)
				}
				cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: c.ID, Type: "function", Function: chat.FunctionCall{Name: c.Function.Name, Arguments: string(args)}})
			}
		case chat.RoleTool:
			cm.Tool, cm.ToolCallID = m.ToolName, m.ToolCallID
		case "":
			return nil, badRequest(p+".role", "%s.role is required", p)
		default:
			return nil, badRequest(p+".role", "%s.role %q is not supported (system, user, assistant, tool)", p, m.Role)
		}
		msgs = append(msgs, cm)
	}
	return msgs, nil
}

// NotFound is Ollama's answer for a model it does not have.
func NotFound(model string) *wire.APIError {
	e := wire.NotFound("model", "model_not_found", "model '%s' not found", model)
	e.Status = http.StatusNotFound
	return e
}
