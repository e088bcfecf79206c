package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func TestMain(m *testing.M) { testmodel.Main(m) }

// newTestServer serves the quickstart checkpoint on an httptest server.
func newTestServer(t *testing.T, parallel int, hook func(*Server)) (*Server, *httptest.Server, *k3.Model) {
	t.Helper()
	m, err := k3.Open(testmodel.Dir(t), k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := New(m, Options{Name: "k3-test", Sessions: parallel})
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(s)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts, m
}

func post(t *testing.T, ts *httptest.Server, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// events reads a server-sent event stream: the data of each event, up to
// and including "[DONE]".
func events(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	br := bufio.NewReader(r)
	var data []string
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case line == "" && len(data) > 0:
			out = append(out, strings.Join(data, "\n"))
			data = nil
			if out[len(out)-1] == "[DONE]" {
				return out
			}
		case line != "" && !strings.HasPrefix(line, ":"):
			t.Fatalf("not an SSE line: %q", line)
		}
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			return out
		}
	}
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
		Param   *string `json:"param"`
	} `json:"error"`
}

func parse(t *testing.T, b []byte) completion {
	t.Helper()
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return c
}

// complete returns the text of a completion request, streamed or not,
// checking the envelope.
func complete(t *testing.T, ts *httptest.Server, path, body string) (text, finish string, c completion) {
	t.Helper()
	chat := strings.Contains(path, "chat")
	if !strings.Contains(body, `"stream":true`) {
		resp, b := post(t, ts, path, body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s", path, body, resp.StatusCode, b)
		}
		c = parse(t, b)
		if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || c.Usage == nil || c.Model != "k3-test" {
			t.Fatalf("response %s", b)
		}
		if chat {
			if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Choices[0].Message == nil || c.Choices[0].Message.Role != "assistant" {
				t.Fatalf("chat response %s", b)
			}
			return c.Choices[0].Message.Content, *c.Choices[0].FinishReason, c
		}
		if c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") {
			t.Fatalf("completion response %s", b)
		}
		return c.Choices[0].Text, *c.Choices[0].FinishReason, c
	}
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %q %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	ev := events(t, resp.Body)
	if len(ev) < 2 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("stream %q does not end with [DONE]", ev)
	}
	var b strings.Builder
	id := ""
	for i, e := range ev[:len(ev)-1] {
		ch := parse(t, []byte(e))
		if id == "" {
			id = ch.ID
		}
		if ch.ID != id || ch.Error != nil {
			t.Fatalf("event %d: %s", i, e)
		}
		if len(ch.Choices) == 0 { // the usage chunk
			c.Usage = ch.Usage
			continue
		}
		choice := ch.Choices[0]
		if chat {
			if ch.Object != "chat.completion.chunk" || choice.Delta == nil || (i == 0) != (choice.Delta.Role == "assistant") {
				t.Fatalf("chat chunk %d: %s", i, e)
			}
			if choice.Delta.Content != nil {
				b.WriteString(*choice.Delta.Content)
			}
		} else {
			if ch.Object != "text_completion" {
				t.Fatalf("chunk %d: %s", i, e)
			}
			b.WriteString(choice.Text)
		}
		if choice.FinishReason != nil {
			finish = *choice.FinishReason
		}
	}
	if finish == "" {
		t.Fatalf("no finish_reason in %q", ev)
	}
	return b.String(), finish, c
}

// jsonText is s as it reads after a trip through JSON: every byte that is
// not part of valid UTF-8 becomes U+FFFD. (The quickstart model's random
// weights produce such bytes; a real model's text is valid UTF-8, which
// Token.Text never splits.)
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// asciiPair returns the index, after the first byte, of two printable
// ASCII characters in a row in s, or -1.
func asciiPair(s string) int {
	for i := 1; i+1 < len(s); i++ {
		if s[i] > ' ' && s[i] < 0x7f && s[i+1] > ' ' && s[i+1] < 0x7f && strings.Index(s, s[i:i+2]) == i {
			return i
		}
	}
	return -1
}

func TestModels(t *testing.T) {
	_, ts, _ := newTestServer(t, 0, nil)
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if resp.StatusCode != 200 || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "k3-test" || list.Data[0].Object != "model" {
		t.Errorf("models: %d %+v", resp.StatusCode, list)
	}
}

// TestCompletions: a completion, streamed or not, is GenerateText's text;
// prompts as strings or ids, echo, stop, seeds and usage are honoured.
func TestCompletions(t *testing.T) {
	_, ts, m := newTestServer(t, 0, nil)
	ctx := context.Background()
	tok := m.Tokenizer()
	eos, _ := tok.ID("[EOS]")
	const prompt = "Once upon a time"
	raw, err := m.GenerateText(ctx, prompt, k3.GenerateOptions{MaxTokens: 12, StopTokens: []int{eos}})
	if err != nil {
		t.Fatal(err)
	}
	want := jsonText(raw)
	body := `{"model":"k3-test","prompt":"Once upon a time","max_tokens":12,"temperature":0}`
	text, finish, c := complete(t, ts, "/v1/completions", body)
	if text != want || finish != "length" {
		t.Errorf("completion %q (%s), want %q", text, finish, want)
	}
	if n := len(tok.Encode(prompt)); c.Usage.PromptTokens != n || c.Usage.CompletionTokens != 12 || c.Usage.TotalTokens != n+12 {
		t.Errorf("usage %+v, prompt has %d tokens", *c.Usage, n)
	}
	stream, finish, c := complete(t, ts, "/v1/completions", strings.TrimSuffix(body, "}")+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if stream != want || finish != "length" || c.Usage == nil || c.Usage.CompletionTokens != 12 {
		t.Errorf("streamed %q (%s, usage %+v), want %q", stream, finish, c.Usage, want)
	}
	ids, _ := json.Marshal(tok.Encode(prompt))
	if text, _, _ := complete(t, ts, "/v1/completions", `{"prompt":`+string(ids)+`,"max_tokens":12,"temperature":0}`); text != want {
		t.Errorf("prompt as ids: %q", text)
	}
	if text, _, _ := complete(t, ts, "/v1/completions", `{"prompt":["Once upon a time"],"max_tokens":12,"temperature":0,"echo":true}`); text != prompt+want {
		t.Errorf("echo: %q", text)
	}
	if text, _, _ := complete(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"echo":true,"stream":true}`); text != prompt+want {
		t.Errorf("echo, streamed: %q", text)
	}
	// A stop string ends the text before it.
	if i := asciiPair(raw); i > 0 {
		stop, _ := json.Marshal(raw[i : i+2])
		for _, stream := range []string{"false", "true"} {
			text, finish, _ := complete(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stop":[`+string(stop)+`],"stream":`+stream+`}`)
			if cut := jsonText(raw[:i]); text != cut || finish != "stop" {
				t.Errorf("stop %s (stream %s): %q (%s), want %q", stop, stream, text, finish, cut)
			}
		}
	} else {
		t.Errorf("no two printable ASCII characters in a row in %q", raw)
	}
	// Seeds: the same seed, the same text.
	sampled := `{"prompt":"Once upon a time","max_tokens":16,"temperature":1,"top_p":0.9,"seed":%d}`
	a, _, _ := complete(t, ts, "/v1/completions", fmt.Sprintf(sampled, 5))
	b, _, _ := complete(t, ts, "/v1/completions", fmt.Sprintf(sampled, 5))
	o6, _, _ := complete(t, ts, "/v1/completions", fmt.Sprintf(sampled, 6))
	o7, _, _ := complete(t, ts, "/v1/completions", fmt.Sprintf(sampled, 7))
	if a != b || (a == o6 && a == o7) {
		t.Errorf("seed 5: %q and %q; 6: %q; 7: %q", a, b, o6, o7)
	}
	// top_p honoured: a nucleus of one token is greedy at any temperature.
	if text, _, _ := complete(t, ts, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":1.5,"top_p":0.000001,"seed":3}`); text != want {
		t.Errorf("top_p 1e-6: %q, want the greedy %q", text, want)
	}
	// Default max_tokens is 16.
	if _, _, c := complete(t, ts, "/v1/completions", `{"prompt":"Hi","temperature":0}`); c.Usage.CompletionTokens > 16 {
		t.Errorf("default max_tokens: %d tokens", c.Usage.CompletionTokens)
	}
}

// TestChat: a chat completion is what a Conversation replies, streamed or
// not, with content given as a string or as text parts.
func TestChat(t *testing.T) {
	_, ts, m := newTestServer(t, 0, nil)
	eos, _ := m.Tokenizer().ID("[EOS]")
	conv, err := m.NewConversation("You are terse.")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for tk, err := range conv.Send(context.Background(), "What is 2+2? <|end_of_msg|>", k3.GenerateOptions{MaxTokens: 10, StopTokens: []int{eos}}) {
		if err != nil {
			t.Fatal(err)
		}
		want.WriteString(tk.Text)
	}
	wantText := jsonText(want.String())
	for _, body := range []string{
		`{"model":"k3-test","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is 2+2? <|end_of_msg|>"}],"max_tokens":10,"temperature":0}`,
		`{"messages":[{"role":"developer","content":[{"type":"text","text":"You are "},{"type":"text","text":"terse."}]},{"role":"user","content":"What is 2+2? <|end_of_msg|>"}],"max_completion_tokens":10,"temperature":0}`,
		`{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"What is 2+2? <|end_of_msg|>"}],"max_tokens":10,"temperature":0,"stream":true}`,
	} {
		text, finish, _ := complete(t, ts, "/v1/chat/completions", body)
		if text != wantText || finish == "" {
			t.Errorf("%s:\n got %q (%s)\nwant %q", body, text, finish, wantText)
		}
	}
	// A history with an assistant turn is accepted.
	if _, _, c := complete(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."},{"role":"user","content":"Bye"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`); c.Usage == nil || c.Usage.PromptTokens < 12 {
		t.Errorf("history: usage %+v", c.Usage)
	}
}

// goTypeName matches Go type names that must not reach a user.
var goTypeName = regexp.MustCompile(`\b(u?int(8|16|32|64)|float(32|64))\b|\*[a-z]|\[\][a-z]|json\.|Go (value|struct)|\bstruct\b|\b(chat|server|k3|main)[.:]`)

func TestErrors(t *testing.T) {
	_, ts, _ := newTestServer(t, 0, nil)
	big := `{"prompt":"` + strings.Repeat("a", 9<<20) + `"}`
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/completions", `{"prompt":`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x"} {}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":"many"}`, 400, ""},
		{"POST", "/v1/completions", `{}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":""}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":[1,2,99999]}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","n":5}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","n":0}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","frobnicate":1}`, 400, "unsupported_parameter"},
		{"POST", "/v1/completions", `{"prompt":"x","logit_bias":{"5":10}}`, 400, "unsupported_parameter"},
		{"POST", "/v1/completions", `{"prompt":"x","suffix":"y"}`, 400, "unsupported_parameter"},
		{"POST", "/v1/completions", `{"prompt":"x","best_of":2}`, 400, "unsupported_parameter"},
		{"POST", "/v1/completions", `[1,2]`, 400, ""},
		{"POST", "/v1/completions", ``, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"` + strings.Repeat("a", 6<<20) + `"}`, 400, "context_length_exceeded"},
		{"POST", "/v1/completions", `{"prompt":"x","temperature":3}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","top_p":0}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":100000}`, 400, "context_length_exceeded"},
		{"POST", "/v1/completions", `{"prompt":"x","stop":["a","b","c","d","e"]}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","stop":""}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","logprobs":21}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","logprobs":-1}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","presence_penalty":5}`, 400, ""},
		{"POST", "/v1/completions", `{"prompt":"x","model":"gpt-4"}`, 404, "model_not_found"},
		{"POST", "/v1/completions", big, 413, ""},
		{"POST", "/v1/chat/completions", `{"messages":[]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"x"}]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":{"a":1}}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"medium"}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"maybe"}}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"disabled"},"reasoning_effort":"low"}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":3}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"stream":true,"n":7}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"nonsense"}}}}`, 400, "invalid_json_schema"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":{"type":"array","uniqueItems":true}}}}`, 400, "unsupported_json_schema"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"audio":{}}`, 400, "unsupported_parameter"},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"messages":"hi"}`, 400, ""},
		{"POST", "/tokenize", `{"content":5}`, 400, ""},
		{"POST", "/detokenize", `{"tokens":[-1]}`, 400, ""},
		{"GET", "/v1/models/gpt-4", ``, 404, "model_not_found"},
		{"GET", "/tokenize", ``, 405, ""},
		{"GET", "/v1/completions", ``, 405, ""},
		{"POST", "/v1/models", `{}`, 405, ""},
		{"GET", "/v1/embeddings", ``, 404, "unknown_url"},
	} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := parse(t, b)
		name := c.path + " " + c.body[:min(len(c.body), 60)]
		if got.Error != nil && goTypeName.MatchString(got.Error.Message) {
			t.Errorf("%s: the message %q names a Go type", name, got.Error.Message)
		}
		if resp.StatusCode != c.status || got.Error == nil || got.Error.Message == "" || got.Error.Type == "" || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d and an error object", name, resp.StatusCode, b, c.status)
			continue
		}
		if c.code != "" && (got.Error.Code == nil || *got.Error.Code != c.code) {
			t.Errorf("%s: code %v, want %s", name, got.Error.Code, c.code)
		}
		if c.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s: no Allow header", name)
		}
	}
}

// TestConcurrent: requests in flight together each get their own session
// and the same answers as one at a time.
// TestSpeculatingServer: with Speculate set, completions are exactly the
// plain server's.
func TestSpeculatingServer(t *testing.T) {
	_, plain, _ := newTestServer(t, 0, nil)
	_, spec, m := newTestServer(t, 0, func(s *Server) { s.opts.Speculate = 4 })
	body := `{"prompt":"one two three one two three one two","max_tokens":24,"temperature":0}`
	want, _, _ := complete(t, plain, "/v1/completions", body)
	before := m.Stats()
	got, _, _ := complete(t, spec, "/v1/completions", body)
	if got != want {
		t.Fatalf("speculating: %q, plain: %q", got, want)
	}
	if m.Stats().Sub(before).SpecPasses == 0 {
		t.Fatal("the speculating server never speculated")
	}
}

func TestConcurrent(t *testing.T) {
	var maxActive atomic.Int64
	var srv *Server
	_, ts, m := newTestServer(t, 3, func(s *Server) {
		srv = s
		s.afterToken = func() {
			for {
				cur, n := maxActive.Load(), s.Active()
				if n <= cur || maxActive.CompareAndSwap(cur, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	type job struct{ path, body string }
	var jobs []job
	for i := range 8 {
		stream := []string{"false", "true"}[i%2]
		if i%4 < 2 {
			jobs = append(jobs, job{"/v1/completions", fmt.Sprintf(`{"prompt":"Request number %d says","max_tokens":10,"temperature":0,"stream":%s}`, i, stream)})
		} else {
			jobs = append(jobs, job{"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Question %d"}],"max_tokens":10,"temperature":0.7,"seed":%d,"stream":%s}`, i, i, stream)})
		}
	}
	want := make([]string, len(jobs))
	for i, j := range jobs {
		want[i], _, _ = complete(t, ts, j.path, j.body)
	}
	maxActive.Store(0)
	before := m.Stats()
	got := make([]string, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { got[i], _, _ = complete(t, ts, j.path, j.body) })
	}
	wg.Wait()
	// The concurrent requests went through shared passes (the batcher).
	if d := m.Stats().Sub(before); d.Rows <= d.Passes {
		t.Errorf("%d rows in %d passes: concurrent requests never shared a pass", d.Rows, d.Passes)
	}
	for i := range jobs {
		if got[i] != want[i] {
			t.Errorf("request %d concurrently: %q, alone: %q", i, got[i], want[i])
		}
	}
	if n := maxActive.Load(); n < 2 || n > 3 {
		t.Errorf("at most %d generations ran at once, want 2 or 3 (Sessions 3)", n)
	}
	if srv.Active() != 0 {
		t.Errorf("%d generations still active", srv.Active())
	}
}

// TestDisconnect: a client that goes away mid-stream, or before a
// non-streamed answer is ready, cancels its generation.
func TestDisconnect(t *testing.T) {
	var tokens atomic.Int64
	s, ts, _ := newTestServer(t, 0, func(s *Server) {
		s.afterToken = func() { tokens.Add(1); time.Sleep(2 * time.Millisecond) }
	})
	wait := func(cancelled int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.Active() != 0 || s.Cancelled() != cancelled {
			if time.Now().After(deadline) {
				t.Fatalf("after the client left: %d active, %d cancelled (want 0, %d)", s.Active(), s.Cancelled(), cancelled)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for path, body := range map[string]string{
		"/v1/completions":      `{"prompt":"Tell me everything","max_tokens":3000,"stream":true,"temperature":0}`,
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"Tell me everything"}],"max_tokens":3000,"stream":true,"temperature":0}`,
		"/v1/responses":        `{"input":"Tell me everything","max_output_tokens":3000,"stream":true,"temperature":0}`,
		"/v1/messages":         `{"messages":[{"role":"user","content":"Tell me everything"}],"max_tokens":3000,"stream":true,"temperature":0}`,
	} {
		tokens.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, bytes.NewReader([]byte(body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Read three events: the generation is under way.
		br := bufio.NewReader(resp.Body)
		for n := 0; n < 3; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v after %d events", path, err, n)
			}
			if strings.HasPrefix(line, "data: ") {
				n++
			}
		}
		before := s.Cancelled()
		cancel()
		resp.Body.Close()
		wait(before + 1)
		if n := tokens.Load(); n >= 3000 {
			t.Errorf("%s: the generation ran to the end (%d tokens)", path, n)
		} else {
			t.Logf("%s: stopped after %d tokens", path, n)
		}
	}
	// Not streamed: the client gives up waiting.
	tokens.Store(0)
	before := s.Cancelled()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"Go on","max_tokens":3000,"temperature":0}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the request finished before its deadline")
	}
	wait(before + 1)
	if n := tokens.Load(); n >= 3000 {
		t.Errorf("non-streamed: the generation ran to the end (%d tokens)", n)
	}
}

// TestChatReasoning: a chat reply's reasoning is the Conversation's, whole
// in message.reasoning_content or streamed as reasoning_content deltas.
func TestChatReasoning(t *testing.T) {
	_, ts, m := newTestServer(t, 0, nil)
	conv, err := m.NewConversation("You are terse.")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range conv.Send(context.Background(), "Think first.", k3.GenerateOptions{MaxTokens: 12}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := conv.Reply()
	if want.ReasoningContent == "" {
		t.Fatal("test setup: the reply has no reasoning")
	}
	// JSON carries the random model's stray bytes as U+FFFD.
	want.ReasoningContent, want.Content = jsonText(want.ReasoningContent), jsonText(want.Content)
	body := `{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Think first."}],"max_tokens":12,"temperature":0`
	_, b := post(t, ts, "/v1/chat/completions", body+"}")
	var whole struct {
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				ReasoningContent string  `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &whole); err != nil || len(whole.Choices) != 1 || whole.Choices[0].Message.ReasoningContent != want.ReasoningContent ||
		whole.Choices[0].Message.Content == nil || *whole.Choices[0].Message.Content != want.Content {
		t.Errorf("reply %s, want reasoning %q and content %q", b, want.ReasoningContent, want.Content)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reasoning strings.Builder
	for _, e := range events(t, resp.Body) {
		var ch struct {
			Choices []struct {
				Delta struct {
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if e != "[DONE]" && json.Unmarshal([]byte(e), &ch) == nil && len(ch.Choices) == 1 {
			reasoning.WriteString(ch.Choices[0].Delta.ReasoningContent)
		}
	}
	if reasoning.String() != want.ReasoningContent {
		t.Errorf("streamed reasoning %q, want %q", reasoning.String(), want.ReasoningContent)
	}
}
