package model

import (
	"context"
	"fmt"

	"github.com/k3go/k3/tensor"
)

// moe runs the latent mixture of experts over T tokens (§6.8, §6.9): route
// on the full-width input, project into the latent, run each selected
// expert, mix in selection order, normalise the aggregate, project back,
// and add the shared experts computed on the original input.
//
// Experts are processed as the union over the T tokens: each expert is
// fetched once and multiplied by every token that chose it in one pass
// (batched prefill); every token still gets exactly the one-token
// arithmetic, and contributions are summed per token in selection order.
func (s *Session) moe(ctx context.Context, l int, mats *LayerMats, vec *LayerVecs, T int) error {
	m, c, sc := s.m, s.m.Cfg, s.sc
	E, K, Ne, Lt, I := c.Hidden, c.TopK, c.Experts, c.LatentDim, c.MoEIntermediate
	xn := sc.xn[:T*E]

	// 1. Route.
	s.routerScores(&mats.Router, T)
	for t := 0; t < T; t++ {
		topK(sc.idx[t*K:(t+1)*K], sc.wts[t*K:(t+1)*K], sc.scores[t*Ne:(t+1)*Ne], vec.Bias, sc.choice, c.MoERenormalize, c.RoutedScale)
	}
	// The union of selected experts, in first-seen order.
	first := sc.first[:0]
	for i := 0; i < T*K; i++ {
		e := sc.idx[i]
		if sc.seen[e] == 0 {
			first = append(first, e)
			sc.seen[e] = int32(len(first))
		}
	}
	b := &sc.batch
	b.Layer, b.IDs = l, first
	if err := m.experts.Begin(ctx, b); err != nil {
		m.experts.End(b)
		s.clearSeen(first)
		return fmt.Errorf("experts: %w", err)
	}

	// 2. Latent down-projection and the shared experts while reads run.
	mats.LatentDown.MatMul(m.pool, sc.zl[:T*Lt], xn, T)
	if c.SharedExperts > 0 {
		S := c.SharedExperts * I
		g, u := sc.sg[:T*S], sc.su[:T*S]
		mats.SharedGate.MatMul(m.pool, g, xn, T)
		mats.SharedUp.MatMul(m.pool, u, xn, T)
		situGLU(g, g, u, c.SituBeta, c.SituLinearBeta)
		mats.SharedDown.MatMul(m.pool, sc.ffn[:T*E], g, T)
	} else {
		clear(sc.ffn[:T*E])
	}

	// 3. Experts, in first-seen order, each released as soon as it is done.
	var err error
	for i := range first {
		if err = s.runExpert(ctx, b, i, T); err != nil {
			break
		}
	}
	m.experts.End(b)
	s.clearSeen(first)
	if err != nil {
		return err
	}

	// 4. Mix in selection order, normalise, project back, add shared.
	acc := sc.accL[:T*Lt]
	for t := 0; t < T; t++ {
		a := acc[t*Lt : (t+1)*Lt]
		clear(a)
		for j := 0; j < K; j++ {
			w := sc.wts[t*K+j]
			cj := sc.contrib[(t*K+j)*Lt : (t*K+j+1)*Lt]
			for i := range a {
				a[i] += float32(w * cj[i])
			}
		}
		if c.LatentMoENorm {
			rmsNorm(a, a, vec.LatentNorm, c.RMSNormEps)
		}
	}
	up := sc.attn[:T*E] // attention output was already folded into pref
	mats.LatentUp.MatMul(m.pool, up, acc, T)
	f := sc.ffn[:T*E]
	for i := range f {
		f[i] = up[i] + f[i]
	}
	return nil
}

// clearSeen resets the first-seen marks of a pass.
func (s *Session) clearSeen(first []int32) {
	for _, e := range first {
		s.sc.seen[e] = 0
	}
	s.sc.first = first[:0]
}

// runExpert multiplies the batch's i-th expert by every token that
// selected it and scatters the outputs to contrib[token][slot].
func (s *Session) runExpert(ctx context.Context, b *ExpertBatch, i, T int) error {
	m, c, sc := s.m, s.m.Cfg, s.sc
	e := int(b.IDs[i])
	K, Lt, I := c.TopK, c.LatentDim, c.MoEIntermediate
	users := sc.users[:0]
	for i := 0; i < T*K; i++ {
		if int(sc.idx[i]) == e {
			users = append(users, int32(i))
		}
	}
	n := len(users)
	for u, i := range users {
		t := int(i) / K
		copy(sc.xg[u*Lt:(u+1)*Lt], sc.zl[t*Lt:(t+1)*Lt])
	}
	ex, err := m.experts.Get(ctx, b, i)
	if err != nil {
		return fmt.Errorf("expert %d: %w", e, err)
	}
	a1, a3 := sc.a1[:n*I], sc.a3[:n*I]
	ex.W[0].MatMul(m.pool, a1, sc.xg[:n*Lt], n)
	ex.W[2].MatMul(m.pool, a3, sc.xg[:n*Lt], n)
	situGLU(a1, a1, a3, c.SituBeta, c.SituLinearBeta)
	ex.W[1].MatMul(m.pool, sc.eo[:n*Lt], a1, n)
	m.experts.Put(b, i)
	for u, i := range users {
		copy(sc.contrib[int(i)*Lt:(int(i)+1)*Lt], sc.eo[u*Lt:(u+1)*Lt])
	}
	sc.users = users[:0]
	return nil
}

// routerScores computes score[t][e] = sigmoid(f32(Σ_i W[e][i]·x[t][i]))
// with the sum in float64 (tensor.MatVecF64Acc: exact products, one fixed
// order on every kernel implementation), so that a BF16 gate and its F32
// widening give identical scores and routing never depends on the kernels.
func (s *Session) routerScores(w *Linear, T int) {
	c, sc := s.m.Cfg, s.sc
	E, Ne := c.Hidden, c.Experts
	for t := 0; t < T; t++ {
		sco := sc.scores[t*Ne : (t+1)*Ne]
		tensor.MatVecF64Acc(s.m.pool, sco, w.Dense, sc.xn[t*E:(t+1)*E])
		for e, v := range sco {
			sco[e] = sigmoid(v)
		}
	}
}
