package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// promptLog records the prompts the server's generations started from.
type promptLog struct {
	mu    sync.Mutex
	ids   [][]int
	texts []string
}

func (l *promptLog) add(ids []int, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, slices.Clone(ids))
	l.texts = append(l.texts, text)
}

// last returns the last n prompts' ids.
func (l *promptLog) last(t *testing.T, n int) [][]int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ids) < n {
		t.Fatalf("%d prompts recorded, want at least %d", len(l.ids), n)
	}
	return l.ids[len(l.ids)-n:]
}

func (l *promptLog) text(t *testing.T, i int) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if i < 0 {
		i += len(l.texts)
	}
	if i < 0 || i >= len(l.texts) {
		t.Fatalf("no prompt %d of %d", i, len(l.texts))
	}
	return l.texts[i]
}

// newScripted serves the quickstart checkpoint; answer (if not nil) gives
// the reply a generation from a prompt emits instead of the random
// model's (nil: the model's own). The reply is spelled in Kimi K3's
// format, so the server's parsing and the API mappings are the real ones.
func newScripted(t *testing.T, o Options, answer func(prompt string) *chat.Message) (*Server, *httptest.Server, *promptLog) {
	t.Helper()
	m, err := k3.Open(testmodel.Dir(t), k3.Options{Sessions: max(o.Sessions, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if o.Name == "" {
		o.Name = "k3-test"
	}
	s, err := New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	log := &promptLog{}
	s.script = func(prompt []int) []int {
		text := s.tok.DecodeLenient(prompt)
		log.add(prompt, text)
		if answer == nil {
			return nil
		}
		msg := answer(text)
		if msg == nil {
			return nil
		}
		thinking := strings.HasSuffix(text, chat.TokOpen+"think"+chat.TokSep)
		segs, err := chat.RenderAnswer(*msg, chat.Options{NoThinking: !thinking})
		if err != nil {
			t.Error(err)
			return nil
		}
		ids, err := chat.Encode(s.tok, segs)
		if err != nil {
			t.Error(err)
		}
		return ids
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts, log
}

// weatherAnswer is the scripted model of the tool conversations: asked
// about the weather it thinks, says so and calls get_weather; given the
// tool's result it answers.
func weatherAnswer(prompt string) *chat.Message {
	if strings.Contains(prompt, `role="tool"`) {
		return &chat.Message{ReasoningContent: "The tool said it.", Content: "It is sunny."}
	}
	return &chat.Message{ReasoningContent: "I should look it up.", Content: "Checking.",
		ToolCalls: []chat.ToolCall{{Function: chat.FunctionCall{Name: "get_weather", Arguments: `{"city": "Paris", "days": 2}`}}}}
}

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`

// TestGoldenTranslations: one conversation (instructions, a user
// question, an assistant turn with reasoning, text and a tool call, the
// tool's result, a follow-up question; tools, a required tool choice, an
// effort) asked through each API renders to exactly the ids of the
// equivalent chat completion. So does the same without thinking, and
// with Codex's namespaced tools and Claude Code's deferred ones.
func TestGoldenTranslations(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, func(string) *chat.Message { return &chat.Message{} })
	chatTools := `[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":` + weatherSchema + `}}]`
	for _, c := range []struct {
		name                      string
		chat, responses, messages string
	}{
		{
			name: "thinking",
			chat: `{"messages":[{"role":"system","content":"You are a weather bot."},{"role":"user","content":"What is the weather in Paris?"},` +
				`{"role":"assistant","content":"Checking.","reasoning_content":"I should look it up.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":"18 C and sunny"},{"role":"user","content":"And tomorrow?"}],` +
				`"tools":` + chatTools + `,"tool_choice":"required","reasoning_effort":"high","max_tokens":50}`,
			responses: `{"instructions":"You are a weather bot.","input":[{"role":"user","content":"What is the weather in Paris?"},` +
				`{"type":"reasoning","summary":[{"type":"summary_text","text":"I should look it up."}]},` +
				`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},` +
				`{"type":"function_call","call_id":"c1","name":"get_weather","namespace":"weather","arguments":"{\"city\":\"Paris\",\"days\":2}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"18 C and sunny"},{"role":"user","content":[{"type":"input_text","text":"And tomorrow?"}]}],` +
				`"tools":[{"type":"namespace","name":"weather","description":"Weather tools","tools":[{"type":"function","name":"get_weather","description":"Get the weather","parameters":` + weatherSchema + `}]},{"type":"web_search"}],` +
				`"tool_choice":"required","reasoning":{"effort":"medium","summary":"auto"},"max_output_tokens":50,"store":false}`,
			messages: `{"system":[{"type":"text","text":"You are a weather bot.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"What is the weather in Paris?"},` +
				`{"role":"assistant","content":[{"type":"thinking","thinking":"I should look it up.","signature":"from-elsewhere"},{"type":"text","text":"Checking."},` +
				`{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","days":2}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18 C and sunny"}]},{"type":"text","text":"And tomorrow?"}]}],` +
				`"tools":[{"name":"get_weather","description":"Get the weather","input_schema":` + weatherSchema + `}],"tool_choice":{"type":"any"},` +
				`"thinking":{"type":"enabled","budget_tokens":8000},"max_tokens":50}`,
		},
		{
			name: "no thinking",
			chat: `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello.","reasoning_content":"dropped"},{"role":"user","content":"Bye"}],` +
				`"thinking":{"type":"disabled"},"max_tokens":50}`,
			responses: `{"input":[{"role":"developer","content":"Be brief."},{"role":"user","content":"Hi"},{"type":"reasoning","summary":[{"type":"summary_text","text":"dropped"}]},` +
				`{"role":"assistant","content":"Hello."},{"role":"user","content":"Bye"}],"reasoning":{"effort":"none"},"max_output_tokens":50}`,
			messages: `{"system":"Be brief.","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"dropped","signature":""},{"type":"text","text":"Hello."}]},{"role":"user","content":"Bye"}],"max_tokens":50}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, x := range []struct{ path, body string }{{"/v1/chat/completions", c.chat}, {"/v1/responses", c.responses}, {"/v1/messages", c.messages}} {
				if resp, b := post(t, ts, x.path, x.body); resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", x.path, resp.StatusCode, b)
				}
			}
			p := log.last(t, 3)
			if !slices.Equal(p[1], p[0]) {
				t.Errorf("responses renders\n%q\nchat completions\n%q", log.text(t, -2), log.text(t, -3))
			}
			if !slices.Equal(p[2], p[0]) {
				t.Errorf("messages renders\n%q\nchat completions\n%q", log.text(t, -1), log.text(t, -3))
			}
			if want := map[string]string{"thinking": "I should look it up.", "no thinking": "Hello."}[c.name]; !strings.Contains(log.text(t, -3), want) {
				t.Errorf("the conversation is not in the prompt: %q", log.text(t, -3))
			}
		})
	}
}

// codexBody has the fields Codex CLI 0.169.0 sends (its prompts cut
// short): developer messages, function and namespace tools, web_search,
// store false with encrypted reasoning, prompt_cache_key,
// client_metadata, no max_output_tokens.
const codexBody = `{"model":"k3-test","stream":true,"input":[` +
	`{"type":"message","id":"msg_1","role":"developer","content":[{"type":"input_text","text":"You are a coding agent running in the Codex CLI."}]},` +
	`{"type":"message","id":"msg_2","role":"user","content":[{"type":"input_text","text":"<environment_context><cwd>/tmp</cwd></environment_context>"}]},` +
	`{"type":"message","id":"msg_3","role":"user","content":[{"type":"input_text","text":"Say hi"}]}],` +
	`"tools":[{"type":"function","name":"exec_command","description":"Runs a command.","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"],"additionalProperties":false}},` +
	`{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents.","tools":[{"type":"function","name":"wait_agent","description":"Wait.","strict":false,"parameters":{"type":"object","properties":{}}}]},` +
	`{"type":"web_search","external_web_access":false}],` +
	`"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"include":["reasoning.encrypted_content"],` +
	`"prompt_cache_key":"0199-session","client_metadata":{"session_id":"0199-session","turn_id":"t1"}}`

// claudeCodeBody has the fields Claude Code 2.1.328 sends (its prompts
// cut short): system blocks with cache_control, a system turn in the
// messages, tools with $schema and a deferred placeholder, metadata,
// max_tokens beyond any context here, adaptive thinking with display,
// context_management, output_config.
const claudeCodeBody = `{"model":"k3-test","messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"Say hi"}]},` +
	`{"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}}]}],` +
	`"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328;"},{"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral"}}],` +
	`"tools":[{"name":"Bash","description":"Run a command","input_schema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}},` +
	`{"name":"DeferredToolPlaceholder","description":"Reserved.","input_schema":{"type":"object","properties":{}},"defer_loading":true}],` +
	`"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"},"max_tokens":32000,"thinking":{"type":"adaptive","display":"omitted"},` +
	`"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},"output_config":{"effort":"high"},"stream":true}`

// TestRealClientRequests: what the real agents send is accepted, answered
// as a stream their SDKs read, and counted under its endpoint in the
// metrics; the hosted tool and the deferred placeholder are not declared.
func TestRealClientRequests(t *testing.T) {
	_, ts, log := newScripted(t, Options{APIKey: "k"}, func(string) *chat.Message { return &chat.Message{ReasoningContent: "Hm.", Content: "Hi."} })
	send := func(path, body string, header map[string]string) []string {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return namedEvents(t, resp.Body)
	}
	ev := send("/v1/responses", codexBody, map[string]string{"Authorization": "Bearer k"})
	if ev[0] != "response.created" || ev[len(ev)-1] != "response.completed" {
		t.Errorf("codex stream %q", ev)
	}
	p := log.text(t, -1)
	if !strings.Contains(p, `"name":"wait_agent"`) || strings.Contains(p, "web_search") || !strings.Contains(p, "You are a coding agent") {
		t.Errorf("codex prompt %q", p)
	}
	// A field the server does not know yet (a newer client's) is ignored.
	ev = send("/v1/responses", strings.Replace(codexBody, `"stream":true`, `"stream":true,"some_future_field":{"x":1}`, 1), map[string]string{"Authorization": "Bearer k"})
	if ev[len(ev)-1] != "response.completed" {
		t.Errorf("with an unknown field: %q", ev)
	}
	ev = send("/v1/messages?beta=true", claudeCodeBody, map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01",
		"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"})
	if len(ev) < 3 || ev[0] != "message_start" || ev[1] != "ping" || ev[len(ev)-1] != "message_stop" {
		t.Errorf("claude code stream %q", ev)
	}
	p = log.text(t, -1)
	if !strings.Contains(p, `"name":"Bash"`) || strings.Contains(p, "DeferredToolPlaceholder") || !strings.Contains(p, "# Environment") || !strings.Contains(p, "`thinking_effort=high`") {
		t.Errorf("claude code prompt %q", p)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/metrics", nil)
	req.Header.Set("x-api-key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`k3_requests_total{endpoint="/v1/responses",status="200"} 2`, `k3_requests_total{endpoint="/v1/messages",status="200"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// namedEvents reads a stream of named server-sent events and returns
// their names, checking that each data is JSON whose type is the name.
func namedEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, block := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		name, data, ok := strings.Cut(block, "\n")
		name, ok1 := strings.CutPrefix(name, "event: ")
		data, ok2 := strings.CutPrefix(data, "data: ")
		var v struct {
			Type string `json:"type"`
		}
		if !ok || !ok1 || !ok2 || json.Unmarshal([]byte(data), &v) != nil || v.Type != name {
			t.Fatalf("not a named event: %q", block)
		}
		names = append(names, name)
	}
	return names
}

// TestAgentBadInput: every bad request gets its API's error shape, a 4xx
// and the field named: OpenAI's error object with param for
// /v1/responses, Anthropic's {"type": "error", "error": {"type",
// "message"}} for /v1/messages, the field in the message.
func TestAgentBadInput(t *testing.T) {
	_, ts, _ := newScripted(t, Options{MaxBodyBytes: 1 << 20}, func(string) *chat.Message { return &chat.Message{} })
	long := strings.Repeat("word ", 5000) // more tokens than the 4096 the context holds
	msg := func(extra string) string {
		return `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	for _, c := range []struct {
		path, body string
		status     int
		field      string // the param (OpenAI) or a text the message must hold (Anthropic)
	}{
		{"/v1/responses", `{"input":5}`, 400, "input"},
		{"/v1/responses", `{"input":[{"type":"computer_call","call_id":"c"}]}`, 400, "input[0].type"},
		{"/v1/responses", `{"input":[{"foo":1}]}`, 400, "input[0].type"},
		{"/v1/responses", `{"input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`, 400, "input[0].call_id"},
		{"/v1/responses", `{"input":[{"role":"robot","content":"x"}]}`, 400, "input[0].role"},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:x"}]}]}`, 400, "input[0].content[0].type"},
		{"/v1/responses", `{"input":"x","previous_response_id":"resp_unknown"}`, 404, "previous_response_id"},
		{"/v1/responses", `{"input":"x","reasoning":{"effort":"extreme"}}`, 400, "reasoning.effort"},
		{"/v1/responses", `{"input":"x","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"nonsense"}}}}`, 400, "text.format"},
		{"/v1/responses", `{"input":"x","text":{"format":{"type":"json_schema","name":"a","strict":true,"schema":{"type":"array","uniqueItems":true}}}}`, 400, "text.format"},
		{"/v1/responses", `{"input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice"},
		{"/v1/responses", `{"input":"x","text":{"format":{"type":"yaml"}}}`, 400, "text.format"},
		{"/v1/responses", `{"input":"x","tool_choice":"sometimes"}`, 400, "tool_choice"},
		{"/v1/responses", `{"input":"x","tools":[{"name":"f"}]}`, 400, "tools[0].type"},
		{"/v1/responses", `{"input":"x","max_output_tokens":0}`, 400, "max_output_tokens"},
		{"/v1/responses", `{"input":"x","max_output_tokens":"many"}`, 400, "max_output_tokens"},
		{"/v1/responses", `{"input":"x","temperature":3}`, 400, "temperature"},
		{"/v1/responses", `{"input":"x","background":true}`, 400, "background"},
		{"/v1/responses", `{"input":"x","instructions":5}`, 400, "instructions"},
		{"/v1/responses", `{"input":"x","model":"gpt-5"}`, 404, "model"},
		{"/v1/responses", `{"input":"` + long + `"}`, 400, ""},
		{"/v1/responses", `{"input":"` + strings.Repeat("a", 2<<20) + `"}`, 413, ""},
		{"/v1/responses", `{"input":`, 400, ""},
		{"/v1/messages", `{"model":"k3-test","messages":[{"role":"user","content":"hi"}]}`, 400, "max_tokens"},
		{"/v1/messages", msg(`,"max_tokens":0`), 400, "max_tokens"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[]}`, 400, "messages"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"robot","content":"x"}]}`, 400, "messages.0.role"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"x"}}]}]}`, 400, "messages.0.content.0"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":[{"type":"fancy"}]}]}`, 400, "messages.0.content.0.type"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"x"}]}]}`, 400, "messages.0.content.0.type"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_nope","content":"x"}]}]}`, 400, "tool_use_id"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":5}]}`, 400, "messages.0.content"},
		{"/v1/messages", msg(`,"thinking":{"type":"maybe"}`), 400, "thinking.type"},
		{"/v1/messages", msg(`,"thinking":{"type":"enabled"}`), 400, "thinking.budget_tokens"},
		{"/v1/messages", msg(`,"thinking":{"type":"adaptive"},"output_config":{"effort":"extreme"}`), 400, "output_config.effort"},
		{"/v1/messages", msg(`,"tool_choice":{"type":"sometimes"}`), 400, "tool_choice.type"},
		{"/v1/messages", msg(`,"tool_choice":{"type":"tool"}`), 400, "tool_choice.name"},
		{"/v1/messages", msg(`,"tools":[{"description":"no name"}]`), 400, "tools.0.name"},
		{"/v1/messages", msg(`,"output_config":{"format":{"type":"json_schema","schema":{"type":"array","uniqueItems":true}}}`), 400, "output_config.format"},
		{"/v1/messages", msg(`,"tool_choice":{"type":"tool","name":"g"},"tools":[{"name":"f","input_schema":{"type":"object"}}]`), 400, "tool_choice"},
		{"/v1/messages", msg(`,"stop_sequences":[""]`), 400, "stop_sequences.0"},
		{"/v1/messages", msg(`,"temperature":5`), 400, "temperature"},
		{"/v1/messages", msg(`,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]`), 400, "mcp_servers"},
		{"/v1/messages", `{"model":"other","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, 404, "model"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "prompt is too long"},
		{"/v1/messages", `{"model":"k3-test","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`, 413, ""},
		{"/v1/messages", `{"model":"k3-test",`, 400, ""},
		{"/v1/messages/count_tokens", `{"model":"k3-test","messages":[{"role":"user","content":[{"type":"fancy"}]}]}`, 400, "messages.0.content.0.type"},
		{"/v1/messages/nonsense", `{}`, 404, ""},
	} {
		name := c.path + " " + c.body[:min(len(c.body), 80)]
		resp, b := post(t, ts, c.path, c.body)
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, b, c.status)
			continue
		}
		if goTypeName.Match(b) {
			t.Errorf("%s: the error names a Go type: %s", name, b)
		}
		if strings.HasPrefix(c.path, "/v1/messages") {
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" || !strings.Contains(e.Error.Message, c.field) {
				t.Errorf("%s: %s is not Anthropic's error naming %q", name, b, c.field)
			}
			want := map[int]string{400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large"}[c.status]
			if e.Error.Type != want {
				t.Errorf("%s: error type %q, want %q", name, e.Error.Type, want)
			}
			continue
		}
		got := parse(t, b)
		if got.Error == nil || got.Error.Message == "" || got.Error.Type == "" {
			t.Errorf("%s: %s is not OpenAI's error", name, b)
			continue
		}
		if param := ""; got.Error.Param != nil {
			param = *got.Error.Param
			if param != c.field {
				t.Errorf("%s: param %q, want %q (%s)", name, param, c.field, got.Error.Message)
			}
		} else if c.field != "" {
			t.Errorf("%s: no param, want %q (%s)", name, c.field, got.Error.Message)
		}
	}
}

// TestAgentQueueFull: beyond the queue, /v1/messages gets Anthropic's 429
// (rate_limit_error) with Retry-After, /v1/responses OpenAI's.
func TestAgentQueueFull(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	s, ts, _ := newScripted(t, Options{Sessions: 1, Queue: -1}, nil)
	s.afterToken = func() { <-gate }
	defer once.Do(func() { close(gate) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Wait","max_tokens":2,"ignore_eos":true}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	for s.Active() == 0 {
		time.Sleep(time.Millisecond)
	}
	resp, b := post(t, ts, "/v1/messages", `{"model":"k3-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), `"type":"rate_limit_error"`) {
		t.Errorf("messages: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, ts, "/v1/responses", `{"input":"hi"}`)
	if resp.StatusCode != 429 || parse(t, b).Error == nil {
		t.Errorf("responses: %d %s", resp.StatusCode, b)
	}
	once.Do(func() { close(gate) })
	<-done
}

// TestDeferredTools: a deferred tool (defer_loading) is not declared up
// front; a tool_result that references it declares it after the result,
// as K3's format loads tools mid-conversation.
func TestDeferredTools(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, func(string) *chat.Message { return &chat.Message{} })
	body := `{"model":"k3-test","max_tokens":10,"tools":[{"name":"ToolSearch","description":"Find tools","input_schema":{"type":"object","properties":{"query":{"type":"string"}}}},` +
		`{"name":"WebFetch","description":"Fetch a page","input_schema":{"type":"object","properties":{"url":{"type":"string"}}},"defer_loading":true}],"messages":[` +
		`{"role":"user","content":"Fetch example.com"}`
	if resp, b := post(t, ts, "/v1/messages", body+`]}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if p := log.text(t, -1); !strings.Contains(p, `"name":"ToolSearch"`) || strings.Contains(p, "WebFetch") {
		t.Errorf("before its reference: %q", p)
	}
	body += `,{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"ToolSearch","input":{"query":"select:WebFetch"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"tool_reference","tool_name":"WebFetch"}]}]}]}`
	if resp, b := post(t, ts, "/v1/messages", body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	p := log.text(t, -1)
	result := strings.Index(p, "Tool loaded: WebFetch")
	loaded := strings.Index(p, "## New Tools Available")
	if result < 0 || loaded < result || !strings.Contains(p[loaded:], `"name":"WebFetch"`) {
		t.Errorf("after its reference: %q", p)
	}
}
