package model

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// TestNonFiniteRowsIsolated runs one pass over two sequences, one of them
// with a NaN in its KDA state: only that sequence fails (Group.Err, a
// *PartialError from ForwardBatch), in either order and whether or not the
// pass is split into sub-passes or tiles; the other gets exactly its solo
// logits.
func TestNonFiniteRowsIsolated(t *testing.T) {
	m, _ := loadOracle(t, "tiny-mxfp4")
	V := m.Cfg.Vocab
	ids := []int{7, 8, 9, 10, 11}
	ctx := context.Background()
	want := make([]float32, V)
	if err := m.ForwardBatch(ctx, NewScratch(m.Cfg, 64, 0), []Group{{St: NewState(m.Cfg, 64), Tokens: ids, Out: want}}); err != nil {
		t.Fatal(err)
	}
	for _, shape := range [][2]int{{64, 0}, {64, 3}, {4, 0}} { // one pass; tiles of 3 rows; sub-passes of 4 rows
		rows := shape[0]
		for _, badFirst := range []bool{true, false} {
			sc := NewScratch(m.Cfg, rows, shape[1])
			bad := NewState(m.Cfg, 64)
			if err := m.ForwardBatch(ctx, sc, []Group{{St: bad, Tokens: []int{1, 2}}}); err != nil {
				t.Fatal(err)
			}
			bad.kda[0].S[3] = float32(math.NaN())
			good := NewState(m.Cfg, 64)
			got := make([]float32, V)
			gs := []Group{{St: bad, Tokens: []int{3, 4}, Out: make([]float32, V)}, {St: good, Tokens: ids, Out: got}}
			bi, gi := 0, 1
			if !badFirst {
				gs[0], gs[1] = gs[1], gs[0]
				bi, gi = 1, 0
			}
			err := m.ForwardBatch(ctx, sc, gs)
			var pe *PartialError
			if !errors.As(err, &pe) || pe.Failed != 1 || !errors.Is(err, ErrNonFinite) {
				t.Fatalf("rows %d: got %v, want a *PartialError of one sequence", rows, err)
			}
			if !errors.Is(gs[bi].Err, ErrNonFinite) || !strings.Contains(gs[bi].Err.Error(), "layer 0: non-finite values: KDA attention") {
				t.Fatalf("rows %d: the NaN sequence: %v", rows, gs[bi].Err)
			}
			if gs[gi].Err != nil {
				t.Fatalf("rows %d: the clean sequence failed: %v", rows, gs[gi].Err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("rows %d, bad first %v: logit %d = %v, want %v", rows, badFirst, i, got[i], want[i])
				}
			}
		}
	}
}
