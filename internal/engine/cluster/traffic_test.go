package cluster

import (
	"context"
	"testing"

	"github.com/k3go/k3/model"
)

// TestTraffic runs passes of an oracle through 2 and 3 ranks over the
// wire encoding and compares the Client's counted rounds and bytes with
// Traffic of model.CountRounds for the same pass: a decoding batch of
// five sequences and a prompt of 40 tokens (two tiles) with its last
// logits. k3 plan --ranks projects a cluster's network with them.
func TestTraffic(t *testing.T) {
	const name = "tiny-mxfp4"
	for _, ranks := range []int{2, 3} {
		m, c := cluster(t, name, ranks, nil)
		cfg := m.Cfg
		if s, r := Traffic(1, model.CountRounds(cfg, 1, 1, 0, 1, 2)); s != 0 || r != 0 {
			t.Fatalf("one rank sends %d and receives %d bytes", s, r)
		}
		for _, tc := range []struct {
			what         string
			seqs, tokens int
		}{{"decode 5", 5, 1}, {"prompt of 40", 1, 40}} {
			rows := tc.seqs * tc.tokens
			sc := model.NewScratch(cfg, rows, 0)
			gs := make([]model.Group, tc.seqs)
			for i := range gs {
				toks := make([]int, tc.tokens)
				for j := range toks {
					toks[j] = (7*i + 3*j + 1) % cfg.Vocab
				}
				gs[i] = model.Group{St: model.NewState(cfg, tc.tokens+1), Tokens: toks, Out: make([]float32, cfg.Vocab)}
			}
			st0, ms0 := c.Stats(), m.Stats()
			if err := m.ForwardBatch(context.Background(), sc, gs); err != nil {
				t.Fatal(err)
			}
			st, ms := c.Stats(), m.Stats()
			union := float64(ms.ExpertUnion-ms0.ExpertUnion) / float64(ms.MoELayerPasses-ms0.MoELayerPasses)
			r := model.CountRounds(cfg, rows, tc.seqs, sc.Tile(), tc.seqs, union)
			sent, received := Traffic(ranks, r)
			got := [3]int64{st.Rounds - st0.Rounds, st.BytesSent - st0.BytesSent, st.BytesReceived - st0.BytesReceived}
			if want := [3]int64{int64(r.Rounds), sent, received}; got != want {
				t.Fatalf("%d ranks, %s: rounds, bytes sent and received %v; Traffic of CountRounds says %v", ranks, tc.what, got, want)
			}
		}
	}
}
