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
	sc := NewScratch(ref.Cfg, 64)
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
