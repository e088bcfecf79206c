package model_test

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/testkit/oracle"
	"github.com/k3go/k3/model"
)

// TestCountRounds runs passes of both oracles through a cluster of two
// ranks in one process and compares every round they made (its inputs,
// products and output rows) with model.CountRounds for the same rows,
// tile, logits and expert union: decoding batches of one, several and
// more than a tile of sequences, a prompt with its last logits or all of
// them. So the projection of k3 plan --ranks follows any change of the
// pass's round structure. A pass whose rows × top-k exceed an expert
// chunk (counted from the mean union) is checked against its bounds.
func TestCountRounds(t *testing.T) {
	for _, name := range oracle.Names {
		t.Run(name, func(t *testing.T) {
			m, cl := loadCluster(t, name, 2, 1)
			c := m.Cfg
			moe := 0
			for l := 0; l < c.Layers; l++ {
				if !c.IsDense(l) {
					moe++
				}
			}
			rng := rand.New(rand.NewPCG(5, 5))
			for _, tc := range []struct {
				what          string
				seqs, tokens  int
				all, noLogits bool
				tile          int
				oneChunk      bool
				logitRows     int
			}{
				{"decode 1", 1, 1, false, false, 0, true, 1},
				{"decode 3", 3, 1, false, false, 0, true, 3},
				{"decode 40 in tiles of 32", 40, 1, false, false, 0, true, 40},
				{"decode 7 in tiles of 3", 7, 1, false, false, 3, true, 7},
				{"prompt of 40, last logits", 1, 40, false, false, 0, true, 1},
				{"prompt of 40, all logits", 1, 40, true, false, 0, true, 40},
				{"prompt of 37 without logits", 1, 37, false, true, 0, true, 0},
				{"decode 200: several expert chunks", 200, 1, false, false, 0, false, 200},
			} {
				rows := tc.seqs * tc.tokens
				sc := model.NewScratch(c, rows, tc.tile)
				gs := make([]model.Group, tc.seqs)
				for i := range gs {
					toks := make([]int, tc.tokens)
					for j := range toks {
						toks[j] = rng.IntN(c.Vocab)
					}
					n := c.Vocab
					if tc.all {
						n *= tc.tokens
					}
					gs[i] = model.Group{St: model.NewState(c, tc.tokens+1), Tokens: toks, All: tc.all}
					if !tc.noLogits {
						gs[i].Out = make([]float32, n)
					}
				}
				cl.seen, cl.expert, cl.distinct = model.PassRounds{}, 0, 0
				before := m.Stats()
				if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
					t.Fatalf("%s: %v", tc.what, err)
				}
				after := m.Stats()
				union := float64(after.ExpertUnion-before.ExpertUnion) / float64(after.MoELayerPasses-before.MoELayerPasses)
				want := model.CountRounds(c, rows, tc.seqs, sc.Tile(), tc.logitRows, union)
				got := cl.seen
				if !maps.Equal(got.Out, want.Out) {
					t.Fatalf("%s: the rounds made products of rows %v; CountRounds says %v", tc.what, got.Out, want.Out)
				}
				if got.HeadRows != want.HeadRows || got.Seqs != want.Seqs || want.HeadRows == 0 {
					t.Fatalf("%s: the KDA rounds made %d rows of heads for %d sequence entries; CountRounds says %d and %d",
						tc.what, got.HeadRows, got.Seqs, want.HeadRows, want.Seqs)
				}
				if tc.oneChunk && got.InputFloats != want.InputFloats {
					t.Fatalf("%s: the rounds carried %d input floats; CountRounds says %d", tc.what, got.InputFloats, want.InputFloats)
				}
				// The experts' up rounds send each chunk's distinct rows:
				// every row once at least, every pair's row at most. The
				// rest is exact; so CountRounds' estimate of those rows
				// must lie in the same bounds.
				lo, hi := int64(moe*rows*c.LatentDim), int64(moe*rows*c.TopK*c.LatentDim)
				estRows := want.InputFloats - (got.InputFloats - cl.distinct)
				if cl.distinct < lo || cl.distinct > hi || estRows < lo || estRows > hi {
					t.Fatalf("%s: the experts' up rounds sent %d floats of rows, CountRounds estimates %d; want both in [%d, %d]",
						tc.what, cl.distinct, estRows, lo, hi)
				}
				if tc.oneChunk {
					if got.Rounds != want.Rounds || math.Abs(got.Inputs-want.Inputs) > 1e-6 || math.Abs(got.Products-want.Products) > 1e-6 {
						t.Fatalf("%s: %d rounds, %v inputs, %v products; CountRounds says %d, %v, %v",
							tc.what, got.Rounds, got.Inputs, got.Products, want.Rounds, want.Inputs, want.Products)
					}
					if cl.expert != 2*moe {
						t.Fatalf("%s: %d expert rounds over %d MoE layers, want one chunk each", tc.what, cl.expert, moe)
					}
					continue
				}
				// Several chunks: the layers' own routing decides how
				// whole experts pack; at least the chunks the pairs fill,
				// at most one more per layer than the estimate.
				trunk := got.Rounds - cl.expert
				est := want.Rounds - trunk
				if est < 2*moe*2 || cl.expert < est-2*moe || cl.expert > est+2*moe {
					t.Fatalf("%s: %d expert rounds; CountRounds estimates %d (%d MoE layers)", tc.what, cl.expert, est, moe)
				}
				t.Logf("%s: %d expert rounds, estimated %d", tc.what, cl.expert, est)
			}
		})
	}
}
