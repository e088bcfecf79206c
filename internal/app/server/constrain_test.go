package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// answerSchema is a bounded schema (every string and array has a most
// length), so that a model with random weights, which never chooses to
// close a string, still ends its answer within max_tokens.
const answerSchema = `{"type":"object","properties":{
	"city":{"type":"string","maxLength":12},
	"days":{"type":"integer","minimum":1,"maximum":14},
	"units":{"enum":["metric","imperial"]},
	"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3}},
	"required":["city","days","units"],"additionalProperties":false}`

// boundedParams are a tool's parameters, bounded the same way.
const boundedParams = `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}`

// newConstrainedServer serves a tiny model with random weights and the
// release's tokenizer: nothing but the constraint makes its replies
// parse. The prefix cache holds prompts in RAM.
func newConstrainedServer(t *testing.T) (*httptest.Server, *k3.Model) {
	t.Helper()
	return newConstrainedServerLog(t, nil)
}

func newConstrainedServerLog(t *testing.T, log *slog.Logger) (*httptest.Server, *k3.Model) {
	t.Helper()
	m, err := k3.Open(grammartest.ReleaseModelDir(t), k3.Options{MaxContext: 2048, Sessions: 2,
		PrefixCache: &k3.PrefixCacheOptions{RAMBytes: 64 << 20, DiskBytes: -1, BlockTokens: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := New(m, Options{Name: "k3-test", Sessions: 2, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, m
}

// TestConstrainedChat: on a model with random weights, chat completions'
// json_schema and json_object response formats give content that
// validates (an independent validator), for every choice of n and every
// seed, streamed or not; tool_choice "none" gives no call though tools are
// declared; the server's metrics count the constrained generations.
func TestConstrainedChat(t *testing.T) {
	ts, _ := newConstrainedServer(t)
	v := grammartest.NewValidator(t, answerSchema)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + boundedParams + `}}]`
	for seed := range 3 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Weather in Paris, as JSON."}],"thinking":{"type":"disabled"},
			"response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":%s}},
			"n":2,"seed":%d,"max_tokens":300}`, answerSchema, seed)
		resp, b := post(t, ts, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("seed %d: %d %s", seed, resp.StatusCode, b)
		}
		var got struct {
			Choices []struct {
				Message struct {
					Content   string            `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &got); err != nil || len(got.Choices) != 2 {
			t.Fatalf("seed %d: %s", seed, b)
		}
		for i, c := range got.Choices {
			if c.FinishReason != "stop" {
				t.Errorf("seed %d choice %d: finish %q: %q", seed, i, c.FinishReason, c.Message.Content)
			}
			if err := v.Validate([]byte(c.Message.Content)); err != nil {
				t.Errorf("seed %d choice %d: %q: %v", seed, i, c.Message.Content, err)
			}
		}
		if got.Choices[0].Message.Content == got.Choices[1].Message.Content {
			t.Errorf("seed %d: both choices are %q: the choices share one constraint or one seed", seed, got.Choices[0].Message.Content)
		}
	}

	// json_object, streamed: the deltas put together are one JSON object.
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"messages":[{"role":"user","content":"Any JSON object."}],"thinking":{"type":"disabled"},"response_format":{"type":"json_object"},"stream":true,"seed":7,"max_tokens":300,
		"temperature":0.7}`))
	if err != nil {
		t.Fatal(err)
	}
	var content strings.Builder
	for _, ev := range events(t, resp.Body) {
		if ev == "[DONE]" {
			break
		}
		var d struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &d); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		for _, c := range d.Choices {
			content.WriteString(c.Delta.Content)
		}
	}
	resp.Body.Close()
	var obj map[string]any
	if err := json.Unmarshal([]byte(content.String()), &obj); err != nil {
		t.Errorf("json_object, streamed: %q: %v", content.String(), err)
	}

	// tool_choice none: tools declared, no call made.
	for seed := range 3 {
		_, b := post(t, ts, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Weather?"}],"thinking":{"type":"disabled"},%s,
			"tool_choice":"none","seed":%d,"max_tokens":20,"logprobs":false}`, tools, seed))
		if strings.Contains(string(b), `"tool_calls"`) || !strings.Contains(string(b), `"choices"`) {
			t.Errorf("tool_choice none, seed %d: %s", seed, b)
		}
	}

	metrics := scrape(t, ts)
	if n := metricValue(t, metrics, "k3_constrained_generations_total"); n < 9 {
		t.Errorf("k3_constrained_generations_total %v, want at least 9 (3 × 2 choices, 1 streamed, 3 with tool_choice none)", n)
	}
	if n := metricValue(t, metrics, "k3_masked_tokens_total"); n <= 0 {
		t.Errorf("k3_masked_tokens_total %v", n)
	}
}

// TestConstrainedAgentAPIs: Responses' text.format and Anthropic's
// output_config.format constrain the reply as chat completions'
// response_format does.
func TestConstrainedAgentAPIs(t *testing.T) {
	ts, _ := newConstrainedServer(t)
	v := grammartest.NewValidator(t, answerSchema)
	for seed := range 2 {
		_, b := post(t, ts, "/v1/responses", fmt.Sprintf(`{"input":"Weather in Paris, as JSON.","reasoning":{"effort":"none"},
			"text":{"format":{"type":"json_schema","name":"w","strict":true,"schema":%s}},"seed":%d,"max_output_tokens":300,"store":false}`, answerSchema, seed))
		var r struct {
			Status string `json:"status"`
			Output []struct {
				Type    string `json:"type"`
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"output"`
		}
		if err := json.Unmarshal(b, &r); err != nil || r.Status != "completed" {
			t.Fatalf("responses, seed %d: %s", seed, b)
		}
		var text strings.Builder
		for _, o := range r.Output {
			for _, c := range o.Content {
				if c.Type == "output_text" {
					text.WriteString(c.Text)
				}
			}
		}
		if err := v.Validate([]byte(text.String())); err != nil {
			t.Errorf("responses, seed %d: %q: %v", seed, text.String(), err)
		}

		_, b = post(t, ts, "/v1/messages", fmt.Sprintf(`{"model":"k3-test","max_tokens":300,"messages":[{"role":"user","content":"Weather in Paris, as JSON."}],
			"output_config":{"format":{"type":"json_schema","schema":%s}},"temperature":1,"metadata":{"user_id":"u%d"}}`, answerSchema, seed))
		var msg struct {
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(b, &msg); err != nil || msg.StopReason != "end_turn" || len(msg.Content) != 1 {
			t.Fatalf("messages, seed %d: %s", seed, b)
		}
		if err := v.Validate([]byte(msg.Content[0].Text)); err != nil {
			t.Errorf("messages, seed %d: %q: %v", seed, msg.Content[0].Text, err)
		}
	}
}

// TestForcedToolCallsWithClients: the official clients force tool calls
// (OpenAI's tool_choice required and named, Anthropic's any and tool); the
// model with random weights makes exactly the call asked for, with
// arguments valid under the tool's parameters.
func TestForcedToolCallsWithClients(t *testing.T) {
	ts, _ := newConstrainedServer(t)
	v := grammartest.NewValidator(t, boundedParams)
	var params map[string]any
	if err := json.Unmarshal([]byte(boundedParams), &params); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	oc := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	for k, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{
		{OfAuto: openai.String("required")},
		openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"}),
	} {
		want := []string{"", "get_time"}[k]
		for seed := range 2 {
			c, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:    "k3-test",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
				Tools: []openai.ChatCompletionToolUnionParam{
					openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: params}),
					openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time", Parameters: params}),
				},
				ToolChoice:        choice,
				ParallelToolCalls: openai.Bool(false),
				Seed:              openai.Int(int64(seed)),
				MaxTokens:         openai.Int(300),
			}, option.WithJSONSet("thinking", map[string]string{"type": "disabled"}))
			if err != nil {
				t.Fatal(err)
			}
			calls := c.Choices[0].Message.ToolCalls
			if c.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || c.Choices[0].Message.Content != "" {
				t.Fatalf("choice %d seed %d: %s", k, seed, c.RawJSON())
			}
			fn := calls[0].Function
			if want != "" && fn.Name != want || fn.Name != "get_weather" && fn.Name != "get_time" {
				t.Errorf("choice %d seed %d: called %q", k, seed, fn.Name)
			}
			if err := v.Validate([]byte(fn.Arguments)); err != nil {
				t.Errorf("choice %d seed %d: arguments %q: %v", k, seed, fn.Arguments, err)
			}
		}
	}

	ac := anthropicClient(ts.URL)
	schema := anthropic.ToolInputSchemaParam{Properties: params["properties"], Required: []string{"city", "days"}}
	for k, choice := range []anthropic.ToolChoiceUnionParam{
		{OfAny: &anthropic.ToolChoiceAnyParam{}},
		anthropic.ToolChoiceParamOfTool("get_time"),
	} {
		want := []string{"", "get_time"}[k]
		m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{
			Model:      "k3-test",
			MaxTokens:  300,
			Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))},
			Tools:      []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: schema}}, {OfTool: &anthropic.ToolParam{Name: "get_time", InputSchema: schema}}},
			ToolChoice: choice,
		}, aoption.WithJSONSet("temperature", 0)) // Messages has no seed: greedy, so the random weights' reply is the same every run
		if err != nil {
			t.Fatal(err)
		}
		var uses []anthropic.ToolUseBlock
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				uses = append(uses, b.AsToolUse())
			}
		}
		if m.StopReason != anthropic.StopReasonToolUse || len(uses) == 0 {
			t.Fatalf("tool choice %d: %s", k, m.RawJSON())
		}
		for _, u := range uses {
			if want != "" && u.Name != want {
				t.Errorf("tool choice %d: called %q", k, u.Name)
			}
			if err := v.Validate(u.Input); err != nil {
				t.Errorf("tool choice %d: input %s: %v", k, u.Input, err)
			}
		}
	}
}

// TestServerPrefixCache: an agent's next turn resends the conversation so
// far; its usage reports the tokens the prefix cache restored (every
// endpoint's field), and /metrics counts them.
func TestServerPrefixCache(t *testing.T) {
	records := make(chan slog.Record, 64)
	ts, _ := newConstrainedServerLog(t, slog.New(recordHandler(records)))
	header := strings.Repeat("You are a careful coding agent. Follow the repository's conventions. ", 12)
	turn1 := fmt.Sprintf(`{"role":"system","content":%q},{"role":"user","content":"Fix the failing test."}`, header)
	turn2 := turn1 + `,{"role":"assistant","content":"Done: the test passes."},{"role":"user","content":"Now add a benchmark."}`
	body := func(msgs string) string {
		return `{"messages":[` + msgs + `],"thinking":{"type":"disabled"},"max_tokens":2,"seed":1}`
	}
	cached := func(b []byte) (prompt, cached int) {
		var r struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return r.Usage.PromptTokens, r.Usage.Details.CachedTokens
	}
	_, b := post(t, ts, "/v1/chat/completions", body(turn1))
	p1, c := cached(b)
	if c != 0 || p1 < 100 {
		t.Fatalf("turn 1: %d prompt tokens, %d cached: %s", p1, c, b)
	}
	accessLog(t, records)
	_, b = post(t, ts, "/v1/chat/completions", body(turn2))
	p2, c2 := cached(b)
	if c2 < p1 || c2 >= p2 {
		t.Errorf("turn 2: %d prompt tokens, %d cached; want at least turn 1's %d", p2, c2, p1)
	}
	if a := accessLog(t, records); a["prompt_tokens"] != fmt.Sprint(p2) || a["cached_tokens"] != fmt.Sprint(c2) {
		t.Errorf("access log %v, want prompt_tokens %d and cached_tokens %d", a, p2, c2)
	}
	// Responses' prompt_cache_key goes to the access log, for a router.
	post(t, ts, "/v1/responses", `{"input":"hi","reasoning":{"effort":"none"},"max_output_tokens":1,"prompt_cache_key":"session-42","store":false}`)
	if a := accessLog(t, records); a["cache_key"] != "session-42" {
		t.Errorf("access log %v, want cache_key session-42", a)
	}
	// Anthropic's usage reports the same restore as cache_read_input_tokens
	// (the Messages API's system prompt renders as chat completions' does).
	_, b = post(t, ts, "/v1/messages", fmt.Sprintf(`{"model":"k3-test","max_tokens":2,"system":%q,
		"messages":[{"role":"user","content":"Fix the failing test."},{"role":"assistant","content":"Done: the test passes."},{"role":"user","content":"Now add a benchmark, please."}]}`, header))
	var am struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
			CacheRead   int `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &am); err != nil || am.Usage.CacheRead < p1 {
		t.Errorf("messages: want at least %d tokens read from the cache: %s", p1, b)
	}
	metrics := scrape(t, ts)
	if n := metricValue(t, metrics, "k3_prefix_cache_hits_total"); n < 2 {
		t.Errorf("k3_prefix_cache_hits_total %v, want at least 2", n)
	}
	if n := metricValue(t, metrics, "k3_prefix_cache_tokens_total"); n < float64(c2+am.Usage.CacheRead) {
		t.Errorf("k3_prefix_cache_tokens_total %v, want at least %d", n, c2+am.Usage.CacheRead)
	}
	if n := metricValue(t, metrics, `k3_prefix_cache_bytes{tier="ram"}`); n <= 0 {
		t.Errorf(`k3_prefix_cache_bytes{tier="ram"} %v`, n)
	}
}

// recordHandler sends every log record to records.
type recordHandler chan slog.Record

func (h recordHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error { h <- r.Clone(); return nil }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h recordHandler) WithGroup(string) slog.Handler                 { return h }

// accessLog waits for the next access log record (the server writes it
// once the response is out, so it may come after the client has the
// response) and returns its attributes.
func accessLog(t *testing.T, records chan slog.Record) map[string]string {
	t.Helper()
	for r := range records {
		if r.Message != "request" {
			continue
		}
		out := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			out[a.Key] = a.Value.String()
			return true
		})
		return out
	}
	return nil
}

func scrape(t *testing.T, ts *httptest.Server) string {
	t.Helper()
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue reads one sample (a name with its labels, as printed) from
// Prometheus' text format.
func metricValue(t *testing.T, text, sample string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no %s in the metrics", sample)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
