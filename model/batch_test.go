package model

import (
	"context"
	"math"
	"testing"
)

// TestForwardBatchLastLogits checks the last-row mode with several
// sequences (the lm_head product over vocabulary blocks) and a group
// without logits.
func TestForwardBatchLastLogits(t *testing.T) {
	ref, exp := loadOracle(t, "tiny-mxfp4")
	V := ref.Cfg.Vocab
	ids := exp.FullIDs
	want := teacherLogits(t, ref, ids)
	sc := NewScratch(ref.Cfg, 64, 0)
	a, b, c := NewState(ref.Cfg, 64), NewState(ref.Cfg, 64), NewState(ref.Cfg, 64)
	outA, outB := make([]float32, V), make([]float32, V)
	gs := []Group{
		{St: a, Tokens: ids[:5], Out: outA},
		{St: b, Tokens: ids[:9], Out: outB},
		{St: c, Tokens: ids[:3]},
	}
	if err := ref.ForwardBatch(context.Background(), sc, gs); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < V; j++ {
		if math.Float32bits(outA[j]) != math.Float32bits(want[4*V+j]) || math.Float32bits(outB[j]) != math.Float32bits(want[8*V+j]) {
			t.Fatalf("logit %d: %v %v, alone %v %v", j, outA[j], outB[j], want[4*V+j], want[8*V+j])
		}
	}
	if a.Len() != 5 || b.Len() != 9 || c.Len() != 3 {
		t.Fatalf("positions %d %d %d, want 5 9 3", a.Len(), b.Len(), c.Len())
	}
	// Bad groups are refused before anything runs.
	for _, bad := range [][]Group{
		nil,
		{{St: a, Tokens: nil, Out: outA}},
		{{St: a, Tokens: []int{V}, Out: outA}},
		{{St: a, Tokens: ids[:1], Out: outA[:V-1]}},
		{{St: a, Tokens: ids[:1], Out: outA}, {St: a, Tokens: ids[:1]}},
		{{St: b, Tokens: ids[:1]}, {St: a, Tokens: make([]int, 64)}},
	} {
		if err := ref.ForwardBatch(context.Background(), sc, bad); err == nil {
			t.Fatalf("groups %v accepted", bad)
		}
		if a.Len() != 5 || b.Len() != 9 {
			t.Fatalf("a refused batch moved a state: %d %d", a.Len(), b.Len())
		}
	}
}

// countingLayers counts the acquisitions of every layer part.
type countingLayers struct {
	LayerSource
	n map[[2]int]int
}

func (c *countingLayers) Acquire(ctx context.Context, l int, part Part) (*LayerMats, error) {
	c.n[[2]int{l, int(part)}]++
	return c.LayerSource.Acquire(ctx, l, part)
}

// TestWidePassReadsEachPartOnce runs a pass of 60 rows in tiles of 7: every
// layer part is acquired once, not once per tile, and the logits of every
// row are those of the sequence run alone.
func TestWidePassReadsEachPartOnce(t *testing.T) {
	ref, exp := loadOracle(t, "tiny-mxfp4")
	ids := make([]int, 60)
	for i := range ids {
		ids[i] = exp.FullIDs[i%len(exp.FullIDs)]
	}
	want := teacherLogits(t, ref, ids)
	cl := &countingLayers{LayerSource: ref.layers, n: map[[2]int]int{}}
	m := &Model{Cfg: ref.Cfg, Plan: ref.Plan, layers: cl, experts: ref.experts, embed: ref.embed, lmHead: ref.lmHead, pool: ref.pool, chunk: ref.chunk}
	V := m.Cfg.Vocab
	out := make([]float32, len(ids)*V)
	if err := m.ForwardBatch(context.Background(), NewScratch(m.Cfg, 60, 7), []Group{{St: NewState(m.Cfg, 64), Tokens: ids, All: true, Out: out}}); err != nil {
		t.Fatal(err)
	}
	if len(cl.n) != 2*m.Cfg.Layers {
		t.Fatalf("%d parts acquired, want %d", len(cl.n), 2*m.Cfg.Layers)
	}
	for k, n := range cl.n {
		if n != 1 {
			t.Fatalf("layer %d part %d acquired %d times in one pass", k[0], k[1], n)
		}
	}
	for i := range want {
		if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d of the wide pass = %v, want %v", i, out[i], want[i])
		}
	}
}
