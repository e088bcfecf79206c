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
// nb block snapshots feed the aggregated input.
//
// Experts are processed as the union over the rows (of every sequence in
// the pass, every tile): each expert is fetched once and multiplied by the
// rows that chose it, a tile of them at a time; every row still gets
// exactly the one-row arithmetic, and contributions are summed per row in
// selection order, so the order in which experts arrive never changes the
// bits. The dense products run tile by tile; routing, the latent inputs
// and the experts' outputs are kept for every row of the pass.
func (p *pass) moe(ctx context.Context, l int, mats *LayerMats, vec *LayerVecs, in moeInput) error {
	m, c, sc := p.m, p.c, p.sc
	K, Ne := c.TopK, c.Experts

	// 1. Route: one product over every row of a tile, then top-k per row.
	for i := range p.tiles() {
		in.prepare(p, i)
		T := p.T
		if err := p.routerScores(l, mats); err != nil {
			return err
		}
		// A NaN score would rank below every expert: top-k would pick
		// nothing (or the same expert K times), so routing stops here
		// instead.
		if err := p.screen(sc.scores[:T*Ne], Ne, "router"); err != nil {
			return err
		}
		for t := 0; t < T; t++ {
			r := p.r0 + t
			topK(sc.idx[r*K:(r+1)*K], sc.wts[r*K:(r+1)*K], sc.scores[t*Ne:(t+1)*Ne], vec.Bias, sc.choice, c.MoERenormalize, c.RoutedScale)
		}
	}
	first := p.bucket(l)
	m.expertUnion.Add(int64(len(first)))
	m.moeLayerPasses.Add(1)
	if p.sharded() {
		// Every rank's rows of every expert, in rounds: the latent input
		// and the shared experts first, as in one process, while every
		// rank reads its up halves of the union (when one chunk holds it:
		// decoding, short prompts).
		if p.R*c.TopK <= expertChunk(c, p.R) {
			if pf, ok := m.ranks.(Prefetcher); ok {
				pf.Prefetch(ctx, l, expert.HalfUp, first)
			}
			m.PrefetchExperts(ctx, &sc.rwork, l, expert.HalfUp, first)
		}
		err := p.moeDense(l, mats, in)
		if err == nil {
			err = p.expertRounds(l, mats, first)
		}
		m.EndPrefetch(&sc.rwork)
		p.clearSeen(first)
		if err != nil {
			return err
		}
		return p.mixAll(l, mats, vec)
	}
	b := &sc.batch
	b.Layer, b.IDs, b.Uses = l, first, sc.uses[:len(first)]
	p.experts = b
	if err := m.experts.Begin(ctx, b); err != nil {
		m.experts.End(b)
		p.experts = nil
		p.clearSeen(first)
		return fmt.Errorf("experts: %w", err)
	}

	// 2. The latent down-projection and the shared experts while the
	// experts' reads run.
	err := p.moeDense(l, mats, in)
	// 3. Experts, resident ones first, each released as soon as it is done.
	for i := range first {
		if err != nil {
			break
		}
		err = p.runExpert(ctx, b, i)
	}
	m.experts.End(b)
	p.experts = nil
	p.clearSeen(first)
	if err != nil {
		return err
	}

	// 4. Mix in selection order, normalise, project back, add shared.
	return p.mixAll(l, mats, vec)
}

// mixAll runs moeMix over every tile.
func (p *pass) mixAll(l int, mats *LayerMats, vec *LayerVecs) error {
	for i := range p.tiles() {
		p.setTile(i)
		if err := p.moeMix(l, mats, vec); err != nil {
			return err
		}
	}
	return nil
}

// moeInput says how the MoE gets its input for a tile: the aggregate of nb
// block snapshots with the layer's fold, normalised with its gain (a
// decoder layer), or, given, what the caller put in xn (a one-tile pass of
// the op tests).
type moeInput struct {
	nb, nbMax  int
	fold, gain []float32
	given      bool
}

// prepare makes tile i current and its input ready in xn.
func (in moeInput) prepare(p *pass, i int) {
	p.setTile(i)
	if !in.given {
		p.normIn(in.nb, in.nbMax, in.fold, in.gain)
	}
}

// moeDense computes, tile by tile, the experts' latent input zl and the
// shared experts' output (into ffn) of every row.
func (p *pass) moeDense(l int, mats *LayerMats, in moeInput) error {
	c, sc := p.c, p.sc
	E, Lt, I := c.Hidden, c.LatentDim, c.MoEIntermediate
	for i := range p.tiles() {
		in.prepare(p, i)
		T, r0 := p.T, p.r0
		xn := sc.xn[:T*E]
		ffn := sc.ffn[r0*E : (r0+T)*E]
		S := c.SharedExperts * I
		g, u := sc.sg[:T*S], sc.su[:T*S]
		rd := p.round(l, RoundFFN)
		p.prod(rd, &mats.LatentDown, MatLatentDown, sc.zl[r0*Lt:(r0+T)*Lt], xn, T)
		if c.SharedExperts > 0 {
			p.glu(rd, &mats.SharedGate, &mats.SharedUp, MatSharedGate, g, u, xn, T)
		}
		if err := p.finish(rd, mats); err != nil {
			return err
		}
		if c.SharedExperts == 0 {
			clear(ffn)
			continue
		}
		if p.sharedRides() {
			// The first expert round carries the down projection
			// (expertChunk): g is the only tile's.
			continue
		}
		rd = p.round(l, RoundFFN)
		p.prod(rd, &mats.SharedDown, MatSharedDown, ffn, g, T)
		if err := p.finish(rd, mats); err != nil {
			return err
		}
		if err := p.screen(ffn, E, "shared experts"); err != nil {
			return err
		}
	}
	return nil
}

// moeMix mixes the current tile's expert outputs in selection order,
// normalises the aggregate, projects it back and adds it to the shared
// experts' output, then adds the FFN output to the residual.
func (p *pass) moeMix(l int, mats *LayerMats, vec *LayerVecs) error {
	c, sc, T, r0 := p.c, p.sc, p.T, p.r0
	E, K, Lt := c.Hidden, c.TopK, c.LatentDim
	acc := sc.accL[:T*Lt]
	for t := 0; t < T; t++ {
		r := r0 + t
		a := acc[t*Lt : (t+1)*Lt]
		clear(a)
		for j := 0; j < K; j++ {
			w := sc.wts[r*K+j]
			cj := sc.contrib[(r*K+j)*Lt : (r*K+j+1)*Lt]
			for i := range a {
				a[i] += float32(w * cj[i])
			}
		}
		if c.LatentMoENorm {
			rmsNorm(a, a, vec.LatentNorm, c.RMSNormEps)
		}
	}
	up := sc.attn[:T*E] // the tile's attention output was already folded into pref
	rd := p.round(l, RoundFFN)
	p.prod(rd, &mats.LatentUp, MatLatentUp, up, acc, T)
	if err := p.finish(rd, mats); err != nil {
		return err
	}
	f := sc.ffn[r0*E : (r0+T)*E]
	for i := range f {
		f[i] = up[i] + f[i]
	}
	return p.addFFN("MoE")
}

// bucket builds the pass's expert union from the routing in sc.idx: the
// distinct experts (those the source holds already first, then the rest,
// each group in first-seen order), how many rows chose each (sc.uses), and
// every expert's choices (row·K + slot, ascending) as one contiguous run of
// sc.users from sc.ustart[i] to sc.ustart[i+1]. Bucketing once per layer
// replaces a scan of all R·K choices per expert.
func (p *pass) bucket(l int) []int32 {
	c, sc := p.c, p.sc
	n := p.R * c.TopK
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
func (p *pass) routerScores(l int, mats *LayerMats) error {
	c, sc, T := p.c, p.sc, p.T
	sco := sc.scores[:T*c.Experts]
	xn := sc.xn[:T*c.Hidden]
	if p.sharded() {
		rd := p.round(l, RoundFFN)
		p.add(rd, Product{Mat: MatRouter, F64: true, N: T, Rows: c.Experts, Out: sco}, xn)
		if err := p.finish(rd, mats); err != nil {
			return err
		}
	} else {
		tensor.MatMulF64Acc(p.m.pool, sco, mats.Router.Dense, xn, T)
	}
	for e, v := range sco {
		sco[e] = sigmoid(v)
	}
	return nil
}

// clearSeen resets the first-seen marks of a pass.
func (p *pass) clearSeen(first []int32) {
	for _, e := range first {
		p.sc.seen[e] = 0
	}
	p.sc.first = first[:0]
}

// runExpert multiplies the batch's i-th expert by every row that selected
// it, a tile of rows at a time, and scatters the outputs to
// contrib[row][slot].
func (p *pass) runExpert(ctx context.Context, b *expert.Batch, i int) error {
	m, c, sc := p.m, p.c, p.sc
	e := int(b.IDs[i])
	K, Lt, I := c.TopK, c.LatentDim, c.MoEIntermediate
	ex, err := m.experts.Get(ctx, b, i)
	if err != nil {
		if errors.Is(err, expert.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("expert %d: %w", e, err)
	}
	all := sc.users[sc.ustart[i]:sc.ustart[i+1]]
	for len(all) > 0 {
		users := all[:min(len(all), sc.tile)]
		all = all[len(users):]
		n := len(users)
		for u, ch := range users {
			r := int(ch) / K
			copy(sc.xg[u*Lt:(u+1)*Lt], sc.zl[r*Lt:(r+1)*Lt])
		}
		a1, a3 := sc.a1[:n*I], sc.a3[:n*I]
		ex.W[0].MatMul(m.pool, a1, sc.xg[:n*Lt], n)
		ex.W[2].MatMul(m.pool, a3, sc.xg[:n*Lt], n)
		situGLU(a1, a1, a3, c.SituBeta, c.SituLinearBeta)
		ex.W[1].MatMul(m.pool, sc.eo[:n*Lt], a1, n)
		if !allFinite(sc.eo[:n*Lt]) {
			if p.gs == nil {
				m.experts.Put(b, i)
				return fmt.Errorf("%w: routed expert %d", ErrNonFinite, e)
			}
			for u, ch := range users {
				if row := sc.eo[u*Lt : (u+1)*Lt]; !allFinite(row) {
					p.failRow(int(ch)/K, fmt.Errorf("layer %d: %w: routed expert %d", p.l, ErrNonFinite, e))
					clear(row)
				}
			}
			if err := p.allFailed(); err != nil {
				m.experts.Put(b, i)
				return err
			}
		}
		for u, ch := range users {
			copy(sc.contrib[int(ch)*Lt:(int(ch)+1)*Lt], sc.eo[u*Lt:(u+1)*Lt])
		}
	}
	m.experts.Put(b, i)
	return nil
}

// expertRounds runs the experts of a cluster pass: every rank holds its
// rows of each expert's w1 and w3 (the up half) and of its w2 (the down
// half), and w2 needs every rank's rows of SiTU-GLU(w1·x, w3·x) first. So
// the union goes in chunks of whole experts: one round computes, on every
// rank, SiTU-GLU of its rows of w1 and w3 for the rows that chose each
// expert of the chunk (the same rows of both, so the activation needs
// nothing from other ranks), and a second round computes the down rows.
// Each row still gets exactly the one-process arithmetic (whole dot
// products, the activation element by element), and contributions land in
// contrib[row][slot] as runExpert puts them.
func (p *pass) expertRounds(l int, mats *LayerMats, first []int32) error {
	c, sc := p.c, p.sc
	Lt, I := c.LatentDim, c.MoEIntermediate
	limit := expertChunk(c, p.R) // CountRounds counts with it too
	sc.growChunk(limit, Lt, I)
	for i := 0; i < len(first); {
		// Whole experts while their rows fit; an expert with more rows
		// than the chunk runs alone, its rows in pieces.
		j, n := i, 0
		for j < len(first) {
			u := int(sc.ustart[j+1] - sc.ustart[j])
			if n > 0 && n+u > limit {
				break
			}
			n += u
			j++
			if n >= limit {
				break
			}
		}
		if err := p.expertChunk(l, mats, first, i, j, limit, i == 0); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// expertChunkUsers is the fewest (row, expert) pairs a chunk of expert
// rounds holds (it grows with the pass's rows, so that an expert's rows
// rarely span two chunks).
const expertChunkUsers = 256

// sharedRides reports whether a cluster pass's shared experts' down
// projection rides in its first expert round instead of a round of its
// own: when the pass is one tile (decoding, short prompts), whose SiTU-GLU
// rows stay in the scratch until then. Their inputs are ready together,
// so this is one gather fewer per MoE layer. CountRounds counts the same.
func (p *pass) sharedRides() bool {
	return p.sharded() && p.c.SharedExperts > 0 && p.tiles() == 1
}

// expertChunk runs experts [i, j) of the union, their users in pieces of
// at most limit; the first chunk's first round also computes the shared
// experts' down projection when it rides there (sharedRides).
func (p *pass) expertChunk(l int, mats *LayerMats, first []int32, i, j, limit int, shared bool) error {
	c, sc := p.c, p.sc
	K, Lt, I := c.TopK, c.LatentDim, c.MoEIntermediate
	// Pieces: [from, to) of the concatenated users of experts i..j-1.
	lo, hi := int(sc.ustart[i]), int(sc.ustart[j])
	for from := lo; from < hi; from += limit {
		to := min(from+limit, hi)
		n := to - from
		// The piece's distinct rows, each once (in the order their
		// first pair comes), and every pair's pick of one.
		d := 0
		for u, ch := range sc.users[from:to] {
			r := int(ch) / K
			if sc.crow[r] < 0 {
				sc.crow[r] = int32(d)
				copy(sc.cxg[d*Lt:(d+1)*Lt], sc.zl[r*Lt:(r+1)*Lt])
				d++
			}
			sc.cpick[u] = sc.crow[r]
		}
		for _, ch := range sc.users[from:to] {
			sc.crow[int(ch)/K] = -1
		}
		in := sc.cxg[:d*Lt]
		// The products of each expert of the piece, grouped by expert.
		up := p.round(l, RoundExpertUp)
		p.expertProducts(up, first, i, j, from, to, func(e int32, a, b int) {
			// w1 with its w3: every rank applies SiTU-GLU to its rows.
			p.add(up, Product{Expert: e, W: 0, GLU: true, N: b - a, Rows: I, Out: sc.ca1[(a-from)*I : (b-from)*I],
				Pick: sc.cpick[a-from : b-from]}, in)
		})
		withShared := shared && from == lo && p.sharedRides()
		if withShared {
			E, S := c.Hidden, c.SharedExperts*I
			p.add(up, Product{Mat: MatSharedDown, Layer: true, N: p.T, Rows: E, Out: sc.ffn[p.r0*E : (p.r0+p.T)*E]}, sc.sg[:p.T*S])
		}
		if err := p.finish(up, mats); err != nil {
			return err
		}
		if withShared {
			if err := p.screen(sc.ffn[p.r0*c.Hidden:(p.r0+p.T)*c.Hidden], c.Hidden, "shared experts"); err != nil {
				return err
			}
		}
		down := p.round(l, RoundExpertDown)
		p.expertProducts(down, first, i, j, from, to, func(e int32, a, b int) {
			p.add(down, Product{Expert: e, W: 1, N: b - a, Rows: Lt, Out: sc.ceo[(a-from)*Lt : (b-from)*Lt]}, sc.ca1[(a-from)*I:(b-from)*I])
		})
		if err := p.finish(down, nil); err != nil {
			return err
		}
		eo := sc.ceo[:n*Lt]
		if !allFinite(eo) {
			if p.gs == nil {
				return fmt.Errorf("%w: a routed expert of layer %d", ErrNonFinite, l)
			}
			for u, ch := range sc.users[from:to] {
				if row := eo[u*Lt : (u+1)*Lt]; !allFinite(row) {
					e := first[p.expertOf(i, j, from+u)]
					p.failRow(int(ch)/K, fmt.Errorf("layer %d: %w: routed expert %d", l, ErrNonFinite, e))
					clear(row)
				}
			}
			if err := p.allFailed(); err != nil {
				return err
			}
		}
		for u, ch := range sc.users[from:to] {
			copy(sc.contrib[int(ch)*Lt:(int(ch)+1)*Lt], eo[u*Lt:(u+1)*Lt])
		}
	}
	return nil
}

// expertProducts calls add(expert, a, b) for every expert of [i, j) with
// users [a, b) inside [from, to), in union order.
func (p *pass) expertProducts(rd *Round, first []int32, i, j, from, to int, add func(e int32, a, b int)) {
	for k := i; k < j; k++ {
		a, b := max(int(p.sc.ustart[k]), from), min(int(p.sc.ustart[k+1]), to)
		if a < b {
			add(first[k], a, b)
		}
	}
}

// expertOf returns the union index in [i, j) whose users hold user u.
func (p *pass) expertOf(i, j, u int) int {
	for k := i; k < j; k++ {
		if u < int(p.sc.ustart[k+1]) {
			return k
		}
	}
	return j - 1
}
