package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRollbackExact runs speculative passes of random width over a random
// sequence, keeps a random prefix of each, and checks that the logits of
// every position, and of what follows, are bit-identical to running the
// kept tokens alone: at the smallest budget and resident, 1 and 3 threads,
// in a pass shared with another sequence.
func TestRollbackExact(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			ref, _ := loadOracle(t, name)
			V := ref.Cfg.Vocab
			rng := rand.New(rand.NewPCG(11, uint64(len(name))))
			seq := make([]int, 40)
			for i := range seq {
				seq[i] = rng.IntN(V)
			}
			want := teacherLogits(t, ref, seq)
			lo := smallestBudget(t, ref.Plan)
			for _, b := range []int64{lo, 0} {
				for _, threads := range []int{1, 3} {
					m, _, err := loadPlanned(t, name, b, threads, nil)
					if err != nil {
						t.Fatal(err)
					}
					sc := NewScratch(m.Cfg, 16)
					st, other := NewState(m.Cfg, 64), NewState(m.Cfg, 64)
					otherSeq := seq[5:]
					out := make([]float32, 10*V)
					oout := make([]float32, V)
					for done, od := 0, 0; done < len(seq); {
						n := min(1+rng.IntN(6), len(seq)-done)
						// The drafted rows: the true next tokens, then garbage
						// after the first kept rows.
						keep := 1 + rng.IntN(n)
						rows := append([]int(nil), seq[done:done+keep]...)
						for len(rows) < n {
							rows = append(rows, rng.IntN(V))
						}
						st.BeginSpeculation(n)
						gs := []Group{{St: st, Tokens: rows, All: true, Out: out[:n*V]}}
						if od < len(otherSeq) {
							gs = append(gs, Group{St: other, Tokens: otherSeq[od : od+1], Out: oout})
							od++
						}
						if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
							t.Fatal(err)
						}
						if err := m.Rollback(st, keep); err != nil {
							t.Fatal(err)
						}
						for j := 0; j < keep*V; j++ {
							if math.Float32bits(out[j]) != math.Float32bits(want[done*V+j]) {
								t.Fatalf("budget %d threads %d: position %d logit %d: %v, plain %v", b, threads, done+j/V, j%V, out[j], want[done*V+j])
							}
						}
						if st.Len() != done+keep {
							t.Fatalf("position %d after keeping %d of %d, want %d", st.Len(), keep, n, done+keep)
						}
						done += keep
					}
				}
			}
		})
	}
}
