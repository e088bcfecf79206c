package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/tokenizer"
)

type templateGolden struct {
	Messages   json.RawMessage `json:"messages"`
	Tools      json.RawMessage `json:"tools"`
	Kwargs     json.RawMessage `json:"kwargs"`
	Segments   [][2]any        `json:"segments"`
	Text       string          `json:"text"`
	IDsStandin []int           `json:"ids_standin"`
}

// TestTemplateGoldens: k3 template --json renders every golden
// conversation to its text, segments and stand-in ids.
func TestTemplateGoldens(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "chat/goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokDir := fixtures.Path(t, "tokenizer-k3")
	var f struct {
		Chats map[string]templateGolden `json:"chats"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	for name, g := range f.Chats {
		in, _ := json.Marshal(map[string]json.RawMessage{"messages": g.Messages, "tools": g.Tools, "kwargs": g.Kwargs})
		file := filepath.Join(tmp, name+".json")
		os.WriteFile(file, in, 0o644)
		code, out, stderr := runCmd(t, "template", "--tokenizer", tokDir, "--input", file, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		var got struct {
			Text     string   `json:"text"`
			Segments [][2]any `json:"segments"`
			IDs      []int    `json:"ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: %v: %q", name, err, out)
		}
		if got.Text != g.Text || !slices.Equal(got.IDs, g.IDsStandin) || !slices.Equal(got.Segments, g.Segments) {
			t.Errorf("%s: got %s", name, out)
		}
	}
	if len(f.Chats) != 18 {
		t.Errorf("%d goldens", len(f.Chats))
	}
}

func TestTemplateParse(t *testing.T) {
	tokDir := fixtures.Path(t, "tokenizer-k3")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := chat.RenderAnswer(chat.Message{
		ReasoningContent: "I should run ls.", Content: "Listing files.",
		ToolCalls: []chat.ToolCall{{Function: chat.FunctionCall{Name: "bash", Arguments: `{"command": "ls -la", "n": 2, "deep": {"x": [1.0, null]}}`}}},
	}, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := chat.Encode(tok, segs)
	code, out, stderr := runCmd(t, "template", "--parse", "--tokenizer", tokDir, "--ids", joinIDs(ids), "--json")
	want := `{"reasoning_content":"I should run ls.","content":"Listing files.","tool_calls":[{"name":"bash","arguments":{"command":"ls -la","n":2,"deep":{"x":[1.0,null]}}}]}` + "\n"
	if code != 0 || out != want {
		t.Errorf("--parse: exit %d, %q (%s), want %q", code, out, stderr, want)
	}
	// Cut off mid-reasoning: reasoning only; ids from stdin.
	withStdin(t, joinIDs(tok.EncodeOrdinary("hmm, let me")))
	code, out, _ = runCmd(t, "template", "--parse", "--tokenizer", tokDir, "--json")
	if code != 0 || out != `{"reasoning_content":"hmm, let me","content":"","tool_calls":[]}`+"\n" {
		t.Errorf("cut off: exit %d, %q", code, out)
	}
	code, out, _ = runCmd(t, "template", "--parse", "--tokenizer", tokDir, "--thinking=false", "--ids", joinIDs(tok.EncodeOrdinary("hi")))
	if code != 0 || out != "content: hi\n" {
		t.Errorf("--thinking=false: exit %d, %q", code, out)
	}
	// Plain output of a rendering is its text.
	withStdin(t, `{"messages":[{"role":"user","content":"ping"}],"kwargs":{"thinking":false}}`)
	code, out, _ = runCmd(t, "template", "--tokenizer", tokDir, "--defaults")
	if want := "<|open|>message role=\"user\"<|sep|>ping<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>\n"; code != 0 || out != want {
		t.Errorf("plain: exit %d, %q", code, out)
	}
	withStdin(t, `{"messages":[{"role":"user","content":"ping"}]}`)
	code, out, _ = runCmd(t, "template", "--tokenizer", tokDir, "--defaults")
	if code != 0 || !strings.Contains(out, "`thinking_effort=max`") {
		t.Errorf("--defaults: exit %d, %q", code, out)
	}
}

func TestTemplateErrors(t *testing.T) {
	tokDir := fixtures.Path(t, "tokenizer-k3")
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"not json", []string{"template", "--tokenizer", tokDir}, cli.ExitUsage, "input is not a conversation"},
		{`{"messages":[{"role":"robot","content":"x"}]}`, []string{"template", "--tokenizer", tokDir}, cli.ExitUsage, `role "robot"`},
		{`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]}`, []string{"template", "--tokenizer", tokDir}, cli.ExitUsage, "not an object"},
		{`{"messages":[],"kwargs":{"thinking_effort":"huge"}}`, []string{"template", "--tokenizer", tokDir}, cli.ExitUsage, "thinking effort"},
		{"", []string{"template", "--tokenizer", tokDir, "--ids", "1"}, cli.ExitUsage, "--ids needs --parse"},
		{"", []string{"template", "--parse", "--tokenizer", tokDir, "--ids", "1,x"}, cli.ExitUsage, "bad token id"},
		{"", []string{"template", "--parse", "--tokenizer", tokDir, "--ids", "99999999"}, cli.ExitUsage, "not in the tokenizer"},
		{"", []string{"template"}, cli.ExitUsage, "--tokenizer"},
		{"", []string{"template", "--tokenizer", tokDir, "--input", filepath.Join(t.TempDir(), "none")}, cli.ExitUsage, "none: the file does not exist"},
	} {
		withStdin(t, c.stdin)
		code, out, stderr := runCmd(t, c.args...)
		if code != c.code || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.msg) ||
			!strings.HasPrefix(stderr, "k3 template: ") || strings.Contains(stderr, "chat: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and one line with %q", c.args, code, out, stderr, c.code, c.msg)
		}
	}
	if code, usage, _ := runCmd(t, "help", "template"); code != 0 || !strings.Contains(usage, "--parse") {
		t.Errorf("help template: exit %d", code)
	}
}
