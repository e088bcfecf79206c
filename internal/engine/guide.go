package engine

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/k3go/k3/grammar"
)

// guide constrains one generation to a grammar (GenOptions.Constraint): it
// masks each position's logits to the tokens that keep the output
// completable before the sampler sees them (so temperature, top-k and
// top-p work on the allowed tokens only, and greedy takes the best allowed
// one), lets the generation's stop tokens through once the output may end
// there, and follows the tokens emitted. It masks every position of a
// speculative pass from the state its earlier rows leave, so the tokens
// are those of constrained decoding without drafts.
type guide struct {
	e     *Engine
	m     grammar.Matcher
	mask  []uint64 // one bit per id of the model's vocabulary
	stops []int
}

func newGuide(e *Engine, c grammar.Constraint, vocab int, stops []int) *guide {
	e.constrained.Add(1)
	return &guide{e: e, m: c.NewMatcher(), mask: make([]uint64, (vocab+63)/64), stops: stops}
}

// pick chooses the token for logits under the grammar's mask.
func (g *guide) pick(smp *sampler, logits []float32) (int, error) {
	start := time.Now()
	err := g.m.FillMask(g.mask)
	if err != nil {
		return 0, fmt.Errorf("k3: constraint: %w", err)
	}
	if g.m.CanEnd() {
		for _, id := range g.stops {
			g.mask[id>>6] |= 1 << (id & 63)
		}
	}
	// The vocabulary's ids beyond the model's (a tokenizer never has
	// them; the mask is as long as the logits) stay cleared: FillMask
	// writes the grammar vocabulary's words only, which may be fewer.
	n := 0
	for _, w := range g.mask {
		n += bits.OnesCount64(w)
	}
	g.e.maskNanos.Add(int64(time.Since(start)))
	g.e.maskTokens.Add(1)
	if n == 0 {
		return 0, fmt.Errorf("k3: constraint: no token may follow (the grammar is complete or stuck)")
	}
	return smp.pickMasked(logits, g.mask), nil
}

// accept follows token id, unless it is a stop token the output may end
// with (the grammar does not know it). It reports whether the grammar
// requires the generation to end now.
func (g *guide) accept(id int) (done bool, err error) {
	if slices.Contains(g.stops, id) && g.m.CanEnd() && !g.m.Allowed(id) {
		return true, nil
	}
	if err := g.m.Accept(id); err != nil {
		return true, fmt.Errorf("k3: constraint: token %d: %w", id, err)
	}
	return g.m.Done(), nil
}

// masked sets the logits of the ids mask does not allow to −∞.
func masked(dst, logits []float32, mask []uint64) {
	negInf := float32(math.Inf(-1))
	for id, v := range logits {
		if mask[id>>6]>>(id&63)&1 == 0 {
			v = negInf
		}
		dst[id] = v
	}
}
