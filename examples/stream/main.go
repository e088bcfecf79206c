// Stream shows token streaming with cancellation: Model.Generate yields
// tokens as they are produced, and a generation ends early when the
// caller breaks out of the loop (here after --stop-after tokens) or when
// its context is cancelled (a --timeout deadline, or Ctrl-C).
//
//	go run ./examples/stream --stop-after 10
//	go run ./examples/stream --timeout 200ms --max-tokens 100000 --max-context 100000
//	go run ./examples/stream --model /models/kimi-k3 --prompt "Write a poem" --verbose
//
// With no --model it uses the quickstart checkpoint (a tiny synthetic
// model with random weights, written once into the user's cache).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stream:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "checkpoint `directory` (default: the quickstart checkpoint)")
	prompt := fs.String("prompt", "Once upon a time", "prompt `text`")
	maxTokens := fs.Int("max-tokens", 64, "most tokens to generate")
	maxContext := fs.Int("max-context", 0, "positions per session (0 = 4096)")
	stopAfter := fs.Int("stop-after", 0, "stop after `N` tokens by breaking out of the loop (0 = never)")
	timeout := fs.Duration("timeout", 0, "cancel the generation after this `duration` (0 = never)")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature (0 = greedy)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	verbose := fs.Bool("verbose", false, "print one line per token: index, id, time, text")
	if err := fs.Parse(args); err != nil {
		return err
	}

	dir := *modelDir
	if dir == "" {
		var err error
		if dir, err = testmodel.Cached(ctx, stderr); err != nil {
			return err
		}
	}
	m, err := k3.Open(dir, k3.Options{MaxContext: *maxContext})
	if err != nil {
		return err
	}
	defer m.Close()
	if m.Tokenizer() == nil {
		return fmt.Errorf("%s has no tokenizer", dir)
	}

	// The deadline covers the generation only, not loading.
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	opts := k3.GenerateOptions{
		MaxTokens: *maxTokens,
		Sampling:  k3.SamplingOptions{Temperature: float32(*temperature), TopP: 0.95, Seed: *seed},
	}
	start := time.Now()
	n, reason := 0, "max tokens"
	for t, err := range m.Generate(ctx, m.Tokenizer().Encode(*prompt), opts) {
		if err != nil {
			// A cancelled context ends the generation with its error, at
			// the next layer boundary.
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				reason = "deadline"
			case errors.Is(err, context.Canceled):
				reason = "cancelled"
			default:
				return err
			}
			break
		}
		n++
		if *verbose {
			fmt.Fprintf(stdout, "%4d %6d %8.1fms %q\n", t.Index, t.ID, float64(time.Since(start).Microseconds())/1000, t.Text)
		} else {
			fmt.Fprint(stdout, t.Text)
		}
		if *stopAfter > 0 && n == *stopAfter {
			// Breaking out of the loop stops the generation at once; the
			// session stays usable.
			reason = "stop-after"
			break
		}
	}
	if !*verbose {
		fmt.Fprintln(stdout)
	}
	el := time.Since(start)
	fmt.Fprintf(stderr, "%d tokens in %.3f s (%.1f tokens/s), stopped by %s\n", n, el.Seconds(), float64(n)/el.Seconds(), reason)
	return nil
}
