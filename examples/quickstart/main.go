// Quickstart writes a tiny synthetic Kimi K3 checkpoint into a temporary
// directory, opens it with k3 and streams a generation from a text prompt.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart --model /models/kimi-k3 --prompt "The capital of France is"
//
// The synthetic model has random weights, so its text is gibberish; with
// --model it runs a real checkpoint the same way.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/app/synth"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "checkpoint `directory` (default: write a tiny synthetic one into a temporary directory)")
	prompt := fs.String("prompt", "Once upon a time", "prompt `text`")
	maxTokens := fs.Int("max-tokens", 32, "number of tokens to generate")
	if err := fs.Parse(args); err != nil {
		return err
	}

	dir := *modelDir
	if dir == "" {
		// A tiny checkpoint (about 4 MB) with a tokenizer: the same files
		// a real checkpoint has, with random weights.
		tmp, err := os.MkdirTemp("", "k3-quickstart-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "model")
		if _, err := synth.Write(ctx, dir, synth.Quickstart(), synth.WriteOptions{}); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote a tiny synthetic checkpoint to %s\n", dir)
	}

	// Open reads config.json, the safetensors shards and the tokenizer.
	m, err := k3.Open(dir, k3.Options{})
	if err != nil {
		return err
	}
	defer m.Close()
	cfg := m.Config()
	fmt.Fprintf(stderr, "%d layers, %d experts per layer, vocabulary %d\n", cfg.Layers, cfg.Experts, cfg.Vocab)

	tok := m.Tokenizer()
	if tok == nil {
		return fmt.Errorf("%s has no tokenizer (tiktoken.model)", dir)
	}
	ids := tok.Encode(*prompt)

	// Generate streams tokens as they are produced; Token.Text holds
	// whole UTF-8 characters only.
	fmt.Fprint(stdout, *prompt)
	for t, err := range m.Generate(ctx, ids, k3.GenerateOptions{MaxTokens: *maxTokens}) {
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, t.Text)
	}
	fmt.Fprintln(stdout)
	return nil
}
