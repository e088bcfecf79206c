package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/k3go/k3"
)

// modelFlags are the flags every command that loads a model shares.
type modelFlags struct {
	dir        string
	threads    int
	maxContext int
	trunk      string
	budget     budgetFlags
}

func (m *modelFlags) register(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}) {
	m.budget.register(fs)
	fs.StringVar(&m.trunk, "trunk", "", "packed trunk `directory` written by k3 pack (default: read the trunk from the shards)")
	fs.StringVar(&m.dir, "model", "", "checkpoint `directory` (config.json and *.safetensors)")
	fs.IntVar(&m.threads, "threads", 0, "kernel threads (0 = GOMAXPROCS)")
	fs.IntVar(&m.maxContext, "max-context", 0, "positions per session (0 = 4096)")
}

func (m *modelFlags) open(ctx context.Context) (*k3.Model, error) {
	if m.dir == "" {
		return nil, usagef("--model is required")
	}
	budget, err := m.budget.bytes()
	if err != nil {
		return nil, err
	}
	return k3.OpenContext(ctx, m.dir, k3.Options{Threads: m.threads, MaxContext: m.maxContext, RAMBudget: budget, TrunkDir: m.trunk})
}

func parseMode(s string) (k3.Mode, error) {
	switch s {
	case "incremental", "":
		return k3.Incremental, nil
	case "full":
		return k3.FullRecompute, nil
	}
	return 0, usagef("--mode must be full or incremental, not %q", s)
}

// signalContext cancels on Ctrl-C.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", "--model DIR --ids 1,2,3 [flags]", stderr)
	var mf modelFlags
	mf.register(fs)
	ids := fs.String("ids", "", "prompt token `ids`, comma separated")
	maxTokens := fs.Int("max-tokens", 16, "number of tokens to generate")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0 = greedy)")
	topK := fs.Int("top-k", 0, "keep the K most likely tokens (0 = all)")
	topP := fs.Float64("top-p", 0, "nucleus sampling threshold (0 = off)")
	minP := fs.Float64("min-p", 0, "drop tokens below this fraction of the best (0 = off)")
	seed := fs.Uint64("seed", 1, "sampling seed")
	mode := fs.String("mode", "incremental", "decoding `mode`: incremental (carried state) or full (re-forward per token)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	stats := fs.Bool("stats", false, "print I/O, cache, time and memory statistics (a \"stats\" object with --json)")
	if err := parse(fs, args); err != nil {
		return err
	}
	prompt, err := parseIDs(*ids)
	if err != nil {
		return err
	}
	md, err := parseMode(*mode)
	if err != nil {
		return err
	}
	if *maxTokens < 0 {
		return usagef("--max-tokens must not be negative")
	}
	ctx, cancel := signalContext()
	defer cancel()
	m, err := mf.open(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	opts := k3.GenerateOptions{MaxTokens: *maxTokens, Mode: md, Sampling: k3.SamplingOptions{
		Temperature: float32(*temperature), TopK: *topK, TopP: float32(*topP), MinP: float32(*minP), Seed: *seed}}
	var gen []int
	if *maxTokens > 0 {
		for tok, err := range m.Generate(ctx, prompt, opts) {
			if err != nil {
				return err
			}
			gen = append(gen, tok.ID)
			if !*asJSON {
				fmt.Fprintf(stdout, "%d\n", tok.ID)
			}
		}
	}
	if *asJSON {
		out := struct {
			PromptIDs    []int      `json:"prompt_ids"`
			GeneratedIDs []int      `json:"generated_ids"`
			Stats        *statsJSON `json:"stats,omitempty"`
		}{PromptIDs: prompt, GeneratedIDs: append([]int{}, gen...)}
		if *stats {
			out.Stats = toStatsJSON(m.Stats())
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	if *stats {
		fmt.Fprintln(stderr, formatStats(m.Stats()))
	}
	return nil
}

func runLogits(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("logits", "--model DIR --ids 1,2,3 [flags]", stderr)
	var mf modelFlags
	mf.register(fs)
	ids := fs.String("ids", "", "token `ids`, comma separated")
	mode := fs.String("mode", "incremental", "`mode`: full (one teacher-forced forward) or incremental (one token per step, carried state)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	tokens, err := parseIDs(*ids)
	if err != nil {
		return err
	}
	md, err := parseMode(*mode)
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	m, err := mf.open(ctx)
	if err != nil {
		return err
	}
	defer m.Close()
	V := m.Config().Vocab
	s := m.NewSession()
	var all []float32
	if md == k3.FullRecompute {
		if all, err = s.Logits(ctx, tokens); err != nil {
			return err
		}
	} else {
		all = make([]float32, 0, len(tokens)*V)
		for _, t := range tokens {
			l, err := s.Step(ctx, []int{t})
			if err != nil {
				return err
			}
			all = append(all, l...)
		}
	}
	type position struct {
		Argmax     int       `json:"argmax"`
		LogitsHead []float32 `json:"logits_head"`
	}
	out := struct {
		Positions  []position `json:"positions"`
		LastLogits []float32  `json:"last_logits"`
	}{}
	for i := range tokens {
		row := all[i*V : (i+1)*V]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		out.Positions = append(out.Positions, position{Argmax: best, LogitsHead: row[:min(8, V)]})
	}
	out.LastLogits = all[(len(tokens)-1)*V:]
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	for i, p := range out.Positions {
		fmt.Fprintf(stdout, "%d\ttoken %d\targmax %d\t%v\n", i, tokens[i], p.Argmax, p.LogitsHead)
	}
	return nil
}
