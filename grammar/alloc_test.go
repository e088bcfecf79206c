package grammar_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// TestMaskAllocs: once a matcher's buffers have grown, FillMask, Allowed,
// CanEnd, Done, Accept and Rollback allocate nothing per token.
func TestMaskAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	v := randomVocab(t, rng, 1500)
	g, err := grammar.CompileJSONSchema([]byte(boundedSchemas[0].schema), boundedSchemas[0].opts)
	if err != nil {
		t.Fatal(err)
	}
	c := bind(t, g, v)
	mask := make([]uint64, v.MaskWords())
	var ids []int
	m := c.NewMatcher()
	for step := 0; step < 60 && !m.Done(); step++ {
		if err := m.FillMask(mask); err != nil {
			t.Fatal(err)
		}
		id := grammartest.Uniform(nil)(rng, step, mask)
		if err := m.Accept(id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Replay the same tokens: every buffer has its size by now.
	if err := m.Rollback(len(ids)); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(5, func() {
		for _, id := range ids {
			if err := m.FillMask(mask); err != nil {
				t.Fatal(err)
			}
			m.Allowed(id)
			m.CanEnd()
			m.Done()
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Rollback(len(ids)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per replay of %d tokens", allocs, len(ids))
	}
}
