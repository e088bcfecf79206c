package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k3go/k3/chat"
)

// ollamaLine is a line of an /api/chat or /api/generate answer.
type ollamaLine struct {
	Model     string `json:"model"`
	CreatedAt string `json:"created_at"`
	Message   *struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Index     int             `json:"index"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Response           *string `json:"response"`
	Thinking           string  `json:"thinking"`
	Done               bool    `json:"done"`
	DoneReason         string  `json:"done_reason"`
	TotalDuration      int64   `json:"total_duration"`
	LoadDuration       int64   `json:"load_duration"`
	PromptEvalCount    int     `json:"prompt_eval_count"`
	PromptEvalDuration int64   `json:"prompt_eval_duration"`
	EvalCount          int     `json:"eval_count"`
	EvalDuration       int64   `json:"eval_duration"`
	Logprobs           []struct {
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		TopLogprobs []struct {
			Token string `json:"token"`
		} `json:"top_logprobs"`
	} `json:"logprobs"`
	Error string `json:"error"`
}

// ollamaPost sends body to path and returns the status, the content type
// and the answer's lines (one when not streamed).
func ollamaPost(t *testing.T, ts *httptest.Server, path, body string) (int, string, []ollamaLine) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lines []ollamaLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l ollamaLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: a line that is not JSON: %q", path, sc.Text())
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), lines
}

// TestOllamaGoldenTranslation: a conversation asked through /api/chat
// (tools, an assistant turn with thinking and a tool call whose
// arguments are an object, the tool's result by tool_name, a think level)
// renders to exactly the ids of the equivalent chat completion; so does
// one with think false, one with format, and /api/generate's system and
// prompt.
func TestOllamaGoldenTranslation(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, func(string) *chat.Message { return &chat.Message{} })
	chatTools := `[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":` + weatherSchema + `}}]`
	for _, c := range []struct {
		name, chat, ollamaPath, ollama string
	}{
		{
			name: "tools and thinking",
			chat: `{"messages":[{"role":"system","content":"You are a weather bot."},{"role":"user","content":"What is the weather in Paris?"},` +
				`{"role":"assistant","content":"Checking.","reasoning_content":"I should look it up.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":"18 C and sunny"},{"role":"user","content":"And tomorrow?"}],` +
				`"tools":` + chatTools + `,"reasoning_effort":"high","max_tokens":50}`,
			ollamaPath: "/api/chat",
			ollama: `{"model":"k3-test","stream":false,"messages":[{"role":"system","content":"You are a weather bot."},{"role":"user","content":"What is the weather in Paris?"},` +
				`{"role":"assistant","content":"Checking.","thinking":"I should look it up.","tool_calls":[{"function":{"index":0,"name":"get_weather","arguments":{"city":"Paris","days":2}}}]},` +
				`{"role":"tool","tool_name":"get_weather","content":"18 C and sunny"},{"role":"user","content":"And tomorrow?"}],` +
				`"tools":` + chatTools + `,"think":"medium","options":{"num_predict":50}}`,
		},
		{
			name: "no thinking",
			chat: `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello.","reasoning_content":"dropped"},{"role":"user","content":"Bye"}],` +
				`"thinking":{"type":"disabled"},"max_tokens":50}`,
			ollamaPath: "/api/chat",
			ollama: `{"model":"k3-test:latest","stream":false,"messages":[{"role":"System","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello.","thinking":"dropped"},{"role":"user","content":"Bye"}],` +
				`"think":false,"keep_alive":"10m","options":{"num_predict":50,"temperature":0.2,"mirostat":0}}`,
		},
		{
			name:       "format",
			chat:       `{"messages":[{"role":"user","content":"Weather?"}],"response_format":{"type":"json_schema","json_schema":{"name":"format","schema":` + weatherSchema + `,"strict":false}},"max_tokens":5}`,
			ollamaPath: "/api/chat",
			ollama:     `{"model":"k3-test","stream":false,"messages":[{"role":"user","content":"Weather?"}],"format":` + weatherSchema + `,"options":{"num_predict":5}}`,
		},
		{
			name:       "generate",
			chat:       `{"messages":[{"role":"system","content":"Answer in French."},{"role":"user","content":"Why is the sky blue?"}],"reasoning_effort":"low","max_tokens":5}`,
			ollamaPath: "/api/generate",
			ollama:     `{"model":"k3-test","stream":false,"system":"Answer in French.","prompt":"Why is the sky blue?","think":"low","options":{"num_predict":5}}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, x := range []struct{ path, body string }{{"/v1/chat/completions", c.chat}, {c.ollamaPath, c.ollama}} {
				if resp, b := post(t, ts, x.path, x.body); resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", x.path, resp.StatusCode, b)
				}
			}
			p := log.last(t, 2)
			if !slices.Equal(p[1], p[0]) {
				t.Errorf("%s renders\n%q\nchat completions\n%q", c.ollamaPath, log.text(t, -1), log.text(t, -2))
			}
		})
	}
}

// TestOllamaChat: /api/chat streams NDJSON by default (thinking, content,
// a tool call with its arguments as an object, a last line with
// done_reason and the metrics) and answers one object with "stream":
// false; the tool's result goes back and the model answers.
func TestOllamaChat(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, weatherAnswer)
	body := `{"model":"k3-test","messages":[{"role":"user","content":"What is the weather in Paris?"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":` + weatherSchema + `}}],"options":{"num_predict":400}}`
	status, ctype, lines := ollamaPost(t, ts, "/api/chat", body)
	if status != 200 || ctype != "application/x-ndjson" || len(lines) < 3 {
		t.Fatalf("stream: %d %q %d lines", status, ctype, len(lines))
	}
	var thinking, content strings.Builder
	var calls int
	for i, l := range lines {
		if l.Model != "k3-test" || l.CreatedAt == "" || l.Message == nil || l.Message.Role != "assistant" || l.Done != (i == len(lines)-1) {
			t.Fatalf("line %d: %+v", i, l)
		}
		thinking.WriteString(l.Message.Thinking)
		content.WriteString(l.Message.Content)
		for _, c := range l.Message.ToolCalls {
			calls++
			if c.ID == "" || c.Function.Name != "get_weather" || c.Function.Index != 0 || string(c.Function.Arguments) != `{"city":"Paris","days":2}` {
				t.Errorf("streamed call %+v (%s)", c, c.Function.Arguments)
			}
		}
	}
	last := lines[len(lines)-1]
	if thinking.String() != "I should look it up." || content.String() != "Checking." || calls != 1 {
		t.Errorf("streamed thinking %q content %q calls %d", thinking.String(), content.String(), calls)
	}
	if last.DoneReason != "stop" || last.PromptEvalCount <= 0 || last.EvalCount <= 0 || last.TotalDuration <= 0 ||
		last.TotalDuration < last.LoadDuration+last.PromptEvalDuration+last.EvalDuration {
		t.Errorf("last line %+v", last)
	}

	// Not streamed, then the tool's result.
	status, ctype, lines = ollamaPost(t, ts, "/api/chat", strings.Replace(body, `"model"`, `"stream":false,"model"`, 1))
	if status != 200 || !strings.HasPrefix(ctype, "application/json") || len(lines) != 1 {
		t.Fatalf("not streamed: %d %q %+v", status, ctype, lines)
	}
	m := lines[0]
	if !m.Done || m.DoneReason != "stop" || m.Message.Content != "Checking." || m.Message.Thinking != "I should look it up." || len(m.Message.ToolCalls) != 1 || m.EvalCount <= 0 {
		t.Fatalf("answer %+v", m)
	}
	call := m.Message.ToolCalls[0]
	back, _ := json.Marshal(map[string]any{"role": "assistant", "content": m.Message.Content, "thinking": m.Message.Thinking,
		"tool_calls": []any{map[string]any{"id": call.ID, "function": map[string]any{"index": 0, "name": call.Function.Name, "arguments": call.Function.Arguments}}}})
	follow := strings.Replace(body, `}],"tools"`, `},`+string(back)+`,{"role":"tool","tool_name":"get_weather","tool_call_id":"`+call.ID+`","content":"18 C and sunny"}],"stream":false,"tools"`, 1)
	status, _, lines = ollamaPost(t, ts, "/api/chat", follow)
	if status != 200 || lines[0].Message.Content != "It is sunny." || len(lines[0].Message.ToolCalls) != 0 {
		t.Fatalf("follow-up: %d %+v", status, lines)
	}
	if p := log.text(t, -1); !strings.Contains(p, `<|open|>message role="tool" tool="get_weather" index="1"<|sep|>18 C and sunny`) ||
		!strings.Contains(p, `<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>`) {
		t.Errorf("follow-up prompt %q", p)
	}
}

// TestOllamaGenerate: /api/generate streams "response" lines; raw sends
// the prompt as it is; num_predict bounds the reply (done_reason
// "length", eval_count); an empty prompt loads; greedy decoding of a raw
// prompt gives the text /v1/completions gives.
func TestOllamaGenerate(t *testing.T) {
	_, ts, log := newScripted(t, Options{}, nil)
	status, ctype, lines := ollamaPost(t, ts, "/api/generate", `{"model":"k3-test","prompt":"Hello","think":false,"options":{"num_predict":6,"temperature":0}}`)
	if status != 200 || ctype != "application/x-ndjson" || len(lines) < 2 {
		t.Fatalf("%d %q %+v", status, ctype, lines)
	}
	last := lines[len(lines)-1]
	if !last.Done || last.DoneReason != "length" || last.EvalCount != 6 || last.Message != nil || last.Response == nil {
		t.Errorf("last line %+v", last)
	}
	if p := log.text(t, -1); !strings.HasSuffix(p, `<|open|>message role="user"<|sep|>Hello<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>response<|sep|>`) {
		t.Errorf("prompt %q", p)
	}

	// Raw and greedy: the text of the same prompt as a completion.
	raw := `<|open|>message role="user"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>`
	rawJSON, _ := json.Marshal(raw)
	status, _, lines = ollamaPost(t, ts, "/api/generate", `{"model":"k3-test","raw":true,"stream":false,"prompt":`+string(rawJSON)+`,"options":{"num_predict":8,"temperature":0}}`)
	if status != 200 || len(lines) != 1 || lines[0].Response == nil || lines[0].EvalCount == 0 {
		t.Fatalf("raw: %d %+v", status, lines)
	}
	if p := log.text(t, -1); p != raw {
		t.Errorf("raw prompt %q, want %q", p, raw)
	}
	text, _, _ := complete(t, ts, "/v1/completions", `{"prompt":`+string(rawJSON)+`,"max_tokens":8,"temperature":0}`)
	if !strings.HasPrefix(text, *lines[0].Response) || (lines[0].DoneReason == "length" && text != *lines[0].Response) {
		t.Errorf("raw greedy %q, completion %q", *lines[0].Response, text)
	}

	for _, c := range []struct{ path, body, reason string }{
		{"/api/generate", `{"model":"k3-test"}`, "load"},
		{"/api/generate", `{"model":"k3-test","keep_alive":0}`, "unload"},
		{"/api/chat", `{"model":"k3-test","messages":[]}`, "load"},
		{"/api/chat", `{"model":"k3-test","keep_alive":"0s"}`, "unload"},
	} {
		status, _, lines := ollamaPost(t, ts, c.path, c.body)
		if status != 200 || len(lines) != 1 || !lines[0].Done || lines[0].DoneReason != c.reason {
			t.Errorf("%s %s: %d %+v", c.path, c.body, status, lines)
		}
	}
}

// TestOllamaLogprobsAndFormat: logprobs come per token (with
// top_logprobs), streamed and not; "json" makes the reply one JSON
// object.
func TestOllamaLogprobsAndFormat(t *testing.T) {
	_, ts, _ := newScripted(t, Options{}, nil)
	for _, stream := range []string{"true", "false"} {
		status, _, lines := ollamaPost(t, ts, "/api/generate", `{"model":"k3-test","prompt":"Hi","think":false,"stream":`+stream+`,"logprobs":true,"top_logprobs":3,"options":{"num_predict":4}}`)
		if status != 200 {
			t.Fatalf("%d %+v", status, lines)
		}
		n := 0
		for _, l := range lines {
			for _, lp := range l.Logprobs {
				n++
				if lp.Logprob > 0 || len(lp.TopLogprobs) != 3 {
					t.Errorf("stream %s: logprob %+v", stream, lp)
				}
			}
		}
		if last := lines[len(lines)-1]; n != last.EvalCount && n != last.EvalCount-1 { // the stop token has none
			t.Errorf("stream %s: %d logprobs for %d tokens", stream, n, last.EvalCount)
		}
	}
	status, _, lines := ollamaPost(t, ts, "/api/chat", `{"model":"k3-test","stream":false,"think":false,"format":"json","messages":[{"role":"user","content":"Give JSON"}],"options":{"num_predict":200,"seed":7}}`)
	if status != 200 {
		t.Fatalf("%d %+v", status, lines)
	}
	if m := lines[0]; m.DoneReason == "stop" && !json.Valid([]byte(m.Message.Content)) || !strings.HasPrefix(strings.TrimSpace(m.Message.Content), "{") {
		t.Errorf("format json: %q (%s)", m.Message.Content, m.DoneReason)
	}
}

// TestOllamaEndpoints: the listings and probes real clients call on
// startup, the endpoints k3 does not have (501 saying why), methods (405),
// and /metrics counting each Ollama endpoint.
func TestOllamaEndpoints(t *testing.T) {
	_, ts, _ := newScripted(t, Options{}, nil)
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"GET", "/", "", 200, "Ollama is running"},
		{"HEAD", "/", "", 200, ""},
		{"GET", "/api/version", "", 200, `"version":"0.`},
		{"GET", "/api/tags", "", 200, `"name":"k3-test:latest","model":"k3-test:latest"`},
		{"HEAD", "/api/tags", "", 200, ""},
		{"GET", "/api/ps", "", 200, `"context_length":4096`},
		{"POST", "/api/show", `{"model":"k3-test"}`, 200, `"kimi_k3.context_length":4096`},
		{"POST", "/api/show", `{"name":"k3-test:latest"}`, 200, `"capabilities":["completion","tools","thinking"]`},
		{"POST", "/api/show", `{"model":"llama3"}`, 404, `{"error":"model 'llama3' not found"}`},
		{"POST", "/api/show", `{}`, 400, `{"error":"model is required"}`},
		{"POST", "/api/pull", `{"model":"k3-test","stream":false}`, 200, `{"status":"success"}`},
		{"POST", "/api/pull", `{"model":"llama3"}`, 501, `cannot pull`},
		{"POST", "/api/embed", `{"model":"k3-test","input":"x"}`, 501, `embeddings are not supported`},
		{"DELETE", "/api/delete", `{"model":"k3-test"}`, 501, `cannot delete`},
		{"GET", "/api/chat", "", 405, `method GET is not allowed on /api/chat`},
		{"POST", "/api/nonsense", `{}`, 404, `{"error":"unknown URL POST /api/nonsense"}`},
	} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.path, resp.StatusCode, b, c.status, c.want)
		}
		if resp.StatusCode >= 400 {
			var e map[string]any
			if json.Unmarshal(b, &e) != nil || len(e) != 1 || e["error"] == "" {
				t.Errorf("%s %s: %s is not Ollama's error shape", c.method, c.path, b)
			}
		}
	}
	ollamaPost(t, ts, "/api/chat", `{"model":"k3-test","stream":false,"think":false,"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":2}}`)
	ollamaPost(t, ts, "/api/generate", `{"model":"k3-test","prompt":"hi","think":false,"options":{"num_predict":2}}`)
	ollamaPost(t, ts, "/api/generate", `{"model":"k3-test","prompt":"hi","suffix":"x"}`)
	m := scrape(t, ts)
	for _, want := range []string{`k3_requests_total{endpoint="/api/chat",status="200"} 1`, `k3_requests_total{endpoint="/api/generate",status="200"} 1`,
		`k3_requests_total{endpoint="/api/generate",status="400"} 1`, `k3_requests_total{endpoint="/api/tags",status="200"} 2`,
		`k3_requests_total{endpoint="/api/show",status="404"} 1`, `k3_requests_total{endpoint="/",status="200"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestOllamaBadInput: every bad request gets a 4xx in Ollama's shape
// ({"error": "..."}) naming what is wrong, never a 500 or a panic.
func TestOllamaBadInput(t *testing.T) {
	_, ts, _ := newScripted(t, Options{MaxBodyBytes: 1 << 20}, func(string) *chat.Message { return &chat.Message{} })
	long := strings.Repeat("word ", 5000) // more tokens than the 4096 the context holds
	chatBody := func(extra string) string {
		return `{"model":"k3-test","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/api/chat", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "model is required"},
		{"/api/chat", `{"model":"llama3","messages":[{"role":"user","content":"hi"}]}`, 404, "model 'llama3' not found"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"user","content":"hi","images":["aGk="]}]}`, 400, "messages[0].images"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role"},
		{"/api/chat", `{"model":"k3-test","messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"user","content":["hi"]}]}`, 400, "messages[0].content"},
		{"/api/chat", `{"model":"k3-test","messages":"hi"}`, 400, "messages"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}]}`, 400, "arguments must be a JSON object"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":{}}}]}]}`, 400, "name is required"},
		{"/api/chat", chatBody(`,"tools":[{"type":"function","function":{"description":"no name"}}]`), 400, "tools[0].function.name"},
		{"/api/chat", chatBody(`,"tools":[{"type":"retrieval"}]`), 400, "tools[0].type"},
		{"/api/chat", chatBody(`,"tools":{"type":"function"}`), 400, "tools"},
		{"/api/chat", chatBody(`,"think":"extreme"`), 400, "invalid think value"},
		{"/api/chat", chatBody(`,"think":3`), 400, "think must be"},
		{"/api/chat", chatBody(`,"format":"xml"`), 400, "invalid format"},
		{"/api/chat", chatBody(`,"format":[1]`), 400, "invalid format"},
		{"/api/chat", chatBody(`,"format":{"type":"nonsense"}`), 400, "format"},
		{"/api/chat", chatBody(`,"keep_alive":"forever"`), 400, "keep_alive"},
		{"/api/chat", chatBody(`,"keep_alive":true`), 400, "keep_alive"},
		{"/api/chat", chatBody(`,"options":[1]`), 400, "options must be an object"},
		{"/api/chat", chatBody(`,"options":{"temperature":"hot"}`), 400, "options.temperature"},
		{"/api/chat", chatBody(`,"options":{"temperature":-1}`), 400, "options.temperature"},
		{"/api/chat", chatBody(`,"options":{"top_p":1.5}`), 400, "options.top_p"},
		{"/api/chat", chatBody(`,"options":{"top_k":-3}`), 400, "options.top_k"},
		{"/api/chat", chatBody(`,"options":{"min_p":2}`), 400, "options.min_p"},
		{"/api/chat", chatBody(`,"options":{"seed":"x"}`), 400, "options.seed"},
		{"/api/chat", chatBody(`,"options":{"num_predict":"x"}`), 400, "options.num_predict"},
		{"/api/chat", chatBody(`,"options":{"stop":"x"}`), 400, "options.stop"},
		{"/api/chat", chatBody(`,"options":{"stop":[""]}`), 400, "options.stop[0]"},
		{"/api/chat", chatBody(`,"options":{"typical_p":0.5}`), 400, "options.typical_p"},
		{"/api/chat", chatBody(`,"options":{"repeat_penalty":1.2,"repeat_last_n":64}`), 400, "options.repeat_last_n"},
		{"/api/chat", chatBody(`,"options":{"num_ctx":1000000}`), 400, "options.num_ctx"},
		{"/api/chat", chatBody(`,"options":{"num_ctx":3}`), 400, "options.num_ctx"},
		{"/api/chat", chatBody(`,"logprobs":true,"top_logprobs":21`), 400, "top_logprobs"},
		{"/api/chat", chatBody(`,"top_logprobs":2`), 400, "top_logprobs needs logprobs"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "prompt is too long"},
		{"/api/chat", `{"model":"k3-test","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`, 413, "larger than"},
		{"/api/chat", `{"model":"k3-test",`, 400, "JSON"},
		{"/api/chat", ``, 400, "empty"},
		{"/api/chat", `[1]`, 400, "object"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","images":["aGk="]}`, 400, "images"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","suffix":"end"}`, 400, "suffix"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","template":"{{ .Prompt }}"}`, 400, "template"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","context":[1,2]}`, 400, "context"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","raw":true,"system":"x"}`, 400, "raw mode does not support"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","raw":true,"format":"json"}`, 400, "format"},
		{"/api/generate", `{"model":"k3-test","prompt":"hi","raw":true,"think":true}`, 400, "think"},
		{"/api/generate", `{"model":"k3-test","prompt":5}`, 400, "prompt"},
		{"/api/generate", `{"model":"k3-test","prompt":"` + long + `","raw":true}`, 400, "context"},
		{"/api/show", `{"model":5}`, 400, "model"},
	} {
		name := c.path + " " + c.body[:min(len(c.body), 90)]
		resp, b := post(t, ts, c.path, c.body)
		if resp.StatusCode != c.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, b, c.status)
			continue
		}
		var e map[string]string
		if json.Unmarshal(b, &e) != nil || len(e) != 1 || !strings.Contains(e["error"], c.want) {
			t.Errorf("%s: %s is not Ollama's error naming %q", name, b, c.want)
		}
		if goTypeName.Match(b) {
			t.Errorf("%s: the error names a Go type: %s", name, b)
		}
	}
}

// TestOllamaLimits: the Ollama endpoints share the server's limits: beyond
// the queue a 429 in Ollama's shape with Retry-After; a streamed
// /api/chat or /api/generate whose client goes away stops generating and
// counts as cancelled.
func TestOllamaLimits(t *testing.T) {
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
	resp, b := post(t, ts, "/api/chat", `{"model":"k3-test","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.HasPrefix(string(b), `{"error":"the server is busy`) {
		t.Errorf("queue full: %d %s", resp.StatusCode, b)
	}
	once.Do(func() { close(gate) })
	<-done

	var tokens atomic.Int64
	s.afterToken = func() { tokens.Add(1); time.Sleep(2 * time.Millisecond) }
	for path, body := range map[string]string{
		"/api/chat":     `{"model":"k3-test","messages":[{"role":"user","content":"Tell me everything"}],"options":{"num_predict":3000,"temperature":0}}`,
		"/api/generate": `{"model":"k3-test","prompt":"Tell me everything","raw":true,"options":{"num_predict":3000,"temperature":0}}`,
	} {
		tokens.Store(0)
		before := s.Cancelled()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for range 3 { // three lines: the generation is under way
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		cancel()
		resp.Body.Close()
		deadline := time.Now().Add(10 * time.Second)
		for s.Active() != 0 || s.Cancelled() != before+1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: after the client left: %d active, %d cancelled (want 0, %d)", path, s.Active(), s.Cancelled(), before+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := tokens.Load(); n >= 3000 {
			t.Errorf("%s: the generation ran to the end (%d tokens)", path, n)
		}
	}
}
