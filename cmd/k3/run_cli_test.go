package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestRunJSON: --json prints one object whose text is the streamed text,
// with token counts and the stop reason; a context too small for
// --max-tokens stops there and says so.
func TestRunJSON(t *testing.T) {
	dir := testmodel.Dir(t)
	const prompt = "Once upon a time"
	code, streamed, stderr := runCmd(t, "run", "--model", dir, "--prompt", prompt, "--max-tokens", "8", "--ignore-eos")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, out, stderr := runCmd(t, "run", "--model", dir, "--prompt", prompt, "--max-tokens", "8", "--ignore-eos", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var r runJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	// JSON carries text: bytes that are not UTF-8 arrive as U+FFFD.
	if r.Text+"\n" != string([]rune(streamed)) || r.GeneratedTokens != 8 || r.PromptTokens <= 0 || r.StopReason != "max_tokens" {
		t.Errorf("--json gave %+v; streamed %q", r, streamed)
	}

	// A 12-position context holds the prompt and a few tokens only.
	code, out, stderr = runCmd(t, "run", "--model", dir, "--prompt", prompt, "--max-tokens", "100", "--ignore-eos", "--max-context", "12", "--json")
	if code != 0 {
		t.Fatalf("small context: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.StopReason != "context_full" || r.PromptTokens+r.GeneratedTokens != 12 || !strings.Contains(stderr, "end of the context") {
		t.Errorf("small context: %+v, stderr %q", r, stderr)
	}

	withStdin(t, "")
	if code, _, stderr := runCmd(t, "run", "--model", dir, "--chat", "--json"); code != cli.ExitUsage {
		t.Errorf("--json in the interactive chat: exit %d (%s), want %d", code, stderr, cli.ExitUsage)
	}
	code, out, stderr = runCmd(t, "run", "--model", dir, "--chat", "--prompt", "Hi", "--max-tokens", "6", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.GeneratedTokens == 0 {
		t.Errorf("--chat --prompt --json: exit %d, %q (%s)", code, out, stderr)
	}
}

// TestDisplay: special tokens are dropped, other added text and valid
// UTF-8 pass, invalid bytes become U+FFFD; a nil display passes all.
func TestDisplay(t *testing.T) {
	m := openQuickstart(t)
	tok := m.Tokenizer()
	d := newDisplay(tok)
	bos, ok := tok.ID("[BOS]")
	if !ok {
		t.Fatal("quickstart tokenizer has no [BOS]")
	}
	if got := d.text(bos, "[BOS]"); got != "" {
		t.Errorf("[BOS] shown as %q", got)
	}
	if got := d.text(65, "héllo\xff"); got != "héllo\uFFFD" {
		t.Errorf("invalid UTF-8 shown as %q", got)
	}
	if got := (*display)(nil).text(bos, "[BOS]\xff"); got != "[BOS]\xff" {
		t.Errorf("nil display changed the text: %q", got)
	}
}

// TestChatIdleInterrupt: a Ctrl-C at the idle prompt says how to leave,
// and a second one leaves with errInterrupted (exit code 130); after a
// reply a Ctrl-C stopped, one more leaves. (TestChatCtrlC sends real
// Ctrl-Cs through a terminal.)
func TestChatIdleInterrupt(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	in := readLines(pr)
	defer in.stop()
	var stderr bytes.Buffer
	sig := make(chan os.Signal, 2)
	sig <- os.Interrupt
	sig <- os.Interrupt
	if _, _, err := in.next(sig, &stderr, false); err != errInterrupted || cli.ExitCode(err) != cli.ExitInterrupted {
		t.Fatalf("next returned %v, want errInterrupted", err)
	}
	if !strings.Contains(stderr.String(), "Ctrl-C again") {
		t.Errorf("no word on the first Ctrl-C: %q", stderr.String())
	}
	stderr.Reset()
	sig <- os.Interrupt
	if _, _, err := in.next(sig, &stderr, true); err != errInterrupted || strings.Contains(stderr.String(), "Ctrl-C again") {
		t.Fatalf("after a stopped reply: %v, %q; want errInterrupted at once", err, stderr.String())
	}
	go pw.Write([]byte("hello\n"))
	sig <- os.Interrupt
	// One Ctrl-C, then a line: the line is read (the chat goes on).
	for {
		line, ok, err := in.next(sig, &stderr, false)
		if err != nil || !ok {
			t.Fatalf("next: %q, %v, %v", line, ok, err)
		}
		if line == "hello" {
			break
		}
	}
}

// TestReplyStopsAtEndOfInput: the end of a terminal's input during a reply
// stops it at the next token instead of waiting for the whole reply.
func TestReplyStopsAtEndOfInput(t *testing.T) {
	m := openQuickstart(t)
	o := &runOpts{gen: runDefaults(50), show: newDisplay(m.Tokenizer()), effort: "max"}
	c, err := o.newChat(m)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	quit := make(chan struct{})
	close(quit)
	var n tokenCount
	if _, err := o.reply(context.Background(), c, "Hello there.", io.Discard, io.Discard, &n, quit); err != nil {
		t.Fatal(err)
	}
	if n.generated > 2 {
		t.Errorf("the reply went on for %d tokens after the input ended", n.generated)
	}
}
