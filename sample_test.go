package k3_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/testkit/testmodel"
)

// openQuickstart opens the quickstart checkpoint (tiny model, 512-token
// vocabulary, generated tokenizer).
func openQuickstart(t *testing.T, opts k3.Options) *k3.Model {
	t.Helper()
	m, err := k3.Open(testmodel.Dir(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func generateIDs(t *testing.T, m *k3.Model, prompt []int, opts k3.GenerateOptions) []int {
	t.Helper()
	var ids []int
	for tok, err := range m.Generate(context.Background(), prompt, opts) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	return ids
}

// TestSamplingSeeds: on a real forward pass, the same seed gives the same
// tokens (at any thread count), other seeds other tokens.
func TestSamplingSeeds(t *testing.T) {
	m := openQuickstart(t, k3.Options{MaxContext: 128})
	m1 := openQuickstart(t, k3.Options{MaxContext: 128, Threads: 1})
	prompt := m.Tokenizer().Encode("The quick brown fox")
	opts := func(seed uint64) k3.GenerateOptions {
		return k3.GenerateOptions{MaxTokens: 24, Sampling: k3.SamplingOptions{Temperature: 1, TopP: 0.95, Seed: seed}}
	}
	a := generateIDs(t, m, prompt, opts(42))
	if len(a) != 24 {
		t.Fatalf("%d tokens", len(a))
	}
	if b := generateIDs(t, m, prompt, opts(42)); !slices.Equal(a, b) {
		t.Errorf("seed 42 twice: %v, %v", a, b)
	}
	if b := generateIDs(t, m1, prompt, opts(42)); !slices.Equal(a, b) {
		t.Errorf("seed 42 on one thread: %v, want %v", b, a)
	}
	distinct := map[string]bool{}
	for seed := range uint64(4) {
		distinct[fmt.Sprint(generateIDs(t, m, prompt, opts(seed)))] = true
	}
	if len(distinct) < 3 {
		t.Errorf("4 seeds gave %d distinct generations", len(distinct))
	}
}

// TestSamplingGreedy: temperature 0 is greedy whatever else is set, and
// equals top-k 1 at any temperature and the argmax of Step's logits.
func TestSamplingGreedy(t *testing.T) {
	m := openQuickstart(t, k3.Options{MaxContext: 128})
	prompt := m.Tokenizer().Encode("Hello, world!")
	greedy := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 16})
	for _, s := range []k3.SamplingOptions{
		{Temperature: 0, TopK: 5, TopP: 0.5, MinP: 0.1, Seed: 9},
		{Temperature: 1.3, TopK: 1, Seed: 11},
	} {
		if got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 16, Sampling: s}); !slices.Equal(got, greedy) {
			t.Errorf("%+v: %v, want greedy %v", s, got, greedy)
		}
	}
	// Greedy is the argmax of the logits, step by step.
	sess := m.NewSession()
	feed := prompt
	for i, want := range greedy {
		l, err := sess.Step(context.Background(), feed)
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for j, v := range l {
			if v > l[best] {
				best = j
			}
		}
		if best != want {
			t.Fatalf("token %d: argmax %d, Generate %d", i, best, want)
		}
		feed = []int{best}
	}
}

// TestSamplingPenaltiesEndToEnd: a large presence penalty forbids every
// token already in the sequence, prompt included; a repetition penalty
// changes greedy decoding that repeats itself.
func TestSamplingPenaltiesEndToEnd(t *testing.T) {
	m := openQuickstart(t, k3.Options{MaxContext: 256})
	prompt := m.Tokenizer().Encode("ab ab ab ab ab ab")
	got := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 40, Sampling: k3.SamplingOptions{PresencePenalty: 1e4}})
	seen := map[int]bool{}
	for _, id := range prompt {
		seen[id] = true
	}
	for i, id := range got {
		if seen[id] {
			t.Fatalf("token %d (%d) repeats despite the presence penalty: %v", i, id, got)
		}
		seen[id] = true
	}
	greedy := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 40})
	rep := generateIDs(t, m, prompt, k3.GenerateOptions{MaxTokens: 40, Sampling: k3.SamplingOptions{RepetitionPenalty: 5}})
	if slices.Equal(greedy, rep) {
		t.Errorf("repetition penalty 5 changed nothing: %v", rep)
	}
	// Invalid options are refused before any work.
	for _, s := range []k3.SamplingOptions{{TopK: -1}, {TopP: 2}, {MinP: -0.5}, {RepetitionPenalty: -1}} {
		for _, err := range m.Generate(context.Background(), prompt, k3.GenerateOptions{Sampling: s}) {
			if !errors.Is(err, k3.ErrBadOptions) {
				t.Errorf("%+v: %v, want ErrBadOptions", s, err)
			}
		}
	}
}
