package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/platform/crash"
)

// Scratch holds every intermediate buffer of a forward pass over up to
// Rows token rows, summed over the sequences in the pass. It belongs to
// the caller that runs passes (one per concurrent pass, not one per
// sequence) and is reused, so decoding allocates nothing per token. A
// Scratch is not safe for concurrent use.
type Scratch struct {
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

	uses   []int32 // per union index: the rows that chose it
	ustart []int32 // per union index: where its run of users starts
	cursor []int32 // bucketing scratch

	batch  expert.Batch
	rowBuf []byte    // one embedding row read from disk, with alignment slack
	segs   []segment // the sequences of the current pass
	pass   pass      // the current pass (kept here so it is not allocated)
	kdaJob kdaJob
	mlaJob mlaJob
}

// Rows returns the number of token rows the scratch holds.
func (s *Scratch) Rows() int { return s.tc }

type mlaHeadScratch struct {
	qabs, ctx []float32 // [Ckv]
	p         []float32 // [positions]
}

// NewScratch allocates the buffers of a pass over up to rows token rows.
func NewScratch(c *Config, rows int) *Scratch {
	return buildScratch(c, max(rows, 1), func(n int) []float32 { return make([]float32, n) })
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
func buildScratch(c *Config, tc int, f func(n int) []float32) *Scratch {
	E, P, D, Hk := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.KDAHeads
	nb := c.NumBoundaries()
	i32 := func(n int) []int32 {
		f(n)
		return make([]int32, 0, n)
	}
	s := &Scratch{tc: tc,
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
		uses: i32(tc * c.TopK), ustart: i32(tc*c.TopK + 1), cursor: i32(tc * c.TopK),
		segs: make([]segment, 0, tc),
	}
	s.rowBuf = make([]byte, 0, c.Hidden*4+2*Align)
	f((c.Hidden*4 + 2*Align) / 4)
	s.rowBuf = s.rowBuf[:cap(s.rowBuf)]
	s.idx = i32(tc * c.TopK)[:tc*c.TopK]
	s.users = s.users[:cap(s.users)]
	s.uses, s.ustart = s.uses[:cap(s.uses)], s.ustart[:cap(s.ustart)]
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

// Group is one sequence's share of a batched forward pass: its state, the
// tokens it feeds at its current position, and where its logits go.
type Group struct {
	// St is the sequence's state; the pass appends Tokens to it. A State
	// appears in at most one Group of a pass.
	St *State
	// Tokens are the new tokens, in order (at least one).
	Tokens []int
	// All asks for the logits of every new token (len(Tokens)·V values in
	// Out, position-major) instead of only the last one's (V values).
	All bool
	// Out receives the logits; nil computes none (a prefill chunk whose
	// logits nobody reads).
	Out []float32
	// Err is set by ForwardBatch when this sequence's rows held a NaN or
	// an infinity (ErrNonFinite naming the layer and the op); its state is
	// then undefined and must be reset. The other sequences of the pass
	// are unaffected: rows never mix, and a failed row is zeroed so that
	// it stays finite in the products it shares.
	Err error
}

// segment is the part of one Group that a sub-pass carries: rows
// [lo, lo+n) of the sub-pass are tokens[off:off+n] of the group.
type segment struct {
	st     *State
	grp    int // the index of its Group
	lo, n  int
	p0     int // the position of the segment's first row
	tokens []int
	// out receives the logits of the segment's selected rows: every row
	// (all) or only the group's last token (last); nil: none.
	out       []float32
	all, last bool
}

// Session couples a State with its own scratch so a caller can run forward
// passes for one sequence. It is not safe for concurrent use.
type Session struct {
	m  *Model
	st *State
	sc *Scratch
	g  [1]Group
}

// NewSession creates a sequence state of up to capacity positions.
func (m *Model) NewSession(capacity int) *Session {
	return &Session{m: m, st: NewState(m.Cfg, capacity)}
}

// Reset empties the session's state for a fresh sequence.
func (s *Session) Reset() { s.st.Reset() }

// Forward feeds tokens at the current position and writes logits into out:
// the last position's V logits, or every position's (len(tokens)·V) when
// all is set. It carries the KDA, conv and MLA state forward; call
// Reset first for a fresh sequence. On error the state is undefined and
// must be reset before reuse. It is ForwardBatch with one group.
func (s *Session) Forward(ctx context.Context, tokens []int, out []float32, all bool) error {
	if len(out) == 0 {
		return fmt.Errorf("forward: no logits buffer")
	}
	tc := min(len(tokens), s.m.chunk)
	if s.sc == nil || s.sc.tc < tc {
		s.sc = NewScratch(s.m.Cfg, tc)
	}
	s.g[0] = Group{St: s.st, Tokens: tokens, All: all, Out: out}
	err := s.m.ForwardBatch(ctx, s.sc, s.g[:])
	if s.g[0].Err != nil {
		err = s.g[0].Err
	}
	s.g[0] = Group{}
	return err
}

// ForwardBatch runs one pass over the weights for several sequences: the
// new tokens of every group are rows of the same weight products, so the
// trunk is read once for all of them and each routed expert once for every
// row that chose it. When the rows exceed sc.Rows(), the pass is split
// into sub-passes of at most that many rows (a group may span two), all
// under one turn of the streaming trunk.
//
// A row's arithmetic never depends on the other rows: every group's logits
// are bit-identical to running it alone, in any batch and at any split.
// The groups are checked (token range, context capacity, logits buffers)
// before anything runs; on a failure after that every group's state is
// undefined and must be reset before reuse. A non-finite value fails only
// the groups whose rows held it: their Err is set and ForwardBatch
// returns a *PartialError; the other groups completed normally.
func (m *Model) ForwardBatch(ctx context.Context, sc *Scratch, gs []Group) (err error) {
	c := m.Cfg
	if len(gs) == 0 {
		return fmt.Errorf("forward: no sequences")
	}
	for gi := range gs {
		g := &gs[gi]
		g.Err = nil
		if len(g.Tokens) == 0 {
			return fmt.Errorf("forward: sequence %d: no tokens", gi)
		}
		if g.St == nil || g.St.cfg != c {
			return fmt.Errorf("forward: sequence %d: no state of this model", gi)
		}
		need := c.Vocab
		if g.All {
			need *= len(g.Tokens)
		}
		if g.Out != nil && len(g.Out) < need {
			return fmt.Errorf("forward: sequence %d: logits buffer holds %d values, need %d", gi, len(g.Out), need)
		}
		for i, t := range g.Tokens {
			if t < 0 || t >= c.Vocab {
				return fmt.Errorf("%w: token %d at index %d is outside [0, %d)", ErrTokenOutOfRange, t, i, c.Vocab)
			}
		}
		for hi := range gs[:gi] {
			if gs[hi].St == g.St {
				return fmt.Errorf("forward: sequences %d and %d share one state", hi, gi)
			}
		}
	}
	for gi := range gs {
		if err := gs[gi].St.reserve(len(gs[gi].Tokens)); err != nil {
			return err
		}
	}
	if pl, ok := m.layers.(PassLocker); ok {
		pl.BeginPass()
		defer pl.EndPass()
	}
	start := time.Now()
	defer func() { m.forwardNanos.Add(int64(time.Since(start))) }()

	p := &sc.pass
	*p = pass{m: m, c: c, sc: sc, gs: gs}
	defer func() { *p = pass{} }()
	defer p.recoverPanic(&err)
	gi, off := 0, 0 // the next row to place: group gi, token off
	for gi < len(gs) {
		segs := sc.segs[:0]
		rows := 0
		for gi < len(gs) && rows < sc.tc {
			g := &gs[gi]
			n := min(len(g.Tokens)-off, sc.tc-rows)
			sg := segment{st: g.St, grp: gi, lo: rows, n: n, p0: g.St.pos, tokens: g.Tokens[off : off+n]}
			sg.last = off+n == len(g.Tokens)
			switch {
			case g.Out == nil:
			case g.All:
				sg.out, sg.all = g.Out[off*c.Vocab:(off+n)*c.Vocab], true
			case sg.last:
				sg.out = g.Out[:c.Vocab]
			}
			segs = append(segs, sg)
			rows += n
			if off += n; off == len(g.Tokens) {
				gi, off = gi+1, 0
			}
		}
		p.segs, p.T = segs, rows
		err := p.run(ctx)
		clear(segs)
		sc.segs = segs[:0]
		if err != nil && !errors.Is(err, errPassFailed) {
			return err
		}
		m.passes.Add(1)
		m.rows.Add(int64(rows))
	}
	return partialError(gs)
}

// pass is one sub-pass: T rows over the segments of its sequences, each
// segment's rows contiguous and in order.
type pass struct {
	m    *Model
	c    *Config
	sc   *Scratch
	segs []segment
	T    int
	gs   []Group // the pass's groups, whose Err a non-finite row sets (nil: fail the pass)
	l    int     // the layer running, -1 outside the layers (for errors)

	// What the pass holds of its weight sources, so that a panic gives it
	// back (recoverPanic).
	held    heldPart
	experts *expert.Batch // between Begin and End
}

// heldPart is a layer part acquired and not yet released.
type heldPart struct {
	layer int
	part  Part
	ok    bool
}

// recoverPanic turns a panic of the pass (a bug: in a kernel, in an op, in
// a weight source) into an error wrapping crash.ErrInternal, after giving
// back what the pass holds: the layer part it computes, the experts of its
// MoE step, the first-seen marks of its scratch. The sequences of the pass
// are left undefined, as after any failed pass; the model and its sources
// stay usable.
func (p *pass) recoverPanic(err *error) {
	r := recover()
	if r == nil {
		return
	}
	*err = crash.New(fmt.Sprintf("the forward pass (layer %d)", p.l), r)
	if p.held.ok {
		p.m.layers.Release(p.held.layer, p.held.part)
		p.held.ok = false
	}
	if p.experts != nil {
		p.m.experts.End(p.experts)
		p.experts = nil
	}
	clear(p.sc.seen)
	p.sc.first = p.sc.first[:0]
}

// run runs every layer over the pass's rows, advances each sequence's
// position, and computes the logits its segments ask for.
func (p *pass) run(ctx context.Context) error {
	m, c, sc := p.m, p.c, p.sc
	E := c.Hidden
	nbMax := c.NumBoundaries()
	for _, sg := range p.segs {
		for t, id := range sg.tokens {
			r := sg.lo + t
			if err := m.embedRow(ctx, sc.pref[r*E:(r+1)*E], id, sc.rowBuf); err != nil {
				return err
			}
			if row := sc.pref[r*E : (r+1)*E]; !allFinite(row) {
				if p.gs == nil {
					return fmt.Errorf("%w: embedding row of token %d", ErrNonFinite, id)
				}
				p.failGroup(r, fmt.Errorf("%w: embedding row of token %d", ErrNonFinite, id))
				clear(row)
			}
		}
	}
	if err := p.allFailed(); err != nil {
		return err
	}
	nb := 0
	for l := 0; l < c.Layers; l++ {
		p.l = l
		if err := ctx.Err(); err != nil {
			return err
		}
		if m.closed.Load() {
			return ErrClosed
		}
		if err := p.layer(ctx, l, &nb, nbMax); err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	for _, sg := range p.segs {
		sg.st.pos += sg.n
	}
	p.l = -1
	return p.logits(nb, nbMax)
}

// logits runs the model-level aggregator, the final norm and lm_head over
// the selected rows. One sequence's rows go straight to its buffer; rows
// of several sequences share one product over blocks of the vocabulary.
func (p *pass) logits(nb, nbMax int) error {
	m, c, sc := p.m, p.c, p.sc
	E, V := c.Hidden, c.Vocab
	n := 0 // selected rows, gathered into xn in pass order
	var single []float32
	dsts := 0
	for _, sg := range p.segs {
		if sg.out == nil {
			continue
		}
		first := sg.lo + sg.n - 1
		if sg.all {
			first = sg.lo
		}
		for r := first; r < sg.lo+sg.n; r++ {
			p.aggregate(sc.x[r*E:(r+1)*E], r, nb, nbMax, sc.pref[r*E:(r+1)*E], m.Plan.foldO)
			rmsNorm(sc.xn[n*E:(n+1)*E], sc.x[r*E:(r+1)*E], m.Plan.finalNorm, c.RMSNormEps)
			n++
		}
		single = sg.out
		dsts++
	}
	if n == 0 {
		return nil
	}
	head := Linear{Dense: m.lmHead}
	if dsts == 1 {
		head.MatMul(m.pool, single[:n*V], sc.xn[:n*E], n)
		return p.screenLogits(single[:n*V], V)
	}
	// Several destinations: blocks of vocabulary rows, every selected row
	// at once, so the head is read once per pass whatever the batch; each
	// block goes through the expert-output buffer (free after the last
	// layer) to the sequences' buffers.
	buf := sc.contrib
	vb := max(1, min(V, len(buf)/n))
	for v0 := 0; v0 < V; v0 += vb {
		v1 := min(v0+vb, V)
		w := v1 - v0
		part := Linear{Dense: head.RowsView(v0, v1)}
		part.MatMul(m.pool, buf[:n*w], sc.xn[:n*E], n)
		if err := p.screenLogits(buf[:n*w], w); err != nil {
			return err
		}
		k := 0
		for _, sg := range p.segs {
			if sg.out == nil {
				continue
			}
			rows := 1
			if sg.all {
				rows = sg.n
			}
			for i := 0; i < rows; i++ {
				copy(sg.out[i*V+v0:i*V+v1], buf[k*w:(k+1)*w])
				k++
			}
		}
	}
	return nil
}

// aggregate runs the Attention-Residual aggregator for row t over its nb
// block snapshots and the running prefix.
func (p *pass) aggregate(out []float32, t, nb, nbMax int, pref, fold []float32) {
	E := p.c.Hidden
	src := p.sc.sources[:0]
	for b := 0; b < nb; b++ {
		off := (t*nbMax + b) * E
		src = append(src, p.sc.blocks[off:off+E])
	}
	src = append(src, pref)
	attnRes(out, src, fold, p.c.RMSNormEps, p.sc.arScore)
	p.sc.sources = src[:0]
}

// layer runs decoder layer l over the pass's rows (§6.7 of the model
// spec), acquiring each part of its weights only while it computes.
func (p *pass) layer(ctx context.Context, l int, nb *int, nbMax int) error {
	m, c, sc, T := p.m, p.c, p.sc, p.T
	E := c.Hidden
	vec := &m.Plan.vecs[l]
	// Pre-attention aggregation (layer 0 has no blocks yet and uses pref).
	for t := 0; t < T; t++ {
		pref := sc.pref[t*E : (t+1)*E]
		x := sc.x[t*E : (t+1)*E]
		if *nb > 0 {
			p.aggregate(x, t, *nb, nbMax, pref, vec.FoldA)
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
	p.held = heldPart{layer: l, part: PartAttn, ok: true}
	op := "KDA attention"
	if c.IsMLA(l) {
		op = "MLA attention"
		p.mla(l, mats, vec)
	} else {
		p.kda(l, mats, vec)
	}
	m.layers.Release(l, PartAttn)
	p.held.ok = false
	// One check per op result: a NaN from a matrix, or from a restored
	// state, stops here, before it can reach the router.
	if err := p.screen(sc.attn[:T*E], E, op); err != nil {
		return err
	}
	for i := 0; i < T*E; i++ {
		if present {
			sc.pref[i] += sc.attn[i]
		} else {
			sc.pref[i] = sc.attn[i]
		}
	}
	for t := 0; t < T; t++ {
		p.aggregate(sc.x[t*E:(t+1)*E], t, *nb, nbMax, sc.pref[t*E:(t+1)*E], vec.FoldM)
		rmsNorm(sc.xn[t*E:(t+1)*E], sc.x[t*E:(t+1)*E], vec.PostNorm, c.RMSNormEps)
	}
	if mats, err = m.layers.Acquire(ctx, l, PartFFN); err != nil {
		return err
	}
	p.held = heldPart{layer: l, part: PartFFN, ok: true}
	op = "MoE"
	if c.IsDense(l) {
		op = "dense MLP"
		p.denseFFN(mats)
	} else {
		err = p.moe(ctx, l, mats, vec)
	}
	m.layers.Release(l, PartFFN)
	p.held.ok = false
	if err != nil {
		return err
	}
	if err := p.screen(sc.ffn[:T*E], E, op); err != nil {
		return err
	}
	for i := 0; i < T*E; i++ {
		sc.pref[i] += sc.ffn[i]
	}
	return nil
}

// denseFFN computes ffn = down(SiTU(gate(xn), up(xn))).
func (p *pass) denseFFN(mats *LayerMats) {
	m, c, sc, T := p.m, p.c, p.sc, p.T
	Id := c.DenseIntermediate
	g, u := sc.sg[:T*Id], sc.su[:T*Id]
	mats.GateProj.MatMul(m.pool, g, sc.xn[:T*c.Hidden], T)
	mats.UpProj.MatMul(m.pool, u, sc.xn[:T*c.Hidden], T)
	situGLU(g, g, u, c.SituBeta, c.SituLinearBeta)
	mats.DownProj.MatMul(m.pool, sc.ffn[:T*c.Hidden], g, T)
}
