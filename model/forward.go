package model

import (
	"context"
	"fmt"
	"time"
)

// scratch holds every intermediate buffer of a forward pass over up to tc
// tokens. It is allocated once per State and reused, so decoding allocates
// nothing per token.
type scratch struct {
	tc int

	pref, x, xn, attn, ffn []float32 // [tc][E]
	blocks                 []float32 // [tc][NB][E]
	sources                [][]float32
	arScore                []float32

	// KDA
	q, k, v, g, z, o []float32 // [tc][P]
	bl               []float32 // [tc][Hk]
	fa               []float32 // [tc][D]
	beta             []float32 // [tc][Hk]

	// MLA
	qa     []float32 // [tc][Cq]
	qm     []float32 // [tc][H·dh]
	ckv    []float32 // [tc][Ckv+r]
	mo, mg []float32 // [tc][H·vh]
	heads  []mlaHeadScratch

	// MoE
	scores  []float32 // [tc][Ne]
	choice  []float32 // [Ne]
	idx     []int32   // [tc][K]
	wts     []float32 // [tc][K]
	zl      []float32 // [tc][Lt]
	contrib []float32 // [tc][K][Lt]
	accL    []float32 // [tc][Lt]
	xg      []float32 // [tc][Lt] gathered expert inputs
	a1, a3  []float32 // [tc][I]
	eo      []float32 // [tc][Lt]
	users   []int32   // per expert: token*K + slot
	first   []int32   // expert union in first-seen order
	seen    []int32   // [Ne] position+1 in first, 0 if unseen
	sg, su  []float32 // [tc][max(Ns·I, Id)]

	batch  ExpertBatch
	rowBuf []byte // one embedding row read from disk, with alignment slack
	logits []float32
	kdaJob kdaJob
	mlaJob mlaJob
}

type mlaHeadScratch struct {
	qabs, ctx []float32 // [Ckv]
	p         []float32 // [positions]
}

func newScratch(c *Config, tc int) *scratch {
	return buildScratch(c, tc, func(n int) []float32 { return make([]float32, n) })
}

// scratchSizes returns the length of every buffer newScratch allocates, in
// 4-byte words.
func scratchSizes(c *Config, tc int) []int {
	var sizes []int
	buildScratch(c, tc, func(n int) []float32 { sizes = append(sizes, n); return nil })
	return sizes
}

// buildScratch lays out the scratch buffers through alloc, so that the
// memory planner counts exactly what a session allocates.
func buildScratch(c *Config, tc int, f func(n int) []float32) *scratch {
	E, P, D, Hk := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	nb := c.NumBoundaries()
	i32 := func(n int) []int32 {
		f(n)
		return make([]int32, 0, n)
	}
	s := &scratch{tc: tc,
		pref: f(tc * E), x: f(tc * E), xn: f(tc * E), attn: f(tc * E), ffn: f(tc * E),
		blocks: f(tc * nb * E), sources: make([][]float32, 0, nb+1), arScore: f(nb + 1),
		q: f(tc * P), k: f(tc * P), v: f(tc * P), g: f(tc * P), z: f(tc * P), o: f(tc * P),
		bl: f(tc * Hk), fa: f(tc * D), beta: f(tc * Hk),
		qa: f(tc * c.QLoraRank), qm: f(tc * c.MLAHeads * c.MLAHeadDim()), ckv: f(tc * (c.KVLoraRank + c.QKRopeDim)),
		mo: f(tc * c.MLAHeads * c.VHeadDim), mg: f(tc * c.MLAHeads * c.VHeadDim),
		heads:  make([]mlaHeadScratch, c.MLAHeads),
		scores: f(tc * c.Experts), choice: f(c.Experts), wts: f(tc * c.TopK),
		zl: f(tc * c.LatentDim), contrib: f(tc * c.TopK * c.LatentDim), accL: f(tc * c.LatentDim),
		xg: f(tc * c.LatentDim), a1: f(tc * c.MoEIntermediate), a3: f(tc * c.MoEIntermediate), eo: f(tc * c.LatentDim),
		users: i32(tc * c.TopK), first: i32(tc * c.TopK),
	}
	s.rowBuf = make([]byte, 0, c.Hidden*4+2*Align)
	f((c.Hidden*4 + 2*Align) / 4)
	s.rowBuf = s.rowBuf[:cap(s.rowBuf)]
	s.idx = i32(tc * c.TopK)[:tc*c.TopK]
	s.seen = i32(c.Experts)[:c.Experts]
	wide := c.SharedExperts * c.MoEIntermediate
	if c.FirstKDense > 0 {
		wide = max(wide, c.DenseIntermediate)
	}
	s.sg, s.su = f(tc*wide), f(tc*wide)
	for h := range s.heads {
		s.heads[h] = mlaHeadScratch{qabs: f(c.KVLoraRank), ctx: f(c.KVLoraRank)}
	}
	return s
}

// passLocker is implemented by weight sources that serve one forward pass
// at a time (a streaming trunk).
type passLocker interface {
	BeginPass()
	EndPass()
}

// Session couples a State with its scratch so a caller can run forward
// passes. It is not safe for concurrent use.
type Session struct {
	m  *Model
	St *State
	sc *scratch
}

// NewSession creates a sequence state of up to capacity positions.
func (m *Model) NewSession(capacity int) *Session {
	return &Session{m: m, St: NewState(m.Cfg, capacity)}
}

// Forward feeds tokens at the current position and writes logits into out:
// the last position's V logits, or every position's (len(tokens)·V) when
// all is set. It carries the KDA, conv and MLA state forward; call
// St.Reset first for a fresh sequence. On error the state is undefined and
// must be reset before reuse.
func (s *Session) Forward(ctx context.Context, tokens []int, out []float32, all bool) error {
	m, c := s.m, s.m.Cfg
	if len(tokens) == 0 {
		return fmt.Errorf("forward: no tokens")
	}
	need := c.Vocab
	if all {
		need *= len(tokens)
	}
	if len(out) < need {
		return fmt.Errorf("forward: logits buffer holds %d values, need %d", len(out), need)
	}
	for i, t := range tokens {
		if t < 0 || t >= c.Vocab {
			return fmt.Errorf("%w: token %d at index %d is outside [0, %d)", ErrTokenOutOfRange, t, i, c.Vocab)
		}
	}
	if err := s.St.reserve(len(tokens)); err != nil {
		return err
	}
	tc := min(len(tokens), m.chunk)
	if s.sc == nil || s.sc.tc < tc {
		s.sc = newScratch(c, tc)
	}
	if pl, ok := m.layers.(passLocker); ok {
		pl.BeginPass()
		defer pl.EndPass()
	}
	start := time.Now()
	defer func() { m.forwardNanos.Add(int64(time.Since(start))) }()
	for done := 0; done < len(tokens); {
		n := min(m.chunk, len(tokens)-done)
		var dst []float32
		switch {
		case all:
			dst = out[done*c.Vocab : (done+n)*c.Vocab]
		case done+n == len(tokens):
			dst = out[:c.Vocab]
		}
		if err := s.forwardChunk(ctx, tokens[done:done+n], dst, all); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// forwardChunk runs every layer over T tokens. dst receives the logits of
// every position (all) or of the last one; nil skips the head.
func (s *Session) forwardChunk(ctx context.Context, tokens []int, dst []float32, all bool) error {
	m, c, sc, st := s.m, s.m.Cfg, s.sc, s.St
	T, E := len(tokens), c.Hidden
	nbMax := c.NumBoundaries()
	for t, id := range tokens {
		if err := m.embedRow(ctx, sc.pref[t*E:(t+1)*E], id, sc.rowBuf); err != nil {
			return err
		}
	}
	nb := 0
	for l := 0; l < c.Layers; l++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if m.closed.Load() {
			return ErrClosed
		}
		if err := s.layer(ctx, l, T, &nb, nbMax); err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	st.pos += T
	if dst == nil {
		return nil
	}
	// Model-level aggregator, final norm, lm_head.
	first := T - 1
	if all {
		first = 0
	}
	for t := first; t < T; t++ {
		s.aggregate(sc.x[t*E:(t+1)*E], t, nb, nbMax, sc.pref[t*E:(t+1)*E], m.Plan.foldO)
		rmsNorm(sc.xn[(t-first)*E:(t-first+1)*E], sc.x[t*E:(t+1)*E], m.Plan.finalNorm, c.RMSNormEps)
	}
	n := T - first
	mlm := m.lmHead
	mlmLinear := Linear{Dense: mlm}
	mlmLinear.MatMul(m.pool, dst[:n*c.Vocab], sc.xn[:n*E], n)
	return nil
}

// aggregate runs the Attention-Residual aggregator for token t over its nb
// block snapshots and the running prefix.
func (s *Session) aggregate(out []float32, t, nb, nbMax int, pref, fold []float32) {
	E := s.m.Cfg.Hidden
	src := s.sc.sources[:0]
	for b := 0; b < nb; b++ {
		off := (t*nbMax + b) * E
		src = append(src, s.sc.blocks[off:off+E])
	}
	src = append(src, pref)
	attnRes(out, src, fold, s.m.Cfg.RMSNormEps, s.sc.arScore)
	s.sc.sources = src[:0]
}

// layer runs decoder layer l over T tokens (§6.7 of the model spec),
// acquiring each part of its weights only while it computes.
func (s *Session) layer(ctx context.Context, l int, T int, nb *int, nbMax int) error {
	m, c, sc := s.m, s.m.Cfg, s.sc
	E := c.Hidden
	vec := &m.Plan.vecs[l]
	// Pre-attention aggregation (layer 0 has no blocks yet and uses pref).
	for t := 0; t < T; t++ {
		pref := sc.pref[t*E : (t+1)*E]
		x := sc.x[t*E : (t+1)*E]
		if *nb > 0 {
			s.aggregate(x, t, *nb, nbMax, pref, vec.FoldA)
		} else {
			copy(x, pref)
		}
	}
	present := true
	if c.IsBoundary(l) {
		for t := 0; t < T; t++ {
			off := (t*nbMax + *nb) * E
			copy(sc.blocks[off:off+E], sc.pref[t*E:(t+1)*E])
		}
		*nb++
		present = false
	}
	for t := 0; t < T; t++ {
		rmsNorm(sc.xn[t*E:(t+1)*E], sc.x[t*E:(t+1)*E], vec.InNorm, c.RMSNormEps)
	}
	mats, err := m.layers.Acquire(ctx, l, PartAttn)
	if err != nil {
		return err
	}
	if c.IsMLA(l) {
		s.mla(l, mats, vec, T)
	} else {
		s.kda(l, mats, vec, T)
	}
	m.layers.Release(l, PartAttn)
	for i := 0; i < T*E; i++ {
		if present {
			sc.pref[i] += sc.attn[i]
		} else {
			sc.pref[i] = sc.attn[i]
		}
	}
	for t := 0; t < T; t++ {
		s.aggregate(sc.x[t*E:(t+1)*E], t, *nb, nbMax, sc.pref[t*E:(t+1)*E], vec.FoldM)
		rmsNorm(sc.xn[t*E:(t+1)*E], sc.x[t*E:(t+1)*E], vec.PostNorm, c.RMSNormEps)
	}
	if mats, err = m.layers.Acquire(ctx, l, PartFFN); err != nil {
		return err
	}
	if c.IsDense(l) {
		s.denseFFN(mats, T)
	} else {
		err = s.moe(ctx, l, mats, vec, T)
	}
	m.layers.Release(l, PartFFN)
	if err != nil {
		return err
	}
	for i := 0; i < T*E; i++ {
		sc.pref[i] += sc.ffn[i]
	}
	return nil
}

// denseFFN computes ffn = down(SiTU(gate(xn), up(xn))).
func (s *Session) denseFFN(mats *LayerMats, T int) {
	m, c, sc := s.m, s.m.Cfg, s.sc
	Id := c.DenseIntermediate
	g, u := sc.sg[:T*Id], sc.su[:T*Id]
	mats.GateProj.MatMul(m.pool, g, sc.xn[:T*c.Hidden], T)
	mats.UpProj.MatMul(m.pool, u, sc.xn[:T*c.Hidden], T)
	situGLU(g, g, u, c.SituBeta, c.SituLinearBeta)
	mats.DownProj.MatMul(m.pool, sc.ffn[:T*c.Hidden], g, T)
}
