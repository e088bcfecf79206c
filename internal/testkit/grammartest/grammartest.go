// Package grammartest helps test constrained generation: it loads the
// release tokenizer as a grammar vocabulary, validates JSON with an
// independent JSON Schema validator, and samples tokens from random
// logits restricted to a matcher's mask, as a model with random weights
// would. The engine's end-to-end tests use it with a model's logits in
// place of the random ones.
package grammartest

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/tokenizer"
)

// ReleaseDir is the fixture folder of the released K3 tokenizer.
const ReleaseDir = "tokenizer-k3-release"

var release struct {
	sync.Mutex
	dir string
	tok *tokenizer.Tokenizer
	voc *grammar.Vocab
}

// Release returns the released K3 tokenizer and its grammar vocabulary,
// loaded once per test binary. It skips the test when the fixture is
// absent (and fails it when K3_FIXTURES is set), as fixtures.Path does.
func Release(tb testing.TB) (*tokenizer.Tokenizer, *grammar.Vocab) {
	tb.Helper()
	dir := fixtures.Path(tb, ReleaseDir)
	release.Lock()
	defer release.Unlock()
	if release.dir != dir {
		tok, err := tokenizer.Load(dir)
		if err != nil {
			tb.Fatalf("loading %s: %v", dir, err)
		}
		v, err := chat.GrammarVocab(tok)
		if err != nil {
			tb.Fatalf("grammar vocabulary of %s: %v", dir, err)
		}
		release.dir, release.tok, release.voc = dir, tok, v
	}
	return release.tok, release.voc
}

// Validator checks JSON against a schema with
// github.com/santhosh-tekuri/jsonschema/v6 (draft 2020-12, formats
// asserted): an implementation independent of package grammar.
type Validator struct {
	s *jsonschema.Schema
}

// NewValidator compiles schema (JSON) or fails the test.
func NewValidator(tb testing.TB, schema string) *Validator {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		tb.Fatalf("schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		tb.Fatalf("schema: %v", err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		tb.Fatalf("schema does not compile in the validator: %v", err)
	}
	return &Validator{s: s}
}

// Validate returns nil when instance is one JSON value valid under the
// schema.
func (v *Validator) Validate(instance []byte) error {
	x, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		return fmt.Errorf("not one JSON value: %w", err)
	}
	return v.s.Validate(x)
}

// Logits gives the logits of the next token: dst has one entry per id;
// only the ids the mask allows are read. A model's forward pass is one.
type Logits func(step int, allowed []int32, dst []float32)

// RandomLogits draws each logit from a standard normal distribution, as a
// model with random weights would give roughly; bias adds to the logits
// of some ids (to end a free channel, say).
func RandomLogits(rng *rand.Rand, bias map[int]float32) Logits {
	return func(step int, allowed []int32, dst []float32) {
		for _, id := range allowed {
			dst[id] = float32(rng.NormFloat64()) + bias[int(id)]
		}
	}
}

// Drawn is a sampler's choice among the allowed ids.
type Drawn func(rng *rand.Rand, step int, mask []uint64) int

// Uniform samples as temperature-1 sampling from logits drawn afresh and
// independently for every id and step does: by symmetry every allowed id
// is then equally likely, so it draws one uniformly, without materializing
// 163,840 logits per step. bias multiplies the odds of some ids by
// exp(bias).
func Uniform(bias map[int]float64) Drawn {
	return func(rng *rand.Rand, step int, mask []uint64) int {
		n := 0
		for _, x := range mask {
			n += bits.OnesCount64(x)
		}
		var extra float64 // odds beyond 1 of the allowed biased ids
		for id, b := range bias {
			if mask[id/64]>>(id%64)&1 != 0 {
				extra += math.Exp(b) - 1
			}
		}
		r := rng.Float64() * (float64(n) + extra)
		for id, b := range bias {
			if mask[id/64]>>(id%64)&1 == 0 {
				continue
			}
			if w := math.Exp(b); r < w {
				return id
			} else {
				r -= w
			}
		}
		// r now falls among the unbiased ids (each of weight 1), which
		// the biased ones are removed from.
		k := int(r)
		for w, x := range mask {
			for x != 0 {
				b := x & -x
				id := w*64 + bits.TrailingZeros64(b)
				x ^= b
				if _, ok := bias[id]; ok {
					continue
				}
				if k == 0 {
					return id
				}
				k--
			}
		}
		return -1
	}
}

// FromLogits samples at the given temperature from logits restricted to
// the mask.
func FromLogits(logits Logits, words int, temperature float64) Drawn {
	scores := make([]float32, words*64)
	var allowed []int32
	return func(rng *rand.Rand, step int, mask []uint64) int {
		allowed = Allowed(allowed[:0], mask)
		logits(step, allowed, scores)
		return Sample(rng, allowed, scores, temperature)
	}
}

// Sample draws an id among allowed from softmax(logits / temperature)
// restricted to them (temperature 0: the largest logit).
func Sample(rng *rand.Rand, allowed []int32, logits []float32, temperature float64) int {
	best, bestKey := -1, math.Inf(-1)
	for _, id := range allowed {
		key := float64(logits[id])
		if temperature > 0 {
			// Gumbel-max: argmax of logit/T + Gumbel noise samples the
			// softmax exactly.
			key = key/temperature - math.Log(-math.Log(rng.Float64()+1e-300))
		}
		if key > bestKey {
			best, bestKey = int(id), key
		}
	}
	return best
}

// Allowed appends to dst the ids set in mask.
func Allowed(dst []int32, mask []uint64) []int32 {
	for w, x := range mask {
		for x != 0 {
			b := x & -x
			dst = append(dst, int32(w*64+bitIndex(b)))
			x ^= b
		}
	}
	return dst
}

func bitIndex(b uint64) int { return bits.TrailingZeros64(b) }

// Run is one constrained generation.
type Run struct {
	IDs []int
	// Finished is true when the matcher was done (or, with stop ids, a
	// stop id was drawn where the constraint could end).
	Finished bool
}

// Generate draws up to maxTokens ids through m, each among the ids its
// mask allows. stop lists ids the sampler may draw whenever the
// constraint can end (a model's end-of-sequence tokens); the run finishes
// when one is drawn or when the matcher is done. A mask with no allowed
// id where the constraint cannot end fails the test: that would be a dead
// end.
func Generate(tb testing.TB, m grammar.Matcher, words int, draw Drawn, rng *rand.Rand, maxTokens int, stop []int) Run {
	tb.Helper()
	mask := make([]uint64, words)
	var run Run
	for step := 0; step < maxTokens; step++ {
		if m.Done() {
			run.Finished = true
			return run
		}
		if err := m.FillMask(mask); err != nil {
			tb.Fatalf("FillMask after %d tokens: %v", step, err)
		}
		if m.CanEnd() {
			for _, id := range stop {
				mask[id/64] |= 1 << (id % 64)
			}
		}
		empty := true
		for _, x := range mask {
			if x != 0 {
				empty = false
				break
			}
		}
		if empty {
			tb.Fatalf("dead end after %d tokens %v: nothing allowed and the constraint cannot end", step, run.IDs)
		}
		id := draw(rng, step, mask)
		run.IDs = append(run.IDs, id)
		if contains(stop, id) && m.CanEnd() {
			run.Finished = true
			return run
		}
		if err := m.Accept(id); err != nil {
			tb.Fatalf("Accept(%d) of a token the mask allowed: %v", id, err)
		}
	}
	run.Finished = m.Done()
	return run
}

func contains(ids []int, id int) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
