package model

import (
	"math"

	"github.com/k3go/k3/tensor"
)

// mla runs gated Multi-head Latent Attention over the pass's rows (§6.6),
// each sequence's rows against its own cache at its own positions. The
// cache holds, per position, the RMS-normalised latent (Ckv floats) and the
// raw rope key (r floats, shared by all heads, never rotated). Attention
// works in the latent space: the query's nope part is absorbed through the
// key half of kv_b (q' = W_kᵀ q_nope, so q'·latent = q_nope·k_nope), and the
// value half of kv_b is applied once to the probability-weighted latent sum.
// This is the same mathematics as expanding every cached position, 43×
// smaller in memory, and identical in every decoding mode.
func (p *pass) mla(l int, mats *LayerMats, vec *LayerVecs) error {
	m, c, sc, T := p.m, p.c, p.sc, p.T
	E, Cq, Ckv, r := c.Hidden, c.QLoraRank, c.KVLoraRank, c.QKRopeDim
	H, dh, vh := c.MLAHeads, c.MLAHeadDim(), c.VHeadDim
	xn := sc.xn[:T*E]
	qa := sc.qa[:T*Cq]
	ckv := sc.ckv[:T*(Ckv+r)]
	// Every product of the layer's input at once (one round in a cluster):
	// the query and key-value down-projections and the output gate.
	rd := p.round(l, RoundAttn)
	p.prod(rd, &mats.QAProj, MatQAProj, qa, xn, T)
	p.prod(rd, &mats.KVAProj, MatKVAProj, ckv, xn, T)
	if c.MLAOutputGate {
		p.prod(rd, &mats.MLAGProj, MatMLAGProj, sc.mg[:T*H*vh], xn, T)
	}
	if err := p.finish(rd, mats); err != nil {
		return err
	}
	for t := 0; t < T; t++ {
		rmsNorm(qa[t*Cq:(t+1)*Cq], qa[t*Cq:(t+1)*Cq], vec.QANorm, c.RMSNormEps)
	}
	rd = p.round(l, RoundAttn)
	p.prod(rd, &mats.QBProj, MatQBProj, sc.qm[:T*H*dh], qa, T)
	if err := p.finish(rd, mats); err != nil {
		return err
	}

	longest := 0
	for _, sg := range p.segs {
		st := &sg.st.mla[l]
		for t := sg.lo; t < sg.lo+sg.n; t++ {
			row := ckv[t*(Ckv+r) : (t+1)*(Ckv+r)]
			rmsNorm(row[:Ckv], row[:Ckv], vec.KVANorm, c.RMSNormEps)
			st.lat = append(st.lat, row[:Ckv]...)
			st.kr = append(st.kr, row[Ckv:]...)
		}
		longest = max(longest, sg.p0+sg.n)
	}
	for h := range sc.heads {
		if cap(sc.heads[h].p) < longest {
			sc.heads[h].p = make([]float32, longest, max(longest, 2*cap(sc.heads[h].p)))
		}
	}
	j := &sc.mlaJob
	*j = mlaJob{p: p, mats: mats, l: l}
	m.pool.Run(H, headGroup, j)
	*j = mlaJob{}

	o := sc.mo[:T*H*vh]
	if c.MLAOutputGate {
		g := sc.mg[:T*H*vh]
		for i := range o {
			o[i] *= sigmoid(g[i])
		}
	}
	rd = p.round(l, RoundAttn)
	p.prod(rd, &mats.MLAOProj, MatMLAOProj, sc.attn[:T*E], o, T)
	return p.finish(rd, mats)
}

// mlaJob computes attention for the heads of each index range over every
// row of the pass, each sequence against its own cache, headGroup heads
// at a time (mla_attend.go).
type mlaJob struct {
	p    *pass
	mats *LayerMats
	l    int
}

func (j *mlaJob) Range(lo, hi int) {
	c, sc := j.p.c, j.p.sc
	ckv, r, n, vh := c.KVLoraRank, c.QKRopeDim, c.QKNopeDim, c.VHeadDim
	H, dh := c.MLAHeads, c.MLAHeadDim()
	scale := float32(1 / math.Sqrt(float64(n+r)))
	kvb := &j.mats.KVBProj
	for g0 := lo; g0 < hi; g0 += headGroup {
		k := min(headGroup, hi-g0)
		var ps, cx [headGroup][]float32
		var qw [headGroup][]float64
		for si := range j.p.segs {
			sg := &j.p.segs[si]
			st := &sg.st.mla[j.l]
			for t := sg.lo; t < sg.lo+sg.n; t++ {
				npos := sg.p0 + (t - sg.lo) + 1
				for x := range k {
					h := g0 + x
					hs := &sc.heads[h]
					q := sc.qm[(t*H+h)*dh : (t*H+h+1)*dh]
					absorb(hs.qabs, kvb.RowsView(h*(n+vh), h*(n+vh)+n), q[:n])
					widen(hs.qw, hs.qabs, q[n:])
					ps[x], qw[x], cx[x] = hs.p[:npos], hs.qw, hs.ctx
				}
				latentScores(ps[:k], qw[:k], st.lat, st.kr, ckv, r, npos, scale)
				for x := range k {
					softmaxInPlace(ps[x])
				}
				latentContext(cx[:k], ps[:k], st.lat, ckv, npos)
				for x := range k {
					h := g0 + x
					tensor.MatVec(nil, sc.mo[(t*H+h)*vh:(t*H+h+1)*vh], kvb.RowsView(h*(n+vh)+n, (h+1)*(n+vh)), cx[x])
				}
			}
		}
	}
}

// absorb computes dst[c] = Σ_i q[i]·W[i][c] (i ascending) for a dense W of
// len(q) rows: the query's nope part carried into the latent space.
func absorb(dst []float32, w tensor.Mat, q []float32) {
	clear(dst)
	rb := w.RowBytes()
	for i, qi := range q {
		b := w.Data[i*rb : (i+1)*rb]
		switch w.DType {
		case tensor.BF16:
			for c := range dst {
				wv := math.Float32frombits(uint32(b[2*c])<<16 | uint32(b[2*c+1])<<24)
				dst[c] += float32(qi * wv)
			}
		case tensor.F32:
			for c := range dst {
				wv := math.Float32frombits(uint32(b[4*c]) | uint32(b[4*c+1])<<8 | uint32(b[4*c+2])<<16 | uint32(b[4*c+3])<<24)
				dst[c] += float32(qi * wv)
			}
		}
	}
}
