package model

import (
	"context"
	"math"
	"testing"
)

// TestSpecBufferLent runs speculative passes of two states through one
// lent SpecBuffer in turn, keeping a different number of rows each time,
// and checks that every state's next logits are bit for bit those of
// feeding the kept tokens alone, and that the buffer is let go.
func TestSpecBufferLent(t *testing.T) {
	m, exp := loadOracle(t, "tiny-mxfp4")
	V := m.Cfg.Vocab
	ids := exp.FullIDs
	want := teacherLogits(t, m, ids)
	sc := NewScratch(m.Cfg, 64, 0)
	ctx := context.Background()
	var buf SpecBuffer
	a, b := NewState(m.Cfg, 64), NewState(m.Cfg, 64)
	pos := map[*State]int{a: 0, b: 0}
	out := make([]float32, 8*V)
	for step, keep := range []int{1, 3, 2, 3, 1, 2} {
		st := a
		if step%2 == 1 {
			st = b
		}
		p := pos[st]
		// Four rows: three right tokens and a wrong one.
		toks := []int{ids[p], ids[p+1], ids[p+2], (ids[p+3] + 1) % V}
		st.BeginSpeculationIn(&buf, len(toks))
		if err := m.ForwardBatch(ctx, sc, []Group{{St: st, Tokens: toks, All: true, Out: out[:len(toks)*V]}}); err != nil {
			t.Fatal(err)
		}
		for r := 0; r < keep; r++ {
			for j := 0; j < V; j++ {
				if math.Float32bits(out[r*V+j]) != math.Float32bits(want[(p+r)*V+j]) {
					t.Fatalf("step %d row %d logit %d differs", step, r, j)
				}
			}
		}
		if err := m.Rollback(st, keep); err != nil {
			t.Fatal(err)
		}
		if st.spec != nil || st.lent {
			t.Fatalf("step %d: the state kept the lent buffer", step)
		}
		pos[st] = p + keep
		if st.Len() != pos[st] {
			t.Fatalf("step %d: %d positions, want %d", step, st.Len(), pos[st])
		}
	}
	// The states go on as if only the kept tokens had been fed.
	for _, st := range []*State{a, b} {
		p := pos[st]
		if err := m.ForwardBatch(ctx, sc, []Group{{St: st, Tokens: ids[p : p+1], Out: out[:V]}}); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < V; j++ {
			if math.Float32bits(out[j]) != math.Float32bits(want[p*V+j]) {
				t.Fatalf("after rollbacks, position %d logit %d differs", p, j)
			}
		}
	}
	// EndSpeculation lets the buffer go too.
	a.BeginSpeculationIn(&buf, 2)
	a.EndSpeculation()
	if a.spec != nil {
		t.Fatal("EndSpeculation kept the lent buffer")
	}
}
