package model_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/oracle"
	"github.com/k3go/k3/model"
)

// TestForwardBatchMatchesSolo runs random sequences in random batch
// compositions and checks every logit bit for bit against the sequence
// run alone, at 1 and 3 threads, with scratch smaller than a pass (groups
// split across sub-passes) and larger. The trunk's tests run the same
// check with weights streamed at the smallest budget.
func TestForwardBatchMatchesSolo(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			ref, _ := oracle.Load(t, name, model.Options{})
			V := ref.Cfg.Vocab
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			seqs := make([][]int, 6)
			want := make([][]float32, len(seqs))
			for i := range seqs {
				seqs[i] = make([]int, 5+rng.IntN(30))
				for j := range seqs[i] {
					seqs[i][j] = rng.IntN(V)
				}
				want[i] = oracle.Teacher(t, ref, seqs[i])
			}
			for _, threads := range []int{1, 3} {
				pool := par.New(threads)
				t.Cleanup(pool.Close)
				m, _ := oracle.Load(t, name, model.Options{Pool: pool})
				for _, shape := range [][2]int{{3, 0}, {64, 0}, {64, 5}, {7, 2}} {
					oracle.CheckRandomBatches(t, m, rng, seqs, want, shape[0], shape[1])
				}
			}
		})
	}
}

// TestRollbackExact runs speculative passes of random width, keeps a
// random prefix of each, and checks that the kept positions' logits are
// those of plain decoding, at 1 and 3 threads, in a pass shared with
// another sequence.
func TestRollbackExact(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			ref, _ := oracle.Load(t, name, model.Options{})
			V := ref.Cfg.Vocab
			rng := rand.New(rand.NewPCG(11, uint64(len(name))))
			seq := make([]int, 40)
			for i := range seq {
				seq[i] = rng.IntN(V)
			}
			want := oracle.Teacher(t, ref, seq)
			for _, threads := range []int{1, 3} {
				pool := par.New(threads)
				t.Cleanup(pool.Close)
				m, _ := oracle.Load(t, name, model.Options{Pool: pool})
				oracle.CheckRollback(t, m, rng, seq, want)
			}
		})
	}
}
