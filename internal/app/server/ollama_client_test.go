package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ollamaJSVersion is the official ollama npm client the Ollama API is
// tested with; .ci/run installs this version and sets K3_OLLAMA_JS.
const ollamaJSVersion = "0.6.4"

// ollamaJSDir returns the directory holding node_modules/ollama, from
// K3_OLLAMA_JS. Unset, the test skips (go test ./... needs no npm); set,
// a missing client, node or another version is a failure.
func ollamaJSDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("K3_OLLAMA_JS")
	if dir == "" {
		t.Skipf("the official ollama npm client is not installed: run `npm install --prefix DIR ollama@%s` and set K3_OLLAMA_JS=DIR (.ci/run does)", ollamaJSVersion)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("K3_OLLAMA_JS is set but node is not installed: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "ollama", "package.json"))
	if err != nil {
		t.Fatalf("K3_OLLAMA_JS=%s holds no ollama client: %v", dir, err)
	}
	var pkg struct{ Version string }
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version != ollamaJSVersion {
		t.Fatalf("K3_OLLAMA_JS=%s holds ollama %q (%v), want %s", dir, pkg.Version, err, ollamaJSVersion)
	}
	return dir
}

// TestOllamaJSClient drives the server on 127.0.0.1 with the official
// ollama npm client (testdata/ollama-client.cjs): version, list, show,
// ps; a chat with tools whole and streamed (the random test model is made
// to think, answer and call a tool through the script hook; rendering,
// parsing and the API are the real ones), the tool's result sent back
// with the client's own message, generate whole and streamed; and three
// errors the client must raise with Ollama's message and status.
func TestOllamaJSClient(t *testing.T) {
	dir := ollamaJSDir(t)
	_, ts, log := newScripted(t, Options{}, weatherAnswer)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hung client fails instead of hanging go test
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "ollama-client.cjs"), dir, ts.URL, "k3-test")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	type message struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	type answer struct {
		Model      string  `json:"model"`
		Message    message `json:"message"`
		Response   string  `json:"response"`
		Done       bool    `json:"done"`
		DoneReason string  `json:"done_reason"`
		EvalCount  int     `json:"eval_count"`
		TotalDur   int64   `json:"total_duration"`
	}
	type failure struct {
		Message string `json:"message"`
		Status  int    `json:"status"`
	}
	var out struct {
		Version struct{ Version string } `json:"version"`
		List    struct {
			Models []struct{ Name, Model string } `json:"models"`
		} `json:"list"`
		Show struct {
			Capabilities []string       `json:"capabilities"`
			ModelInfo    map[string]any `json:"model_info"`
		} `json:"show"`
		PS struct {
			Models []struct {
				Name          string `json:"name"`
				ContextLength int    `json:"context_length"`
			} `json:"models"`
		} `json:"ps"`
		Chat          answer   `json:"chat"`
		ChatParts     []answer `json:"chatParts"`
		FollowUp      answer   `json:"followUp"`
		Generate      answer   `json:"generate"`
		GenerateParts []answer `json:"generateParts"`
		UnknownModel  *failure `json:"unknownModel"`
		BadThink      *failure `json:"badThinkStreamed"`
		Image         *failure `json:"image"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("the client's output is not JSON: %v\n%s", err, stdout.String())
	}

	if !strings.HasPrefix(out.Version.Version, "0.") || len(out.List.Models) != 1 || out.List.Models[0].Name != "k3-test:latest" ||
		len(out.PS.Models) != 1 || out.PS.Models[0].ContextLength != 4096 {
		t.Errorf("version %+v, list %+v, ps %+v", out.Version, out.List, out.PS)
	}
	if strings.Join(out.Show.Capabilities, ",") != "completion,tools,thinking" || out.Show.ModelInfo["kimi_k3.context_length"] != 4096.0 {
		t.Errorf("show %+v", out.Show)
	}

	checkCall := func(what string, m message) {
		t.Helper()
		if len(m.ToolCalls) != 1 {
			t.Fatalf("%s: %d tool calls: %+v", what, len(m.ToolCalls), m)
		}
		c := m.ToolCalls[0]
		if c.ID == "" || c.Function.Name != "get_weather" || c.Function.Arguments["city"] != "Paris" || c.Function.Arguments["days"] != 2.0 {
			t.Errorf("%s: call %+v", what, c)
		}
	}
	c := out.Chat
	if c.Model != "k3-test" || !c.Done || c.DoneReason != "stop" || c.Message.Role != "assistant" || c.Message.Content != "Checking." ||
		c.Message.Thinking != "I should look it up." || c.EvalCount <= 0 || c.TotalDur <= 0 {
		t.Errorf("chat %+v", c)
	}
	checkCall("chat", c.Message)

	var streamed message
	for i, p := range out.ChatParts {
		if p.Done != (i == len(out.ChatParts)-1) {
			t.Errorf("chat part %d of %d: done %v", i, len(out.ChatParts), p.Done)
		}
		streamed.Content += p.Message.Content
		streamed.Thinking += p.Message.Thinking
		streamed.ToolCalls = append(streamed.ToolCalls, p.Message.ToolCalls...)
	}
	if n := len(out.ChatParts); n < 3 || out.ChatParts[n-1].DoneReason != "stop" || streamed.Content != "Checking." || streamed.Thinking != "I should look it up." {
		t.Errorf("streamed chat: %d parts, %+v", n, streamed)
	}
	checkCall("streamed chat", streamed)

	if f := out.FollowUp; f.Message.Content != "It is sunny." || f.Message.Thinking != "The tool said it." || len(f.Message.ToolCalls) != 0 {
		t.Errorf("follow-up %+v", f)
	}
	p := log.text(t, 2) // whole, streamed, follow-up
	for _, want := range []string{
		`<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>`,
		`<|open|>message role="tool" tool="get_weather" index="1"<|sep|>18 C and sunny<|close|>message<|sep|><|end_of_msg|>`,
	} {
		if !strings.Contains(p, want) {
			t.Errorf("the follow-up's prompt %q lacks %q", p, want)
		}
	}

	g := out.Generate
	if !g.Done || g.DoneReason != "length" || g.EvalCount != 5 {
		t.Errorf("generate %+v", g)
	}
	var text string
	for _, part := range out.GenerateParts {
		text += part.Response
	}
	if n := len(out.GenerateParts); n < 2 || !out.GenerateParts[n-1].Done || out.GenerateParts[n-1].EvalCount != 5 || text != g.Response {
		t.Errorf("streamed generate %q (%d parts), whole %q", text, n, g.Response)
	}

	for _, f := range []struct {
		name   string
		got    *failure
		status int
		want   string
	}{
		{"unknown model", out.UnknownModel, 404, "model 'llama3.2' not found"},
		{"bad think, streamed", out.BadThink, 400, "invalid think value"},
		{"image", out.Image, 400, "messages[0].images"},
	} {
		if f.got == nil || f.got.Status != f.status || !strings.Contains(f.got.Message, f.want) {
			t.Errorf("%s: the client raised %+v, want %d %q", f.name, f.got, f.status, f.want)
		}
	}
}
