package model

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/par"
)

// BenchmarkSpeculationState measures, at the released model's widths (69
// KDA layers of 96 heads × 128 × 128: 0.43 GB of KDA state), what a
// speculative step costs on top of its pass: the copy of the KDA state
// before the pass (BeginSpeculation), and a rollback that keeps keep rows
// (the copy back plus the replay of their recurrence). Per-row snapshots,
// the alternative, would copy the state once per row of the pass.
//
//	go test ./model -run '^$' -bench SpeculationState -benchtime 3x
func BenchmarkSpeculationState(b *testing.B) {
	c := realWant
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	fixed, _ := StateBytes(&c)
	vecs := make([]LayerVecs, c.Layers)
	rng := rand.New(rand.NewPCG(1, 1))
	small := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.02)
		}
		return v
	}
	P, D, Hk := c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	for l := range vecs {
		if !c.IsMLA(l) {
			vecs[l] = LayerVecs{QConv: small(P * c.ConvKernel), KConv: small(P * c.ConvKernel), VConv: small(P * c.ConvKernel),
				DTBias: small(P), ALog: small(Hk)}
		}
	}
	pool := par.New(0)
	defer pool.Close()
	m := &Model{Cfg: &c, Plan: &Plan{Cfg: &c, vecs: vecs}, pool: pool}
	st := NewState(&c, 64)
	for l := range st.kda {
		if !c.IsMLA(l) {
			copy(st.kda[l].S, small(Hk*D*D))
		}
	}
	const rows = 5 // the pending token and 4 drafts
	fill := func() {
		st.BeginSpeculation(rows)
		for l := range st.spec.rec {
			for i := range st.spec.rec[l] {
				st.spec.rec[l][i] = float32(rng.NormFloat64())
			}
		}
		if err := st.reserve(rows); err != nil {
			b.Fatal(err)
		}
		for l := range st.mla {
			if c.IsMLA(l) {
				ml := &st.mla[l]
				ml.lat, ml.kr = ml.lat[:rows*c.KVLoraRank], ml.kr[:rows*c.QKRopeDim]
			}
		}
		st.pos += rows
	}
	b.Run("copy", func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			t0 := time.Now()
			st.BeginSpeculation(rows)
			d += time.Since(t0)
			st.EndSpeculation()
		}
		b.ReportMetric(float64(fixed)/1e9, "GB-state")
		b.ReportMetric(d.Seconds()/float64(b.N)*1e3, "ms/copy")
	})
	for _, keep := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("rollback-keep%d", keep), func(b *testing.B) {
			var d time.Duration
			for b.Loop() {
				fill()
				t0 := time.Now()
				if err := m.Rollback(st, keep); err != nil {
					b.Fatal(err)
				}
				d += time.Since(t0)
				st.pos = 0
			}
			b.ReportMetric(d.Seconds()/float64(b.N)*1e3, "ms/rollback")
		})
	}
}
