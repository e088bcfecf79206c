package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// newClient serves the quickstart checkpoint with o and returns the
// official client pointed at it.
func newClient(t *testing.T, o Options, hook func(*Server)) (openai.Client, *httptest.Server, *Server, *k3.Model) {
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
	if hook != nil {
		hook(s)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	c := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return c, ts, s, m
}

func apiErr(t *testing.T, err error, status int, param string) {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an API error %d", err, status)
	}
	if e.StatusCode != status || e.Message == "" || (param != "" && e.Param != param) {
		t.Fatalf("error %d param %q %q, want %d param %q", e.StatusCode, e.Param, e.Message, status, param)
	}
}

// TestOpenAIClient drives every endpoint with the official client.
func TestOpenAIClient(t *testing.T) {
	c, _, _, m := newClient(t, Options{}, nil)
	ctx := context.Background()

	// Models: list and retrieve, and an unknown one.
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "k3-test" {
		t.Fatalf("models.list: %+v %v", page, err)
	}
	if got, err := c.Models.Get(ctx, "k3-test"); err != nil || got.ID != "k3-test" || got.Object != "model" {
		t.Fatalf("models.retrieve: %+v %v", got, err)
	}
	_, err = c.Models.Get(ctx, "gpt-4")
	apiErr(t, err, 404, "model")

	// Completions: stop, seed, max_tokens; the stream is the same text.
	tok := m.Tokenizer()
	eos, _ := tok.ID("[EOS]")
	params := openai.CompletionNewParams{Model: "k3-test", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("The weather today")},
		MaxTokens: openai.Int(12), Temperature: openai.Float(0.9), Seed: openai.Int(42)}
	one, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.GenerateText(ctx, "The weather today", k3.GenerateOptions{MaxTokens: 12, StopTokens: []int{eos},
		Sampling: k3.SamplingOptions{Temperature: 0.9, TopP: 1, Seed: 42}})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Choices) != 1 || one.Choices[0].Text != jsonText(want) || one.Usage.CompletionTokens == 0 {
		t.Fatalf("completion %q, want %q (%s)", one.Choices[0].Text, jsonText(want), one.RawJSON())
	}
	stream := c.Completions.NewStreaming(ctx, params)
	var streamed strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			streamed.WriteString(ch.Text)
		}
	}
	if err := stream.Err(); err != nil || streamed.String() != one.Choices[0].Text {
		t.Fatalf("streamed %q (%v), want %q", streamed.String(), err, one.Choices[0].Text)
	}
	{
		// A stop string cuts the text before it.
		i := asciiPair(want)
		if i <= 0 {
			t.Fatalf("test setup: no two ASCII characters in %q to stop at", want)
		}
		stop := want[i : i+2]
		p := params
		p.Stop = openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}
		got, err := c.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got.Choices[0].Text, stop) || !strings.HasPrefix(jsonText(want), got.Choices[0].Text) || got.Choices[0].FinishReason != "stop" {
			t.Errorf("stop %q: %q (%s)", stop, got.Choices[0].Text, got.Choices[0].FinishReason)
		}
	}

	// n: three choices over one prefill; choice i is the single request
	// with seed 42+i.
	p := params
	p.N = openai.Int(3)
	three, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(three.Choices) != 3 {
		t.Fatalf("n=3: %d choices", len(three.Choices))
	}
	for i, ch := range three.Choices {
		q := params
		q.Seed = openai.Int(42 + int64(i))
		alone, err := c.Completions.New(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Index != int64(i) || ch.Text != alone.Choices[0].Text {
			t.Errorf("n=3 choice %d: %q, alone with seed %d: %q", i, ch.Text, 42+i, alone.Choices[0].Text)
		}
	}
	if three.Usage.PromptTokens != one.Usage.PromptTokens {
		t.Errorf("n=3 counts %d prompt tokens, one choice %d", three.Usage.PromptTokens, one.Usage.PromptTokens)
	}
	sn := c.Completions.NewStreaming(ctx, p)
	texts := make([]string, 3)
	for sn.Next() {
		for _, ch := range sn.Current().Choices {
			texts[ch.Index] += ch.Text
		}
	}
	if err := sn.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		if texts[i] != three.Choices[i].Text {
			t.Errorf("streamed n=3 choice %d: %q, want %q", i, texts[i], three.Choices[i].Text)
		}
	}

	// Logprobs: the library's values, in the legacy shape.
	p = params
	p.Logprobs = openai.Int(3)
	lp, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var ref []k3.Token
	for tk, err := range m.Generate(ctx, tok.Encode("The weather today"), k3.GenerateOptions{MaxTokens: 12, StopTokens: []int{eos},
		Logprobs: true, TopLogprobs: 3, Sampling: k3.SamplingOptions{Temperature: 0.9, TopP: 1, Seed: 42}}) {
		if err != nil {
			t.Fatal(err)
		}
		if tk.ID != eos {
			ref = append(ref, tk)
		}
	}
	l := lp.Choices[0].Logprobs
	if len(l.Tokens) != len(ref) || len(l.TokenLogprobs) != len(ref) || len(l.TopLogprobs) != len(ref) || len(l.TextOffset) != len(ref) {
		t.Fatalf("logprobs for %d tokens, want %d: %s", len(l.Tokens), len(ref), lp.RawJSON())
	}
	for k, r := range ref {
		if float32(l.TokenLogprobs[k]) != r.Logprob || len(l.TopLogprobs[k]) == 0 || len(l.TopLogprobs[k]) > 3 {
			t.Errorf("token %d: logprob %v top %v, want %v", k, l.TokenLogprobs[k], l.TopLogprobs[k], r.Logprob)
		}
		best := math.Inf(-1)
		for _, v := range l.TopLogprobs[k] {
			best = math.Max(best, v)
		}
		if float32(best) != r.TopLogprobs[0].Logprob || l.TokenLogprobs[k] > best {
			t.Errorf("token %d: best alternative %v, want %v", k, best, r.TopLogprobs[0].Logprob)
		}
	}

	// Chat: n, logprobs, usage in the stream.
	cp := openai.ChatCompletionNewParams{Model: "k3-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi there")},
		MaxCompletionTokens: openai.Int(10), Temperature: openai.Float(0.8), Seed: openai.Int(5), N: openai.Int(2),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2)}
	cc, err := c.Chat.Completions.New(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Choices) != 2 || cc.Usage.CompletionTokens == 0 {
		t.Fatalf("chat n=2: %s", cc.RawJSON())
	}
	for i, ch := range cc.Choices {
		if ch.Index != int64(i) || len(ch.Logprobs.Content) == 0 {
			t.Fatalf("chat choice %d: %s", i, cc.RawJSON())
		}
		for _, e := range ch.Logprobs.Content {
			if e.Logprob > 0 || len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Logprob < e.TopLogprobs[1].Logprob || e.Logprob > e.TopLogprobs[0].Logprob {
				t.Fatalf("chat logprob entry %+v", e)
			}
		}
	}
	cp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	cs := c.Chat.Completions.NewStreaming(ctx, cp)
	var acc openai.ChatCompletionAccumulator
	nlp := make([]int, 2)
	for cs.Next() {
		ch := cs.Current()
		acc.AddChunk(ch)
		for _, x := range ch.Choices {
			nlp[x.Index] += len(x.Logprobs.Content)
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 2 || acc.Usage.TotalTokens != cc.Usage.TotalTokens {
		t.Fatalf("streamed chat: %d choices, usage %+v, want %+v", len(acc.Choices), acc.Usage, cc.Usage)
	}
	for i := range 2 {
		if acc.Choices[i].Message.Content != cc.Choices[i].Message.Content || nlp[i] != len(cc.Choices[i].Logprobs.Content) {
			t.Errorf("streamed chat choice %d: %q with %d logprobs, want %q with %d", i, acc.Choices[i].Message.Content, nlp[i],
				cc.Choices[i].Message.Content, len(cc.Choices[i].Logprobs.Content))
		}
	}

	// Errors in OpenAI's shape, naming the field.
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "k3-test", Messages: cp.Messages, Temperature: openai.Float(5)})
	apiErr(t, err, 400, "temperature")
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "k3-test", Messages: cp.Messages,
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
			JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "s", Strict: openai.Bool(true),
				Schema: map[string]any{"type": "array", "uniqueItems": true}}}}})
	apiErr(t, err, 400, "response_format")
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "k3-test", Prompt: params.Prompt, LogitBias: map[string]int64{"1": 5}})
	apiErr(t, err, 400, "logit_bias")
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "k3-test", Prompt: params.Prompt, MaxTokens: openai.Int(1 << 20)})
	apiErr(t, err, 400, "max_tokens")
}

func get(t *testing.T, url string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestOperatorEndpoints: /health, /metrics, /tokenize, /detokenize, the
// loading handler, Drain.
func TestOperatorEndpoints(t *testing.T) {
	_, ts, s, m := newClient(t, Options{}, nil)
	if code, _, body := get(t, ts.URL+"/health"); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Errorf("/health: %d %s", code, body)
	}
	resp, b := post(t, ts, "/tokenize", `{"content":"Hello world<|end_of_msg|>"}`)
	var tk struct {
		Tokens []int `json:"tokens"`
	}
	parseJSON(t, b, &tk)
	if resp.StatusCode != 200 || !slices.Equal(tk.Tokens, m.Tokenizer().Encode("Hello world<|end_of_msg|>")) {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, b)
	}
	_, b = post(t, ts, "/tokenize", `{"content":"<|end_of_msg|>","parse_special":false,"with_pieces":true}`)
	var pieces struct {
		Tokens []struct {
			ID    int `json:"id"`
			Piece any `json:"piece"`
		} `json:"tokens"`
	}
	parseJSON(t, b, &pieces)
	if len(pieces.Tokens) < 2 {
		t.Errorf("parse_special false: %s (want the marker as plain text, several tokens)", b)
	}
	ids, _ := json.Marshal(tk.Tokens)
	_, b = post(t, ts, "/detokenize", `{"tokens":`+string(ids)+`}`)
	var dt struct {
		Content string `json:"content"`
	}
	parseJSON(t, b, &dt)
	if dt.Content != "Hello world<|end_of_msg|>" {
		t.Errorf("/detokenize: %s", b)
	}

	// Generate something, then scrape.
	complete(t, ts, "/v1/completions", `{"prompt":"Count","max_tokens":5,"temperature":0,"ignore_eos":true}`)
	code, hdr, body := get(t, ts.URL+"/metrics")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %s", code, hdr.Get("Content-Type"))
	}
	for _, want := range []string{
		`k3_requests_total{endpoint="/v1/completions",status="200"} 1`,
		`k3_requests_total{endpoint="/tokenize",status="200"} 2`,
		"k3_generated_tokens_total 5", "k3_prompt_tokens_total ", "k3_queue_depth 0", "k3_running_sequences 0",
		"k3_pass_rows_bucket{le=\"1\"}", "k3_pass_rows_count ", "k3_pass_seconds_count ",
		`k3_bytes_read_total{kind="trunk"}`, `k3_bytes_read_total{kind="experts"}`, "k3_expert_cache_hit_ratio ",
		"k3_resident_memory_bytes ", "process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if d := m.Stats(); !strings.Contains(body, fmt.Sprintf("k3_passes_total %d", d.Passes)) {
		t.Errorf("/metrics: k3_passes_total is not Stats().Passes = %d", d.Passes)
	}

	s.Drain()
	if code, _, _ := get(t, ts.URL+"/health"); code != 503 {
		t.Errorf("/health while draining: %d, want 503", code)
	}
	lt := httptest.NewServer(Loading())
	defer lt.Close()
	if code, hdr, body := get(t, lt.URL+"/health"); code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "loading") {
		t.Errorf("/health while loading: %d %s", code, body)
	}
	if code, _, body := get(t, lt.URL+"/v1/models"); code != 503 || !strings.Contains(body, `"error"`) {
		t.Errorf("/v1/models while loading: %d %s", code, body)
	}
	if resp, body := post(t, lt, "/v1/messages", `{}`); resp.StatusCode != 503 || !strings.Contains(string(body), `"type":"overloaded_error"`) {
		t.Errorf("/v1/messages while loading: %d %s", resp.StatusCode, body)
	}
}

// TestAPIKeyAndCORS: both are opt-in; /health and preflights need no key.
func TestAPIKeyAndCORS(t *testing.T) {
	_, ts, _, _ := newClient(t, Options{APIKey: "sekrit", CORSOrigin: "https://app.example"}, nil)
	if code, hdr, body := get(t, ts.URL+"/v1/models"); code != 401 || hdr.Get("WWW-Authenticate") == "" || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("no key: %d %s", code, body)
	}
	if code, _, _ := get(t, ts.URL+"/v1/models", "Authorization", "Bearer wrong"); code != 401 {
		t.Errorf("wrong key: %d", code)
	}
	code, hdr, _ := get(t, ts.URL+"/v1/models", "Authorization", "Bearer sekrit")
	if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("right key: %d, CORS %q", code, hdr.Get("Access-Control-Allow-Origin"))
	}
	if code, _, _ := get(t, ts.URL+"/health"); code != 200 {
		t.Errorf("/health without a key: %d", code)
	}
	req, _ := http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || !strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	c := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("sekrit"), option.WithMaxRetries(0))
	if _, err := c.Models.Get(context.Background(), "k3-test"); err != nil {
		t.Errorf("the client with the key: %v", err)
	}
	// Without CORS configured, no CORS headers.
	_, ts2, _, _ := newClient(t, Options{}, nil)
	if _, hdr, _ := get(t, ts2.URL+"/v1/models"); hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS headers without --cors: %v", hdr)
	}
}

func parseJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
}
