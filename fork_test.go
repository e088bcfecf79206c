package k3_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/k3go/k3"
)

// A forked session continues bit-identically to a session fed the same
// tokens, and the original is left as it was.
func TestForkContinuesLikeTheOriginal(t *testing.T) {
	ctx := context.Background()
	m := openQuickstart(t, k3.Options{MaxContext: 64})
	prompt := []int{5, 17, 99, 3, 42, 8}
	cont := []int{11, 12, 13}

	ref := m.NewSession()
	defer ref.Close()
	want, err := ref.Logits(ctx, append(slices.Clone(prompt), cont...))
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config().Vocab

	s := m.NewSession()
	defer s.Close()
	if _, err := s.Step(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	f, err := s.Fork()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !slices.Equal(f.Tokens(), prompt) {
		t.Fatalf("fork holds %v, want %v", f.Tokens(), prompt)
	}
	for _, sess := range []*k3.Session{f, s} { // the fork first: the original must be untouched by it
		for i, id := range cont {
			got, err := sess.Step(ctx, []int{id})
			if err != nil {
				t.Fatal(err)
			}
			row := want[(len(prompt)+i)*V : (len(prompt)+i+1)*V]
			for j := range row {
				if math.Float32bits(got[j]) != math.Float32bits(row[j]) {
					t.Fatalf("position %d logit %d = %v, want %v", len(prompt)+i, j, got[j], row[j])
				}
			}
		}
	}
}

// Forks of a generated prefix carry its pending token, and sampled
// continuations with one seed are those of a single session.
func TestForkGenerateSameTokens(t *testing.T) {
	ctx := context.Background()
	m := openQuickstart(t, k3.Options{MaxContext: 64})
	opts := k3.GenerateOptions{MaxTokens: 6, Sampling: k3.SamplingOptions{Temperature: 0.8, Seed: 7}}
	gen := func(s *k3.Session, prompt []int) []int {
		var ids []int
		for tok, err := range s.Generate(ctx, prompt, opts) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, tok.ID)
		}
		return ids
	}
	alone := m.NewSession()
	defer alone.Close()
	want := gen(alone, []int{1, 2, 3, 4})

	s := m.NewSession()
	defer s.Close()
	if _, err := s.Step(ctx, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		f, err := s.Fork()
		if err != nil {
			t.Fatal(err)
		}
		if got := gen(f, []int{4}); !slices.Equal(got, want) {
			t.Fatalf("fork %d generated %v, want %v", k, got, want)
		}
		f.Close()
	}
}

// Under a budget, a fork takes a session's place like any other session.
func TestForkBudget(t *testing.T) {
	ctx := context.Background()
	m := openQuickstart(t, k3.Options{MaxContext: 32, RAMBudget: 1 << 30, Sessions: 1})
	s := m.NewSession()
	defer s.Close()
	if _, err := s.Step(ctx, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(); !errors.Is(err, k3.ErrBudget) {
		t.Fatalf("Fork with every place taken: %v, want ErrBudget", err)
	}
	if _, err := s.Step(ctx, []int{3}); err != nil {
		t.Fatalf("the original after a refused fork: %v", err)
	}
}

// Logprobs are the log-softmax of the raw logits: the sampled token's
// value, and the top alternatives in order, whatever the temperature.
func TestGenerateLogprobs(t *testing.T) {
	ctx := context.Background()
	m := openQuickstart(t, k3.Options{MaxContext: 64})
	prompt := []int{9, 8, 7, 6}
	opts := k3.GenerateOptions{MaxTokens: 4, Logprobs: true, TopLogprobs: 5,
		Sampling: k3.SamplingOptions{Temperature: 1.5, TopK: 3, Seed: 3, PresencePenalty: 1}}
	var toks []k3.Token
	for tok, err := range m.Generate(ctx, prompt, opts) {
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	ref := m.NewSession()
	defer ref.Close()
	seq := slices.Clone(prompt)
	V := m.Config().Vocab
	// Recompute each position's distribution from teacher-forced logits.
	for _, tok := range toks {
		seq = append(seq, tok.ID)
	}
	all, err := ref.Logits(ctx, seq[:len(seq)-1])
	if err != nil {
		t.Fatal(err)
	}
	for k, tok := range toks {
		row := all[(len(prompt)-1+k)*V : (len(prompt)+k)*V]
		hi := math.Inf(-1)
		for _, v := range row {
			hi = math.Max(hi, float64(v))
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v) - hi)
		}
		lz := hi + math.Log(z)
		if d := math.Abs(float64(tok.Logprob) - (float64(row[tok.ID]) - lz)); d > 1e-5 {
			t.Fatalf("token %d: logprob %v, want %v", k, tok.Logprob, float64(row[tok.ID])-lz)
		}
		if len(tok.TopLogprobs) != 5 {
			t.Fatalf("token %d: %d top logprobs, want 5", k, len(tok.TopLogprobs))
		}
		order := make([]int, V)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case row[a] > row[b]:
				return -1
			case row[a] < row[b]:
				return 1
			}
			return 0
		})
		for j, alt := range tok.TopLogprobs {
			if alt.ID != order[j] {
				t.Fatalf("token %d: top %d is %d, want %d", k, j, alt.ID, order[j])
			}
			if d := math.Abs(float64(alt.Logprob) - (float64(row[alt.ID]) - lz)); d > 1e-5 {
				t.Fatalf("token %d: top %d logprob %v, want %v", k, j, alt.Logprob, float64(row[alt.ID])-lz)
			}
		}
		if tok.Logprob > tok.TopLogprobs[0].Logprob {
			t.Fatalf("token %d: logprob %v above the best %v", k, tok.Logprob, tok.TopLogprobs[0].Logprob)
		}
	}
	// Without Logprobs nothing is filled; out of range is refused.
	for tok, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: 1}) {
		if err != nil || tok.Logprob != 0 || tok.TopLogprobs != nil {
			t.Fatalf("without Logprobs: %+v, %v", tok, err)
		}
	}
	for _, err := range m.Generate(ctx, prompt, k3.GenerateOptions{MaxTokens: 1, Logprobs: true, TopLogprobs: k3.MaxTopLogprobs + 1}) {
		if !errors.Is(err, k3.ErrBadOptions) {
			t.Fatalf("TopLogprobs %d: %v, want ErrBadOptions", k3.MaxTopLogprobs+1, err)
		}
	}
}

// ObservePasses sees every pass: its rows add up to Stats.Rows.
func TestObservePasses(t *testing.T) {
	ctx := context.Background()
	m := openQuickstart(t, k3.Options{MaxContext: 64})
	var passes, rows int
	m.ObservePasses(func(r int, d time.Duration) {
		passes++
		rows += r
		if d <= 0 {
			t.Errorf("pass of %d rows took %v", r, d)
		}
	})
	before := m.Stats()
	for _, err := range m.Generate(ctx, []int{1, 2, 3, 4, 5}, k3.GenerateOptions{MaxTokens: 4}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	d := m.Stats().Sub(before)
	m.ObservePasses(nil)
	if int64(passes) != d.Passes || int64(rows) != d.Rows || passes == 0 {
		t.Fatalf("observed %d passes, %d rows; Stats says %d, %d", passes, rows, d.Passes, d.Rows)
	}
}
