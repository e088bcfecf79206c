package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/cli"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// TestRunContextDefault: without --max-context, k3 run's context is the
// largest the budget holds (said on stderr at start, and what the library
// plans: one more position does not fit); with it, nothing is said.
func TestRunContextDefault(t *testing.T) {
	dir := testmodel.Dir(t)
	in, err := k3.Inspect(dir, k3.Options{MaxContext: 1})
	if err != nil {
		t.Fatal(err)
	}
	budget := strconv.FormatInt(in.FloorBytes+8<<20, 10)
	code, _, stderr := runCmd(t, "run", "--model", dir, "--budget", budget, "--prompt", "hi", "--max-tokens", "1", "--temperature", "0")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var n int
	if _, rest, ok := strings.Cut(stderr, "k3 run: context "); !ok {
		t.Fatalf("k3 run did not say its context: %q", stderr)
	} else if _, err := fmt.Sscan(rest, &n); err != nil || n <= 4096 {
		t.Fatalf("context %d (%v) from %q", n, err, rest)
	}
	m, err := k3.Open(dir, k3.Options{RAMBudget: in.FloorBytes + 8<<20, MaxContext: n + 1})
	if err == nil {
		m.Close()
		t.Errorf("%d positions fit the budget, more than the %d k3 run said were the most", n+1, n)
	}
	code, _, stderr = runCmd(t, "run", "--model", dir, "--budget", budget, "--max-context", "64", "--prompt", "hi", "--max-tokens", "1")
	if code != cli.ExitOK || strings.Contains(stderr, "context") {
		t.Errorf("--max-context 64: exit %d, stderr %q", code, stderr)
	}
}

// TestContextTooLongNamesTheFlag: a context the budget cannot hold is
// told as --max-context with the most that fits (exit 5), not as the RAM
// budget or an Options field.
func TestContextTooLongNamesTheFlag(t *testing.T) {
	dir := testmodel.Dir(t)
	for _, args := range [][]string{
		{"run", "--model", dir, "--preset", "laptop", "--max-context", "100000000", "--prompt", "hi"},
		{"generate", "--model", dir, "--preset", "laptop", "--max-context", "100000000", "--ids", "1"},
	} {
		code, _, stderr := runCmd(t, args...)
		if code != cli.ExitBudget || !strings.HasPrefix(stderr, "k3 "+args[0]+": --max-context 100000000: the context does not fit") ||
			!strings.Contains(stderr, "holds at most") || strings.Contains(stderr, "Options") || strings.Contains(stderr, "too small") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

// TestTokenizerBeforeWeights: a command that needs a tokenizer refuses a
// checkpoint without one before it reads a weight: here the shards are
// garbage, and the error is still the missing tokenizer (exit 2), not the
// shards (exit 3).
func TestTokenizerBeforeWeights(t *testing.T) {
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(testmodel.Dir(t), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("not a safetensors file"), 0o644)
	input := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(input, []byte(`{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"hi"}}`+"\n"), 0o644)
	for _, args := range [][]string{
		{"run", "--model", dir, "--prompt", "hi"},
		{"serve", "--model", dir, "--addr", "127.0.0.1:0"},
		{"bench-serve", "--model", dir},
		{"batch", "--model", dir, "--input", input, "--output", filepath.Join(t.TempDir(), "out.jsonl")},
	} {
		code, _, stderr := runCmd(t, args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, "has no tokenizer") || !strings.Contains(stderr, "--tokenizer") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, "generate", "--model", dir, "--ids", "1"); code != cli.ExitCheckpoint {
		t.Errorf("generate (no tokenizer needed) on garbage shards: exit %d: %s", code, stderr)
	}
}

// TestServeNoRequestTimeout: k3 serve bounds no request unless
// --request-timeout is given.
func TestServeNoRequestTimeout(t *testing.T) {
	_, usage, _ := runCmd(t, "help", "serve")
	_, help, ok := strings.Cut(usage, "  -request-timeout")
	if i := strings.Index(help, "\n  -"); i >= 0 {
		help = help[:i]
	}
	if !ok || !strings.Contains(help, "0 = no limit") || strings.Contains(help, "(default") {
		t.Errorf("--request-timeout's help does not say there is no limit by default: %q", help)
	}
}
