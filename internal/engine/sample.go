package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling chooses the next token from the logits; it is
// k3.SamplingOptions, see its fields' documentation. The zero value is
// greedy decoding (argmax, first index on ties).
type Sampling struct {
	// Temperature divides the logits; 0 (or less) means greedy argmax.
	Temperature float32
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches P; 0 or 1 keeps all.
	TopP float32
	// MinP drops tokens less likely than MinP × the most likely one; 0
	// keeps all.
	MinP float32
	// RepetitionPenalty (> 1 discourages) divides positive logits and
	// multiplies negative ones of every token already in the sequence;
	// 0 or 1 disables it.
	RepetitionPenalty float32
	// PresencePenalty is subtracted once from the logit of every token
	// already in the sequence; FrequencyPenalty once per occurrence.
	PresencePenalty, FrequencyPenalty float32
	// Seed makes sampling reproducible: the same seed, prompt and options
	// give the same tokens.
	Seed uint64
}

// Validate checks the options' values.
func (o *Sampling) Validate() error {
	switch {
	case math.IsNaN(float64(o.Temperature)) || math.IsInf(float64(o.Temperature), 0):
		return fmt.Errorf("temperature %v is not finite", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("top-k %d is negative", o.TopK)
	case !(o.TopP >= 0 && o.TopP <= 1):
		return fmt.Errorf("top-p %v is outside [0, 1]", o.TopP)
	case !(o.MinP >= 0 && o.MinP <= 1):
		return fmt.Errorf("min-p %v is outside [0, 1]", o.MinP)
	case !(o.RepetitionPenalty >= 0) || math.IsInf(float64(o.RepetitionPenalty), 0):
		return fmt.Errorf("repetition penalty %v is invalid", o.RepetitionPenalty)
	case math.IsNaN(float64(o.PresencePenalty)) || math.IsNaN(float64(o.FrequencyPenalty)):
		return fmt.Errorf("penalties must be numbers")
	}
	return nil
}

// sampler picks tokens. It owns its buffers so that sampling allocates
// nothing per token.
type sampler struct {
	o      Sampling
	rng    *rand.Rand
	counts map[int]int // occurrences in the sequence, for penalties
	logit  []float32
	idx    []int32
	prob   []float64
}

func newSampler(o Sampling, vocab int) *sampler {
	s := &sampler{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x6b33)), counts: map[int]int{}}
	if o.Temperature > 0 || o.penalised() {
		s.logit = make([]float32, vocab)
	}
	if o.Temperature > 0 {
		s.idx = make([]int32, vocab)
		s.prob = make([]float64, vocab)
	}
	return s
}

func (o *Sampling) penalised() bool {
	return (o.RepetitionPenalty != 0 && o.RepetitionPenalty != 1) || o.PresencePenalty != 0 || o.FrequencyPenalty != 0
}

// observe records a token of the sequence for the penalties.
func (s *sampler) observe(id int) {
	if s.o.penalised() {
		s.counts[id]++
	}
}

// pickMasked returns the next token for these logits among the ids the
// mask allows (the others' logits count as −∞, before penalties,
// temperature and truncation).
func (s *sampler) pickMasked(logits []float32, mask []uint64) int {
	if len(s.logit) < len(logits) {
		s.logit = make([]float32, len(logits))
	}
	masked(s.logit[:len(logits)], logits, mask)
	return s.pickFrom(s.logit[:len(logits)], true)
}

// pick returns the next token for these logits.
func (s *sampler) pick(logits []float32) int { return s.pickFrom(logits, false) }

// pickFrom is pick; own says logits is the sampler's buffer already, so
// the penalties may change it in place.
func (s *sampler) pickFrom(logits []float32, own bool) int {
	l := logits
	if s.o.penalised() {
		if !own {
			copy(s.logit, logits)
		}
		l = s.logit[:len(logits)]
		for id, n := range s.counts {
			v := l[id]
			if r := s.o.RepetitionPenalty; r != 0 && r != 1 {
				if v > 0 {
					v /= r
				} else {
					v *= r
				}
			}
			v -= s.o.PresencePenalty + s.o.FrequencyPenalty*float32(n)
			l[id] = v
		}
	}
	if s.o.Temperature <= 0 {
		return argmax(l)
	}
	if own {
		return s.sampleAllowed(l)
	}
	// Candidates sorted by logit (descending, lower id first on ties).
	idx := s.idx[:len(l)]
	for i := range idx {
		idx[i] = int32(i)
	}
	return s.sample(l, idx)
}

// sampleAllowed samples from masked logits: the candidates are the
// allowed ids only (finite logits), sorted as sample wants them when a
// truncation (top-k, top-p, min-p) needs the order, else in id order (the
// distribution is the same, and a mask inside a string allows most of a
// large vocabulary: no sort then).
func (s *sampler) sampleAllowed(l []float32) int {
	idx := s.idx[:0]
	var best float32
	for i, v := range l {
		if math.IsInf(float64(v), -1) || v != v {
			continue
		}
		if len(idx) == 0 || v > best {
			best = v
		}
		idx = append(idx, int32(i))
	}
	if len(idx) == 0 {
		return argmax(l)
	}
	if s.o.TopK == 0 && (s.o.TopP == 0 || s.o.TopP == 1) && s.o.MinP == 0 {
		inv := 1 / float64(s.o.Temperature)
		p := s.prob[:len(idx)]
		var z float64
		for i, id := range idx {
			p[i] = math.Exp((float64(l[id]) - float64(best)) * inv)
			z += p[i]
		}
		u := s.rng.Float64() * z
		for i := range idx {
			u -= p[i]
			if u < 0 {
				return int(idx[i])
			}
		}
		return int(idx[len(idx)-1])
	}
	return s.sample(l, idx)
}

// sample draws from the candidates idx: sorted by logit (descending, lower
// id first on ties), truncated by top-k, min-p and top-p, then by the
// softmax at the temperature.
func (s *sampler) sample(l []float32, idx []int32) int {
	slices.SortFunc(idx, func(a, b int32) int {
		la, lb := l[a], l[b]
		switch {
		case la > lb || (la == lb && a < b):
			return -1
		case la < lb || (la == lb && a > b):
			return 1
		}
		return 0
	})
	n := len(idx)
	if s.o.TopK > 0 && s.o.TopK < n {
		n = s.o.TopK
	}
	// Softmax over the kept candidates at this temperature, in float64.
	inv := 1 / float64(s.o.Temperature)
	top := float64(l[idx[0]])
	p := s.prob[:n]
	var z float64
	for i := 0; i < n; i++ {
		p[i] = math.Exp((float64(l[idx[i]]) - top) * inv)
		z += p[i]
	}
	if s.o.MinP > 0 {
		cut := float64(s.o.MinP) * p[0]
		for n > 1 && p[n-1] < cut {
			z -= p[n-1]
			n--
		}
	}
	if s.o.TopP > 0 && s.o.TopP < 1 {
		var cum float64
		for i := 0; i < n; i++ {
			cum += p[i]
			if cum >= float64(s.o.TopP)*z {
				n = i + 1
				break
			}
		}
		z = 0
		for i := 0; i < n; i++ {
			z += p[i]
		}
	}
	u := s.rng.Float64() * z
	for i := 0; i < n; i++ {
		u -= p[i]
		if u < 0 {
			return int(idx[i])
		}
	}
	return int(idx[n-1])
}

// argmax returns the index of the largest value, the first on ties. NaNs
// never win.
func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] || (v[best] != v[best] && x == x) {
			best = i
		}
	}
	return best
}

// logprobs returns the log-probability of id under the softmax of logits
// (unmodified: no penalty, temperature or truncation) and, when top > 0,
// the top most likely tokens appended to best (most likely first, lower id
// first on ties). It works in float64 so that the log-sum-exp of a large
// vocabulary stays exact to float32.
func logprobs(logits []float32, id int, best []TokenLogprob, top int) (float32, []TokenLogprob) {
	hi := logits[argmax(logits)]
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v - hi))
	}
	logZ := float64(hi) + math.Log(z)
	lp := float32(float64(logits[id]) - logZ)
	if top <= 0 {
		return lp, nil
	}
	top = min(top, len(logits))
	// Keep the best top ids in order by insertion: a vocabulary-long scan
	// where almost every value is rejected by the comparison with the last.
	for i, v := range logits {
		n := len(best)
		if n == top && !(v > best[n-1].Logprob) {
			continue
		}
		if n < top {
			best = append(best, TokenLogprob{})
		} else {
			n--
		}
		k := n
		for k > 0 && v > best[k-1].Logprob {
			best[k] = best[k-1]
			k--
		}
		best[k] = TokenLogprob{ID: i, Logprob: v}
	}
	for k := range best {
		best[k].Logprob = float32(float64(best[k].Logprob) - logZ)
	}
	return lp, best
}
