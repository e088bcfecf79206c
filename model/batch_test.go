package model

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestForwardBatchMatchesSolo runs random sequences in random batch
// compositions (different lengths, some prefilling while others decode,
// sequences joining and leaving between passes, scratch smaller than the
// pass so groups split across sub-passes) and checks every logit bit for
// bit against the sequence run alone, at the smallest budget and with
// everything resident, at 1 and 3 threads.
func TestForwardBatchMatchesSolo(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			ref, _ := loadOracle(t, name)
			V := ref.Cfg.Vocab
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			const nseq = 6
			seqs := make([][]int, nseq)
			want := make([][]float32, nseq)
			for i := range seqs {
				seqs[i] = make([]int, 5+rng.IntN(30))
				for j := range seqs[i] {
					seqs[i][j] = rng.IntN(V)
				}
				want[i] = teacherLogits(t, ref, seqs[i])
			}
			lo := smallestBudget(t, ref.Plan)
			for _, b := range []int64{lo, 0} {
				for _, threads := range []int{1, 3} {
					m, _, err := loadPlanned(t, name, b, threads, nil)
					if err != nil {
						t.Fatal(err)
					}
					for _, rows := range []int{3, 64} {
						checkRandomBatches(t, m, rng, seqs, want, rows)
					}
				}
			}
		})
	}
}

func checkRandomBatches(t *testing.T, m *Model, rng *rand.Rand, seqs [][]int, want [][]float32, rows int) {
	t.Helper()
	V := m.Cfg.Vocab
	sc := NewScratch(m.Cfg, rows)
	states := make([]*State, len(seqs))
	got := make([][]float32, len(seqs))
	for i := range seqs {
		states[i] = NewState(m.Cfg, 64)
		got[i] = make([]float32, len(seqs[i])*V)
	}
	done := make([]int, len(seqs))
	for passes := 0; ; passes++ {
		var gs []Group
		for i := range seqs {
			left := len(seqs[i]) - done[i]
			if left == 0 || rng.IntN(3) == 0 { // finished, or sits this pass out
				continue
			}
			n := 1
			if rng.IntN(2) == 0 {
				n = 1 + rng.IntN(min(left, 9))
			}
			n = min(n, left)
			gs = append(gs, Group{St: states[i], Tokens: seqs[i][done[i] : done[i]+n], All: true, Out: got[i][done[i]*V : (done[i]+n)*V]})
			done[i] += n
		}
		if len(gs) == 0 {
			finished := true
			for i := range seqs {
				finished = finished && done[i] == len(seqs[i])
			}
			if finished {
				break
			}
			continue
		}
		// Shuffle the group order: a pass's composition must not matter.
		rng.Shuffle(len(gs), func(a, b int) { gs[a], gs[b] = gs[b], gs[a] })
		if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
			t.Fatal(err)
		}
	}
	for i := range seqs {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("rows %d: sequence %d position %d logit %d: batched %v, alone %v", rows, i, j/V, j%V, got[i][j], want[i][j])
			}
		}
	}
}

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
