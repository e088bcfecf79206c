package engine

import (
	"math"
	"slices"
	"testing"
)

// crafted is a distribution over 8 tokens, stored out of order so that
// the sampler's index bookkeeping is checked: token 5 has probability
// 0.40, 2 has 0.25, 7 0.15, 0 0.10, 3 0.05, 6 0.03, 1 0.015, 4 0.005.
var crafted = map[int]float64{5: 0.40, 2: 0.25, 7: 0.15, 0: 0.10, 3: 0.05, 6: 0.03, 1: 0.015, 4: 0.005}

func craftedLogits() []float32 {
	l := make([]float32, len(crafted))
	for id, p := range crafted {
		l[id] = float32(math.Log(p)) + 3 // a shift changes nothing
	}
	return l
}

// draw samples n tokens and returns their frequencies.
func draw(o Sampling, logits []float32, n int) map[int]float64 {
	s := newSampler(o, len(logits))
	f := map[int]float64{}
	for range n {
		f[s.pick(logits)] += 1 / float64(n)
	}
	return f
}

// checkFreq compares sampled frequencies with the renormalised crafted
// probabilities of the kept tokens; every other token must never appear.
func checkFreq(t *testing.T, name string, got map[int]float64, kept []int, n int) {
	t.Helper()
	var z float64
	for _, id := range kept {
		z += crafted[id]
	}
	for id, f := range got {
		if !slices.Contains(kept, id) {
			t.Errorf("%s: token %d drawn (%.4f) but should be cut", name, id, f)
		}
	}
	for _, id := range kept {
		p := crafted[id] / z
		sigma := math.Sqrt(p * (1 - p) / float64(n))
		if d := math.Abs(got[id] - p); d > 5*sigma+1e-9 {
			t.Errorf("%s: token %d drawn %.4f, want %.4f ± %.4f", name, id, got[id], p, 5*sigma)
		}
	}
}

func TestSamplerTruncation(t *testing.T) {
	l := craftedLogits()
	const n = 40000
	for _, c := range []struct {
		name string
		o    Sampling
		kept []int
	}{
		{"all", Sampling{Temperature: 1}, []int{5, 2, 7, 0, 3, 6, 1, 4}},
		{"top-k 1", Sampling{Temperature: 1, TopK: 1}, []int{5}},
		{"top-k 3", Sampling{Temperature: 1, TopK: 3}, []int{5, 2, 7}},
		{"top-k 100", Sampling{Temperature: 1, TopK: 100}, []int{5, 2, 7, 0, 3, 6, 1, 4}},
		// The smallest prefix whose mass reaches P: 0.40, 0.65, 0.80, 0.90, 0.95.
		{"top-p 0.3", Sampling{Temperature: 1, TopP: 0.3}, []int{5}},
		{"top-p 0.6", Sampling{Temperature: 1, TopP: 0.6}, []int{5, 2}},
		{"top-p 0.7", Sampling{Temperature: 1, TopP: 0.7}, []int{5, 2, 7}},
		{"top-p 0.92", Sampling{Temperature: 1, TopP: 0.92}, []int{5, 2, 7, 0, 3}},
		{"top-p 1", Sampling{Temperature: 1, TopP: 1}, []int{5, 2, 7, 0, 3, 6, 1, 4}},
		// Tokens below MinP × 0.40 go: 0.2 → cut under 0.08.
		{"min-p 0.2", Sampling{Temperature: 1, MinP: 0.2}, []int{5, 2, 7, 0}},
		{"min-p 0.05", Sampling{Temperature: 1, MinP: 0.05}, []int{5, 2, 7, 0, 3, 6}},
		{"min-p 1", Sampling{Temperature: 1, MinP: 1}, []int{5}},
		// Top-k first, then min-p, then top-p over what is left
		// (renormalised): top-k 4 keeps 0.40..0.10 (mass 0.90); top-p
		// 0.7 of that is 0.63, reached at 0.65.
		{"top-k 4, top-p 0.7", Sampling{Temperature: 1, TopK: 4, TopP: 0.7}, []int{5, 2}},
		{"top-k 6, min-p 0.2", Sampling{Temperature: 1, TopK: 6, MinP: 0.2}, []int{5, 2, 7, 0}},
	} {
		checkFreq(t, c.name, draw(c.o, l, n), c.kept, n)
	}
}

// TestSamplerTemperature: T divides the logits, so p ∝ p₀^(1/T).
func TestSamplerTemperature(t *testing.T) {
	l := craftedLogits()
	const n = 40000
	for _, temp := range []float32{0.5, 2} {
		got := draw(Sampling{Temperature: temp}, l, n)
		var z float64
		for _, p := range crafted {
			z += math.Pow(p, 1/float64(temp))
		}
		for id, p0 := range crafted {
			p := math.Pow(p0, 1/float64(temp)) / z
			if d := math.Abs(got[id] - p); d > 5*math.Sqrt(p*(1-p)/n)+1e-9 {
				t.Errorf("T=%v: token %d drawn %.4f, want %.4f", temp, id, got[id], p)
			}
		}
	}
}

// TestSamplerGreedy: temperature 0 is argmax (the first on ties, never a
// NaN), whatever the truncation options and the seed.
func TestSamplerGreedy(t *testing.T) {
	l := craftedLogits()
	for _, o := range []Sampling{{}, {TopK: 3, TopP: 0.5, MinP: 0.3, Seed: 99}, {Temperature: -1}} {
		s := newSampler(o, len(l))
		for range 5 {
			if id := s.pick(l); id != 5 {
				t.Errorf("%+v: picked %d, want 5", o, id)
			}
		}
	}
	tie := []float32{1, 3, float32(math.NaN()), 3, 2}
	if id := newSampler(Sampling{}, len(tie)).pick(tie); id != 1 {
		t.Errorf("tie: picked %d, want 1", id)
	}
	if id := argmax([]float32{float32(math.NaN()), -5, -7}); id != 1 {
		t.Errorf("NaN first: argmax %d, want 1", id)
	}
	// Top-k 1 at any temperature is greedy too, and so is a tie broken
	// by the lower id when sampling.
	s := newSampler(Sampling{Temperature: 1.5, TopK: 1, Seed: 3}, len(tie))
	if id := s.pick(tie); id != 1 {
		t.Errorf("top-k 1 on a tie: picked %d, want 1", id)
	}
}

// TestSamplerSeed: the same seed gives the same draws; other seeds differ.
func TestSamplerSeed(t *testing.T) {
	l := craftedLogits()
	seq := func(seed uint64) []int {
		s := newSampler(Sampling{Temperature: 1, Seed: seed}, len(l))
		out := make([]int, 64)
		for i := range out {
			out[i] = s.pick(l)
		}
		return out
	}
	a := seq(42)
	if !slices.Equal(a, seq(42)) {
		t.Error("seed 42 gave two sequences")
	}
	if slices.Equal(a, seq(43)) || slices.Equal(seq(0), seq(1)) {
		t.Error("different seeds gave the same sequence")
	}
}

// TestSamplerPenalties: the repetition penalty divides a positive logit
// and multiplies a negative one; the presence penalty is subtracted once,
// the frequency penalty once per occurrence; the caller's logits are left
// alone.
func TestSamplerPenalties(t *testing.T) {
	pick := func(o Sampling, logits []float32, seen ...int) (int, []float32) {
		s := newSampler(o, len(logits))
		for _, id := range seen {
			s.observe(id)
		}
		in := slices.Clone(logits)
		id := s.pick(in)
		if !slices.Equal(in, logits) {
			t.Errorf("%+v: pick changed the logits to %v", o, in)
		}
		return id, s.logit
	}
	l := []float32{2.0, 1.5, -1.0, -1.2}
	for _, c := range []struct {
		o    Sampling
		seen []int
		want int
		adj  []float32 // the penalised logits, when set
	}{
		{Sampling{}, []int{0}, 0, nil},
		{Sampling{RepetitionPenalty: 1}, []int{0}, 0, nil},
		{Sampling{RepetitionPenalty: 1.2}, []int{0}, 0, []float32{2.0 / 1.2, 1.5, -1.0, -1.2}},
		{Sampling{RepetitionPenalty: 2}, []int{0, 0, 2}, 1, []float32{1.0, 1.5, -2.0, -1.2}},
		{Sampling{RepetitionPenalty: 0.5}, []int{1}, 1, []float32{2.0, 3.0, -1.0, -1.2}}, // < 1 encourages
		{Sampling{PresencePenalty: 0.4}, []int{0, 0, 0}, 0, []float32{1.6, 1.5, -1.0, -1.2}},
		{Sampling{PresencePenalty: 0.6}, []int{0}, 1, []float32{1.4, 1.5, -1.0, -1.2}},
		{Sampling{FrequencyPenalty: 0.3}, []int{0}, 0, []float32{1.7, 1.5, -1.0, -1.2}},
		{Sampling{FrequencyPenalty: 0.3}, []int{0, 0}, 1, []float32{1.4, 1.5, -1.0, -1.2}},
		{Sampling{PresencePenalty: -1}, []int{3}, 0, []float32{2.0, 1.5, -1.0, -0.2}}, // negative rewards
		{Sampling{RepetitionPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25}, []int{2, 2}, 0, []float32{2.0, 1.5, -3.0, -1.2}},
	} {
		id, adj := pick(c.o, l, c.seen...)
		if id != c.want {
			t.Errorf("%+v after %v: picked %d, want %d", c.o, c.seen, id, c.want)
		}
		if c.adj != nil {
			for i := range adj {
				if math.Abs(float64(adj[i]-c.adj[i])) > 1e-6 {
					t.Errorf("%+v after %v: logits %v, want %v", c.o, c.seen, adj, c.adj)
					break
				}
			}
		}
	}
	// Penalties apply before sampling too: with token 5 seen and a large
	// presence penalty, it is never drawn.
	s := newSampler(Sampling{Temperature: 1, PresencePenalty: 100, Seed: 1}, 8)
	s.observe(5)
	for range 2000 {
		if s.pick(craftedLogits()) == 5 {
			t.Fatal("a penalised token was drawn")
		}
	}
}

func TestSamplingValidate(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, o := range []Sampling{
		{Temperature: nan}, {Temperature: inf}, {TopK: -1}, {TopP: -0.1}, {TopP: 1.1}, {TopP: nan},
		{MinP: -1}, {MinP: 2}, {RepetitionPenalty: -1}, {RepetitionPenalty: nan}, {RepetitionPenalty: inf},
		{PresencePenalty: nan}, {FrequencyPenalty: nan},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, o := range []Sampling{{}, {Temperature: 0.7, TopK: 40, TopP: 0.95, MinP: 0.05, RepetitionPenalty: 1.1, PresencePenalty: -2, FrequencyPenalty: 2}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
