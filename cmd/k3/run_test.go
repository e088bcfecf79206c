package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/app/synth"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// openQuickstart opens the quickstart checkpoint through the library, for
// the expected outputs.
func openQuickstart(t *testing.T) *k3.Model {
	t.Helper()
	m, err := k3.Open(testmodel.Dir(t), k3.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestRunPrompt: a one-shot prompt prints what GenerateText gives, from
// --prompt, --prompt-file and stdin alike; --stats reports on stderr.
func TestRunPrompt(t *testing.T) {
	dir := testmodel.Dir(t)
	m := openQuickstart(t)
	const prompt = "Once upon a time, there was a"
	opts := k3.GenerateOptions{MaxTokens: 12, Sampling: k3.SamplingOptions{Temperature: 0.8, TopK: 50, Seed: 7}}
	eos, _ := m.Tokenizer().ID("[EOS]")
	opts.StopTokens = []int{eos}
	want, err := m.GenerateText(context.Background(), prompt, opts)
	if err != nil || want == "" {
		t.Fatalf("GenerateText: %q, %v", want, err)
	}
	flags := []string{"--model", dir, "--max-tokens", "12", "--temperature", "0.8", "--top-k", "50", "--seed", "7"}
	code, out, stderr := runCmd(t, append([]string{"run", "--prompt", prompt, "--stats"}, flags...)...)
	if code != 0 || out != want+"\n" {
		t.Fatalf("run --prompt: exit %d, %q, want %q\n%s", code, out, want+"\n", stderr)
	}
	if !strings.Contains(stderr, "generated 12 tokens") || !strings.Contains(stderr, "forward") {
		t.Errorf("--stats: %q", stderr)
	}
	f := filepath.Join(t.TempDir(), "prompt.txt")
	os.WriteFile(f, []byte(prompt), 0o644)
	if code, out, stderr := runCmd(t, append([]string{"run", "--prompt-file", f}, flags...)...); code != 0 || out != want+"\n" {
		t.Errorf("run --prompt-file: exit %d, %q (%s)", code, out, stderr)
	}
	withStdin(t, prompt)
	if code, out, stderr := runCmd(t, append([]string{"run"}, flags...)...); code != 0 || out != want+"\n" {
		t.Errorf("prompt on stdin: exit %d, %q (%s)", code, out, stderr)
	}
	// Another seed, another text; a stop string cuts it.
	if _, out2, _ := runCmd(t, "run", "--model", dir, "--prompt", prompt, "--max-tokens", "12", "--temperature", "0.8", "--seed", "8"); out2 == out {
		t.Errorf("seeds 7 and 8 gave the same text %q", out)
	}
	if len(want) > 6 {
		stop := want[3:6]
		code, out, _ := runCmd(t, append([]string{"run", "--prompt", prompt, "--stop", stop}, flags...)...)
		if cut := want[:strings.Index(want, stop)] + "\n"; code != 0 || out != cut {
			t.Errorf("--stop %q: %q, want %q", stop, out, cut)
		}
	}
}

// TestRunQuickstart: with no --model, k3 run writes the quickstart
// checkpoint into the user cache once, says so on stderr, and generates.
func TestRunQuickstart(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	code, out, stderr := runCmd(t, "run", "--prompt", "Hello", "--max-tokens", "5")
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("exit %d, %q\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "writing the quickstart checkpoint") || !strings.Contains(stderr, cache) {
		t.Errorf("first run, stderr: %q", stderr)
	}
	code, out2, stderr := runCmd(t, "run", "--prompt", "Hello", "--max-tokens", "5")
	if code != 0 || out2 != out || strings.Contains(stderr, "writing") || !strings.Contains(stderr, "quickstart") {
		t.Errorf("second run: exit %d, %q, stderr %q", code, out2, stderr)
	}
}

// TestRunChat drives the chat through a stdin pipe: two turns, /save, a
// third turn, /load (back to the saved state, so the same reply again),
// /reset, and a one-turn --chat --prompt; every reply is what a
// Conversation gives.
func TestRunChat(t *testing.T) {
	dir := testmodel.Dir(t)
	m := openQuickstart(t)
	ctx := context.Background()
	const system = "You are terse."
	opts := runDefaults(10)
	send := func(c *k3.Conversation, user string) string {
		var b strings.Builder
		for tok, err := range c.Send(ctx, user, opts) {
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(tok.Text)
		}
		return shown(m, b.String())
	}
	c, err := m.NewConversation(system)
	if err != nil {
		t.Fatal(err)
	}
	r1 := send(c, "Hello there.")
	r2 := send(c, "What is the capital of France?")
	r3 := send(c, "And of Italy?")
	fresh, _ := m.NewConversation(system)
	r0 := send(fresh, "And of Italy?")

	state := filepath.Join(t.TempDir(), "chat.state")
	withStdin(t, "Hello there.\n\nWhat is the capital of France?\n/save "+state+"\nAnd of Italy?\n/load "+state+"\nAnd of Italy?\n/reset\nAnd of Italy?\n/quit\nnever sent\n")
	code, out, stderr := runCmd(t, "run", "--model", dir, "--chat", "--system", system, "--max-tokens", "10")
	want := r1 + "\n" + r2 + "\n" + r3 + "\n" + r3 + "\n" + r0 + "\n"
	if code != 0 || out != want {
		t.Fatalf("chat: exit %d\n got %q\nwant %q\nstderr: %s", code, out, want, stderr)
	}
	if !strings.Contains(stderr, "saved") || !strings.Contains(stderr, "loaded") || !strings.Contains(stderr, "reset") {
		t.Errorf("stderr: %q", stderr)
	}
	if st, err := os.Stat(state); err != nil || st.Size() == 0 {
		t.Errorf("state file: %v", err)
	}
	// One turn from --prompt; "//" escapes a leading slash.
	one, _ := m.NewConversation("")
	want1 := send(one, "/hello") + "\n"
	if code, out, stderr := runCmd(t, "run", "--model", dir, "--chat", "--prompt", "/hello", "--max-tokens", "10"); code != 0 || out != want1 {
		t.Errorf("--chat --prompt: exit %d, %q, want %q (%s)", code, out, want1, stderr)
	}
	withStdin(t, "//hello\n")
	if code, out, _ := runCmd(t, "run", "--model", dir, "--chat", "--max-tokens", "10"); code != 0 || out != want1 {
		t.Errorf("//hello: exit %d, %q, want %q", code, out, want1)
	}
	// From a pipe, a failing command ends the chat with its exit code.
	// Its message names the chat's command and the file, never the
	// library's function (LoadFile).
	absent := filepath.Join(t.TempDir(), "absent")
	withStdin(t, "/load "+absent+"\nhello\n")
	if code, out, stderr := runCmd(t, "run", "--model", dir, "--chat"); code != cli.ExitIO || out != "" ||
		!strings.Contains(stderr, "/load "+absent+": the file does not exist") || strings.Contains(stderr, "LoadFile") {
		t.Errorf("/load of a missing file: exit %d, %q, %q", code, out, stderr)
	}
	withStdin(t, "/frobnicate\n")
	if code, _, _ := runCmd(t, "run", "--model", dir, "--chat"); code != cli.ExitUsage {
		t.Errorf("unknown command: exit %d", code)
	}
}

// TestRunChatFormat: on the quickstart checkpoint, k3 run holds a two-turn
// chat in K3's format: the reasoning on stderr apart from the answer on
// stdout, each what a Conversation gives; the saved state holds both turns
// as XTML; --thinking=false answers in the response channel; --effort
// reaches the prompt.
func TestRunChatFormat(t *testing.T) {
	dir := testmodel.Dir(t)
	m := openQuickstart(t)
	ctx := context.Background()
	opts := runDefaults(10)
	turn := func(c *k3.Conversation, user string) chat.Message {
		for _, err := range c.Stream(ctx, []chat.Message{{Role: chat.RoleUser, Content: user}}, opts) {
			if err != nil {
				t.Fatal(err)
			}
		}
		return c.Reply()
	}
	c, err := m.NewConversation("You are terse.")
	if err != nil {
		t.Fatal(err)
	}
	a1, a2 := turn(c, "Hello there."), turn(c, "And then?")
	if a1.ReasoningContent == "" || a2.ReasoningContent == "" {
		t.Fatalf("test setup: no reasoning in %+v, %+v", a1, a2)
	}
	state := filepath.Join(t.TempDir(), "chat.state")
	withStdin(t, "Hello there.\nAnd then?\n/save "+state+"\n")
	code, out, stderr := runCmd(t, "run", "--model", dir, "--chat", "--system", "You are terse.", "--max-tokens", "10")
	if want := shown(m, a1.Content) + "\n" + shown(m, a2.Content) + "\n"; code != 0 || out != want {
		t.Fatalf("chat: exit %d, stdout %q, want %q (stderr %s)", code, out, want, stderr)
	}
	for _, r := range []string{a1.ReasoningContent, a2.ReasoningContent} {
		if !strings.Contains(stderr, "thinking: "+shown(m, r)+"\n") {
			t.Errorf("stderr %q lacks the reasoning %q", stderr, r)
		}
	}
	s := m.NewSession()
	if err := s.LoadFile(state); err != nil {
		t.Fatal(err)
	}
	text := m.Tokenizer().DecodeLenient(s.Tokens())
	for _, want := range []string{
		"<|open|>message role=\"system\"<|sep|>You are terse.<|close|>message<|sep|><|end_of_msg|>",
		"<|open|>message role=\"user\"<|sep|>Hello there.<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>" + a1.ReasoningContent,
		"<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\"<|sep|>And then?<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>" + a2.ReasoningContent,
		"`thinking_effort=max`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("saved chat %q lacks %q", text, want)
		}
	}
	if strings.Contains(text, "<|im_") {
		t.Errorf("saved chat in the old layout: %q", text)
	}

	// Thinking off: the answer is content; --hide-reasoning has nothing
	// to hide. --effort low reaches the prompt.
	nt, _ := m.NewChat(k3.ChatOptions{Options: chat.Options{NoThinking: true}})
	b := turn(nt, "Hi")
	code, out, stderr = runCmd(t, "run", "--model", dir, "--chat", "--prompt", "Hi", "--thinking=false", "--max-tokens", "10")
	if code != 0 || out != shown(m, b.Content)+"\n" || strings.Contains(stderr, "thinking:") {
		t.Errorf("--thinking=false: exit %d, %q, want %q (%s)", code, out, b.Content, stderr)
	}
	low, _ := m.NewChat(k3.ChatOptions{Options: chat.Options{ThinkingEffort: chat.EffortLow}})
	l := turn(low, "Hi")
	code, _, stderr = runCmd(t, "run", "--model", dir, "--chat", "--prompt", "Hi", "--effort", "low", "--max-tokens", "10")
	if code != 0 || !strings.Contains(stderr, "thinking: "+shown(m, l.ReasoningContent)+"\n") {
		t.Errorf("--effort low: exit %d, stderr %q, want reasoning %q", code, stderr, l.ReasoningContent)
	}
	code, _, stderr = runCmd(t, "run", "--model", dir, "--chat", "--prompt", "Hi", "--hide-reasoning", "--max-tokens", "10")
	if code != 0 || strings.Contains(stderr, "thinking:") {
		t.Errorf("--hide-reasoning: exit %d, stderr %q", code, stderr)
	}
}

func TestRunErrors(t *testing.T) {
	dir := testmodel.Dir(t)
	noTok := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), noTok, synth.Tiny(), synth.WriteOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	withStdin(t, "")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--bogus"}, cli.ExitUsage},
		{[]string{"extra"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--prompt-file", "f"}, cli.ExitUsage},
		{[]string{"--prompt", ""}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--max-tokens", "0"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--temperature", "-1"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--temperature", "NaN"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--top-p", "1.5"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--min-p", "-0.1"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--top-k", "-1"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--stop", ""}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--system", "s"}, cli.ExitUsage},
		{[]string{"--chat", "--ignore-eos"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--thinking=false"}, cli.ExitUsage}, // not a chat
		{[]string{"--chat", "--prompt", "a", "--effort", "huge"}, cli.ExitUsage},
		{[]string{"--chat", "--prompt", "a", "--thinking=false", "--effort", "low"}, cli.ExitUsage},
		{[]string{"--prompt", "a", "--budget", "lots"}, cli.ExitUsage},
		{[]string{}, cli.ExitUsage},                                                  // empty prompt on stdin
		{[]string{"--prompt", "one two three", "--max-context", "2"}, cli.ExitUsage}, // prompt longer than the context
		{[]string{"--prompt-file", filepath.Join(noTok, "absent")}, cli.ExitUsage},
		{[]string{"--model", noTok, "--prompt", "a"}, cli.ExitUsage}, // no tokenizer
		{[]string{"--model", t.TempDir(), "--prompt", "a"}, cli.ExitCheckpoint},
		{[]string{"--help"}, cli.ExitOK},
	} {
		args := append([]string{"run"}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "--model") {
			args = append(args, "--model", dir)
		}
		code, out, stderr := runCmd(t, args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, stderr)
		}
		// Flag syntax errors come with the usage (the flag package's way);
		// every other error is one line.
		flagErr := len(c.args) > 0 && (c.args[0] == "--bogus" || slices.Contains(c.args, "--stop"))
		if code != cli.ExitOK && !flagErr && (out != "" || strings.Count(stderr, "\n") != 1) {
			t.Errorf("%v: stdout %q, stderr %q: want one line of error", c.args, out, stderr)
		}
	}
}

// TestRunLongPrompt: a long prompt gives the same text whether the
// progress is shown on a terminal (/dev/null is a character device, so
// it passes for one), as plain lines, or not at all; its progress never
// reaches stdout; a bad --progress is a usage error.
func TestRunLongPrompt(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer devnull.Close()
	if !isTerminal(devnull) {
		t.Skip("no character device to stand for a terminal")
	}
	dir := testmodel.Dir(t)
	prompt := strings.Repeat("A long prompt about nothing in particular. ", 14)
	args := []string{"run", "--model", dir, "--prompt", prompt, "--max-tokens", "6", "--temperature", "0.5", "--prefill-chunk", "64"}
	var want bytes.Buffer
	var errb bytes.Buffer
	if code := run(append(args, "--progress", "off"), strings.NewReader(""), &want, &errb); code != 0 || want.Len() == 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, mode := range []string{"auto", "lines"} {
		var out bytes.Buffer
		if code := run(append(args, "--progress", mode), strings.NewReader(""), &out, devnull); code != 0 {
			t.Fatalf("--progress %s: exit %d", mode, code)
		}
		if out.String() != want.String() {
			t.Errorf("--progress %s: %q, without progress %q", mode, out.String(), want.String())
		}
	}
	errb.Reset()
	if code := run(append(args, "--progress", "sometimes"), strings.NewReader(""), io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "--progress") {
		t.Errorf("--progress sometimes: exit %d: %s", code, errb.String())
	}
}

// runDefaults are k3 run's generation defaults (see runUsage), for the
// expected outputs.
func runDefaults(maxTokens int) k3.GenerateOptions {
	return k3.GenerateOptions{MaxTokens: maxTokens, Sampling: k3.SamplingOptions{Temperature: 1, Seed: 1}}
}

// shown is chat text as k3 run shows it: without the tokenizer's special
// tokens, and with U+FFFD for bytes that are not UTF-8.
func shown(m *k3.Model, s string) string {
	for _, a := range m.Tokenizer().AddedTokens() {
		if a.Special {
			s = strings.ReplaceAll(s, a.Content, "")
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
