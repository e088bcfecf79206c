package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

type vectorCase struct {
	Name string `json:"name"`
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func loadVectors(t *testing.T) (dir string, cases []vectorCase) {
	t.Helper()
	dir = fixtures.Path(t, "tokenizer")
	raw, err := os.ReadFile(filepath.Join(dir, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Cases []vectorCase }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < 5 {
		t.Fatalf("%d cases in vectors.json", len(v.Cases))
	}
	return dir, v.Cases
}

// testStdin is what runCmd gives the command as its standard input.
var testStdin string

// withStdin makes the commands runCmd runs read s from stdin, until the
// test ends.
func withStdin(t *testing.T, s string) {
	t.Helper()
	old := testStdin
	testStdin = s
	t.Cleanup(func() { testStdin = old })
}

// vectorSubset names the cases of vectors.json the command tests use (the
// tokenizer package checks all of them; each command run loads the 200k
// vocabulary again).
var vectorSubset = []string{"ascii", "spaces", "crlf", "trailing_ws", "digits", "contractions", "han_mixed", "emoji",
	"code_go", "json", "special_bos", "special_chat", "only_newlines", "empty", "nbsp", "combining"}

// TestTokenizeVectors: k3 tokenize --json reproduces the fixture's vectors
// (text passed through a file), and k3 detokenize turns the ids back into
// the text, exactly.
func TestTokenizeVectors(t *testing.T) {
	dir, cases := loadVectors(t)
	tmp := t.TempDir()
	n := 0
	for i, c := range cases {
		if !slices.Contains(vectorSubset, c.Name) {
			continue
		}
		n++
		in := filepath.Join(tmp, fmt.Sprintf("case%d.txt", i))
		if err := os.WriteFile(in, []byte(c.Text), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runCmd(t, "tokenize", "--tokenizer", dir, "--file", in, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.Name, code, stderr)
		}
		var got struct {
			IDs []int `json:"ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.IDs == nil {
			t.Fatalf("%s: output %q: %v", c.Name, out, err)
		}
		if !slices.Equal(got.IDs, c.IDs) {
			t.Errorf("%s: ids %v, want %v", c.Name, got.IDs, c.IDs)
		}
		// The JSON output is detokenize's input.
		idsFile := filepath.Join(tmp, fmt.Sprintf("case%d.json", i))
		os.WriteFile(idsFile, []byte(out), 0o644)
		code, text, stderr := runCmd(t, "detokenize", "--tokenizer", dir, "--file", idsFile)
		if code != 0 || text != c.Text {
			t.Errorf("%s: detokenize: exit %d, %q, want %q (%s)", c.Name, code, text, c.Text, stderr)
		}
	}
	if n != len(vectorSubset) {
		t.Errorf("%d of the %d cases found", n, len(vectorSubset))
	}
}

// TestTokenizeFormats: plain and JSON output, stdin and --text input,
// --no-special, --model as the tokenizer directory, detokenize's inputs.
func TestTokenizeFormats(t *testing.T) {
	dir, cases := loadVectors(t)
	var chat vectorCase
	for _, c := range cases {
		if c.Name == "special_chat" {
			chat = c
		}
	}
	if chat.Text == "" {
		t.Fatal("no special_chat case")
	}
	withStdin(t, chat.Text)
	code, out, _ := runCmd(t, "tokenize", "--tokenizer", dir)
	want := strings.Trim(fmt.Sprint(chat.IDs), "[]") + "\n"
	if code != 0 || out != want {
		t.Errorf("plain output %q, want %q", out, want)
	}
	code, out2, _ := runCmd(t, "tokenize", "--tokenizer", dir, "--text", chat.Text)
	if code != 0 || out2 != want {
		t.Errorf("--text output %q, want %q", out2, want)
	}
	// --no-special: the added-token strings are ordinary text.
	_, plain, _ := runCmd(t, "tokenize", "--tokenizer", dir, "--text", "<|im_end|>", "--json", "--no-special")
	_, special, _ := runCmd(t, "tokenize", "--tokenizer", dir, "--text", "<|im_end|>", "--json")
	if special != "{\"ids\":[200000]}\n" || !strings.HasPrefix(plain, "{\"ids\":[") || strings.Contains(plain, "200000") || plain == special {
		t.Errorf("<|im_end|>: %q with added tokens, %q without", special, plain)
	}
	_, empty, _ := runCmd(t, "tokenize", "--tokenizer", dir, "--text", "", "--json")
	if empty != "{\"ids\":[]}\n" {
		t.Errorf("empty text: %q", empty)
	}

	// detokenize: --ids, stdin in three syntaxes, --json.
	text := chat.Text
	ids := strings.Trim(fmt.Sprint(chat.IDs), "[]")
	for _, in := range []string{ids, strings.ReplaceAll(ids, " ", ","), "[" + strings.ReplaceAll(ids, " ", ",") + "]", `{"ids":[` + strings.ReplaceAll(ids, " ", ",") + "]}"} {
		withStdin(t, in)
		if code, out, stderr := runCmd(t, "detokenize", "--tokenizer", dir); code != 0 || out != text {
			t.Errorf("detokenize %q: exit %d, %q (%s)", in, code, out, stderr)
		}
	}
	code, out, _ = runCmd(t, "detokenize", "--tokenizer", dir, "--ids", strings.ReplaceAll(ids, " ", ","), "--json")
	var dj struct {
		Text      string `json:"text"`
		ValidUTF8 bool   `json:"valid_utf8"`
	}
	if err := json.Unmarshal([]byte(out), &dj); code != 0 || err != nil || dj.Text != text || !dj.ValidUTF8 {
		t.Errorf("detokenize --json: exit %d, %q", code, out)
	}
	// Ids that split a character: the bytes come out as they are.
	_, frag, _ := runCmd(t, "tokenize", "--tokenizer", dir, "--text", "\xe4\xb8", "--json")
	withStdin(t, frag)
	if code, out, _ := runCmd(t, "detokenize", "--tokenizer", dir); code != 0 || out != "\xe4\xb8" {
		t.Errorf("partial character: %q", out)
	}
	withStdin(t, frag)
	if _, out, _ := runCmd(t, "detokenize", "--tokenizer", dir, "--json"); !strings.Contains(out, `"valid_utf8":false`) {
		t.Errorf("partial character, --json: %q", out)
	}

	// --model stands for --tokenizer: the quickstart checkpoint has one.
	qs := testmodel.Dir(t)
	code, out, _ = runCmd(t, "tokenize", "--model", qs, "--text", "Hello<|end_of_msg|>", "--json")
	if code != 0 || !strings.Contains(out, fmt.Sprint(512-len(synth.AddedTokens)+2)+"]") {
		t.Errorf("--model: exit %d, %q", code, out)
	}
}

func TestTokenizeErrors(t *testing.T) {
	dir, _ := loadVectors(t)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "tiktoken.model"), []byte("not base64 at all\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "tokenizer_config.json"), []byte(`{"added_tokens_decoder":{}}`), 0o644)
	withStdin(t, "")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"tokenize", "--text", "x"}, cli.ExitUsage},                                            // no tokenizer
		{[]string{"tokenize", "--tokenizer", dir, "--text", "x", "--file", "f"}, cli.ExitUsage},         // two inputs
		{[]string{"tokenize", "--tokenizer", dir, "--bogus"}, cli.ExitUsage},                            // unknown flag
		{[]string{"tokenize", "--tokenizer", dir, "extra"}, cli.ExitUsage},                              // argument
		{[]string{"tokenize", "--tokenizer", t.TempDir(), "--text", "x"}, cli.ExitUsage},                // no files: say which flag
		{[]string{"tokenize", "--tokenizer", bad, "--text", "x"}, cli.ExitCheckpoint},                   // malformed files
		{[]string{"tokenize", "--tokenizer", dir, "--file", filepath.Join(bad, "none")}, cli.ExitUsage}, // no input file
		{[]string{"detokenize", "--tokenizer", dir, "--ids", "1,x"}, cli.ExitUsage},                     // bad id
		{[]string{"detokenize", "--tokenizer", dir, "--ids", "1,99999999"}, cli.ExitUsage},              // unknown id
		{[]string{"detokenize", "--tokenizer", dir, "--ids", "1", "--file", "f"}, cli.ExitUsage},        // two inputs
		{[]string{"detokenize", "--ids", "1"}, cli.ExitUsage},                                           // no tokenizer
		{[]string{"tokenize", "--help"}, cli.ExitOK},
		{[]string{"detokenize", "--help"}, cli.ExitOK},
	} {
		code, out, stderr := runCmd(t, c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		if code != cli.ExitOK && (out != "" || strings.Count(stderr, "\n") != 1) {
			t.Errorf("%v: stdout %q, stderr %q: want one line of error", c.args, out, stderr)
		}
	}
	// An empty list of ids is an empty text.
	withStdin(t, "\n")
	if code, out, _ := runCmd(t, "detokenize", "--tokenizer", dir); code != 0 || out != "" {
		t.Errorf("no ids: exit %d, %q", code, out)
	}
}

func TestMain(m *testing.M) { testmodel.Main(m) }
