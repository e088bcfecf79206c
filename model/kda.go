package model

import (
	"math"

	"github.com/k3go/k3/tensor"
)

// kda runs Kimi Delta Attention over the pass's rows (§6.5): projections,
// short convolutions with carried state, L2-normalised q and k, per-head β,
// per-channel decay with a per-head A, the delta-rule recurrence, head-wise
// RMSNorm, the full-rank output gate and the output projection. The
// projections run over every row at once; the convolutions and the
// recurrence run each sequence's rows in order on its own state.
func (p *pass) kda(l int, mats *LayerMats, vec *LayerVecs) error {
	if p.split {
		return p.kdaSplit(l, mats)
	}
	m, c, sc, T := p.m, p.c, p.sc, p.T
	E, P, D, Hk, kc := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads, c.ConvKernel
	xn := sc.xn[:T*E]
	q, k, v, g, z := sc.q[:T*P], sc.k[:T*P], sc.v[:T*P], sc.g[:T*P], sc.z[:T*P]
	rd := p.round(l, RoundAttn)
	p.prod(rd, &mats.QProj, MatQProj, q, xn, T)
	p.prod(rd, &mats.KProj, MatKProj, k, xn, T)
	p.prod(rd, &mats.VProj, MatVProj, v, xn, T)
	p.prod(rd, &mats.GProj, MatGProj, g, xn, T)
	p.prod(rd, &mats.BProj, MatBProj, sc.bl[:T*Hk], xn, T)
	p.prod(rd, &mats.FAProj, MatFAProj, sc.fa[:T*D], xn, T)
	if err := p.finish(rd, mats); err != nil {
		return err
	}
	rd = p.round(l, RoundAttn)
	p.prod(rd, &mats.FBProj, MatFBProj, z, sc.fa[:T*D], T)
	if err := p.finish(rd, mats); err != nil {
		return err
	}

	for i := range p.segs {
		sg := &p.segs[i]
		if sp := sg.st.spec; sp != nil && sp.active {
			if !sp.ran {
				sp.begin(c, 0, Hk)
			}
			r0 := sg.lo
			sp.take(c, l, sg.p0-sp.p0, sg.n, sg.st.kda[l], q[r0*P:], k[r0*P:], v[r0*P:], z[r0*P:], sc.bl[r0*Hk:])
		}
		st := &sg.st.kda[l]
		for t := sg.lo; t < sg.lo+sg.n; t++ {
			qt, kt, vt := q[t*P:(t+1)*P], k[t*P:(t+1)*P], v[t*P:(t+1)*P]
			shortConv(qt, qt, vec.QConv, st.qh, kc)
			shortConv(kt, kt, vec.KConv, st.kh, kc)
			shortConv(vt, vt, vec.VConv, st.vh, kc)
		}
	}
	qScale := float32(1 / math.Sqrt(float64(D)))
	for t := 0; t < T; t++ {
		prepHeads(q[t*P:(t+1)*P], k[t*P:(t+1)*P], z[t*P:(t+1)*P], 0, Hk, D, qScale, vec, c.GateLowerBound)
		for h := 0; h < Hk; h++ {
			sc.beta[t*Hk+h] = sigmoid(sc.bl[t*Hk+h])
		}
	}
	j := &sc.kdaJob
	*j = kdaJob{p: p, l: l}
	m.pool.Run(len(p.segs)*Hk, 1, j)
	*j = kdaJob{}

	o := sc.o[:T*P]
	normGate(o, g, T, Hk, D, vec.ONorm, c.RMSNormEps)
	rd = p.round(l, RoundAttn)
	p.prod(rd, &mats.OProj, MatOProj, sc.attn[:T*E], o, T)
	return p.finish(rd, mats)
}

// normGate finishes T rows of nh heads' outputs o (D channels a head, rows
// nh·D wide): each head's RMSNorm, then the full-rank output gate g. One
// process and every rank of a cluster (kdaHeads) run it.
func normGate(o, g []float32, T, nh, D int, norm []float32, eps float32) {
	W := nh * D
	for t := 0; t < T; t++ {
		for h := 0; h < nh; h++ {
			oh := o[t*W+h*D : t*W+(h+1)*D]
			rmsNorm(oh, oh, norm, eps)
		}
		ot, gt := o[t*W:(t+1)*W], g[t*W:(t+1)*W]
		for i := range ot {
			ot[i] *= sigmoid(gt[i])
		}
	}
}

// prepHeads readies one row of nh heads, the first being head h0, for the
// recurrence (§6.5 steps 3–5): each head's q L2-normalised and scaled by
// qScale, its k L2-normalised, its decay projection z turned into α in
// place. One process, every rank's heads and a rollback's replay run it,
// so that each head's inputs are the same bits in all of them.
func prepHeads(q, k, z []float32, h0, nh, D int, qScale float32, vec *LayerVecs, glb float32) {
	for j := 0; j < nh; j++ {
		h := h0 + j
		qh := q[j*D : (j+1)*D]
		l2Norm(qh)
		for i := range qh {
			qh[i] *= qScale
		}
		l2Norm(k[j*D : (j+1)*D])
		zh := z[j*D : (j+1)*D]
		kdaDecay(zh, zh, zh, vec.DTBias[h*D:(h+1)*D], vec.ALog[h], glb) // z becomes α
	}
}

// kdaDecay computes one head's decay (§6.5 step 5): with a single
// a = exp(aLog) per head, g[i] = glb·sigmoid(a·(z[i] + dtBias[i])) and
// α[i] = exp(g[i]). g and alpha may alias z (alpha is written last).
func kdaDecay(g, alpha, z, dtBias []float32, aLog, glb float32) {
	a := float32(math.Exp(float64(aLog)))
	for i := range z {
		gi := glb * sigmoid(a*(z[i]+dtBias[i]))
		g[i] = gi
		alpha[i] = float32(math.Exp(float64(gi)))
	}
}

// kdaJob runs the delta-rule recurrence of layer l, one (sequence, head)
// per index: index i is head i mod Hk of segment i / Hk.
type kdaJob struct {
	p *pass
	l int
}

func (j *kdaJob) Range(lo, hi int) {
	c, sc := j.p.c, j.p.sc
	P, D, Hk := c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	for i := lo; i < hi; i++ {
		sg, h := &j.p.segs[i/Hk], i%Hk
		S := sg.st.kda[j.l].S[h*D*D : (h+1)*D*D]
		for t := sg.lo; t < sg.lo+sg.n; t++ {
			base := t*P + h*D
			kdaStep(S, sc.q[base:base+D], sc.k[base:base+D], sc.v[base:base+D], sc.z[base:base+D],
				sc.beta[t*Hk+h], sc.o[base:base+D])
		}
	}
}

// kdaStep advances one head's state by one token, in the documented order:
// decay, read, delta write, read-out from the updated state. The row
// updates are tensor.Axpy (each product rounded to f32, then added: the
// arithmetic of the plain loops, on the SIMD kernels). alpha is used as
// scratch once the decay is applied.
func kdaStep(S, q, k, v, alpha []float32, beta float32, o []float32) {
	D := len(k)
	// decay rows and read u = kᵀS in one pass
	u := o // o is free until the read-out: use it for u
	clear(u)
	for i := 0; i < D; i++ {
		row := S[i*D : (i+1)*D]
		a := alpha[i]
		for j := range row {
			row[j] *= a
		}
		tensor.Axpy(u, k[i], row)
	}
	// delta: d[j] = v[j] - u[j], reuse u
	for j := range u {
		u[j] = v[j] - u[j]
	}
	out := alpha // free after the decay
	clear(out)
	for i := 0; i < D; i++ {
		row := S[i*D : (i+1)*D]
		tensor.Axpy(row, float32(k[i]*beta), u)
		tensor.Axpy(out, q[i], row)
	}
	copy(o, out)
}
