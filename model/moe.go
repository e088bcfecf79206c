package model

import (
	"context"
	"errors"
	"fmt"

	"github.com/k3go/k3/expert"

	"github.com/k3go/k3/tensor"
)

// moe runs the latent mixture of experts over the pass's rows (§6.8,
// §6.9): route on the full-width input, project into the latent, run each
// selected expert, mix in selection order, normalise the aggregate,
// project back, and add the shared experts computed on the original input.
//
// Experts are processed as the union over the rows (of every sequence in
// the pass): each expert is fetched once and multiplied by every row that
// chose it in one product; every row still gets exactly the one-row
// arithmetic, and contributions are summed per row in selection order, so
// the order in which experts arrive never changes the bits.
func (p *pass) moe(ctx context.Context, l int, mats *LayerMats, vec *LayerVecs) error {
	m, c, sc, T := p.m, p.c, p.sc, p.T
	E, K, Ne, Lt, I := c.Hidden, c.TopK, c.Experts, c.LatentDim, c.MoEIntermediate
	xn := sc.xn[:T*E]

	// 1. Route: one product over every row, then top-k per row.
	p.routerScores(&mats.Router)
	// A NaN score would rank below every expert: top-k would pick nothing
	// (or the same expert K times), so routing stops here instead.
	if err := p.screen(sc.scores[:T*Ne], Ne, "router"); err != nil {
		return err
	}
	for t := 0; t < T; t++ {
		topK(sc.idx[t*K:(t+1)*K], sc.wts[t*K:(t+1)*K], sc.scores[t*Ne:(t+1)*Ne], vec.Bias, sc.choice, c.MoERenormalize, c.RoutedScale)
	}
	first := p.bucket(l)
	m.expertUnion.Add(int64(len(first)))
	m.moeLayerPasses.Add(1)
	b := &sc.batch
	b.Layer, b.IDs, b.Uses = l, first, sc.uses[:len(first)]
	p.experts = b
	if err := m.experts.Begin(ctx, b); err != nil {
		m.experts.End(b)
		p.experts = nil
		p.clearSeen(first)
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
		if err := p.screen(sc.ffn[:T*E], E, "shared experts"); err != nil {
			m.experts.End(b)
			p.experts = nil
			p.clearSeen(first)
			return err
		}
	} else {
		clear(sc.ffn[:T*E])
	}

	// 3. Experts, resident ones first, each released as soon as it is done.
	var err error
	for i := range first {
		if err = p.runExpert(ctx, b, i); err != nil {
			break
		}
	}
	m.experts.End(b)
	p.experts = nil
	p.clearSeen(first)
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

// bucket builds the pass's expert union from the routing in sc.idx: the
// distinct experts (those the source holds already first, then the rest,
// each group in first-seen order), how many rows chose each (sc.uses), and
// every expert's choices (row·K + slot, ascending) as one contiguous run of
// sc.users from sc.ustart[i] to sc.ustart[i+1]. Bucketing once per layer
// replaces a scan of all T·K choices per expert.
func (p *pass) bucket(l int) []int32 {
	c, sc := p.c, p.sc
	n := p.T * c.TopK
	first := sc.first[:0]
	for i := 0; i < n; i++ {
		e := sc.idx[i]
		if sc.seen[e] == 0 {
			first = append(first, e)
			sc.seen[e] = int32(len(first))
		}
	}
	if res, ok := p.m.experts.(expert.Residency); ok {
		// Stable partition, resident experts to the front.
		k, rest := 0, sc.cursor[:0]
		for _, e := range first {
			if res.Resident(l, e) {
				first[k] = e
				k++
			} else {
				rest = append(rest, e)
			}
		}
		copy(first[k:], rest)
		for i, e := range first {
			sc.seen[e] = int32(i + 1)
		}
	}
	uses := sc.uses[:len(first)]
	clear(uses)
	for i := 0; i < n; i++ {
		uses[sc.seen[sc.idx[i]]-1]++
	}
	start := sc.ustart[:len(first)+1]
	start[0] = 0
	for i, u := range uses {
		start[i+1] = start[i] + u
	}
	cursor := sc.cursor[:len(first)]
	copy(cursor, start)
	users := sc.users[:n]
	for i := 0; i < n; i++ {
		u := sc.seen[sc.idx[i]] - 1
		users[cursor[u]] = int32(i)
		cursor[u]++
	}
	sc.first = first
	return first
}

// routerScores computes score[t][e] = sigmoid(f32(Σ_i W[e][i]·x[t][i]))
// for every row with the sum in float64 (tensor.MatMulF64Acc: exact
// products, one fixed order on every kernel implementation, the gate read
// once for all rows), so that a BF16 gate and its F32 widening give
// identical scores and routing never depends on the kernels or the batch.
func (p *pass) routerScores(w *Linear) {
	c, sc, T := p.c, p.sc, p.T
	sco := sc.scores[:T*c.Experts]
	tensor.MatMulF64Acc(p.m.pool, sco, w.Dense, sc.xn[:T*c.Hidden], T)
	for e, v := range sco {
		sco[e] = sigmoid(v)
	}
}

// clearSeen resets the first-seen marks of a pass.
func (p *pass) clearSeen(first []int32) {
	for _, e := range first {
		p.sc.seen[e] = 0
	}
	p.sc.first = first[:0]
}

// runExpert multiplies the batch's i-th expert by every row that selected
// it and scatters the outputs to contrib[row][slot].
func (p *pass) runExpert(ctx context.Context, b *expert.Batch, i int) error {
	m, c, sc := p.m, p.c, p.sc
	e := int(b.IDs[i])
	K, Lt, I := c.TopK, c.LatentDim, c.MoEIntermediate
	users := sc.users[sc.ustart[i]:sc.ustart[i+1]]
	n := len(users)
	for u, i := range users {
		t := int(i) / K
		copy(sc.xg[u*Lt:(u+1)*Lt], sc.zl[t*Lt:(t+1)*Lt])
	}
	ex, err := m.experts.Get(ctx, b, i)
	if err != nil {
		if errors.Is(err, expert.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("expert %d: %w", e, err)
	}
	a1, a3 := sc.a1[:n*I], sc.a3[:n*I]
	ex.W[0].MatMul(m.pool, a1, sc.xg[:n*Lt], n)
	ex.W[2].MatMul(m.pool, a3, sc.xg[:n*Lt], n)
	situGLU(a1, a1, a3, c.SituBeta, c.SituLinearBeta)
	ex.W[1].MatMul(m.pool, sc.eo[:n*Lt], a1, n)
	m.experts.Put(b, i)
	if !allFinite(sc.eo[:n*Lt]) {
		if p.gs == nil {
			return fmt.Errorf("%w: routed expert %d", ErrNonFinite, e)
		}
		for u, i := range users {
			if row := sc.eo[u*Lt : (u+1)*Lt]; !allFinite(row) {
				p.failGroup(int(i)/K, fmt.Errorf("layer %d: %w: routed expert %d", p.l, ErrNonFinite, e))
				clear(row)
			}
		}
		if err := p.allFailed(); err != nil {
			return err
		}
	}
	for u, i := range users {
		copy(sc.contrib[int(i)*Lt:(int(i)+1)*Lt], sc.eo[u*Lt:(u+1)*Lt])
	}
	return nil
}
