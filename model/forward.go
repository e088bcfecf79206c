package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/k3go/k3/expert"
	"github.com/k3go/k3/internal/platform/crash"
)

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
	rows := min(len(tokens), s.m.chunk)
	if s.sc == nil || s.sc.rows < rows {
		s.sc = NewScratch(s.m.Cfg, rows, 0)
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
// row that chose it. The rows are computed in tiles of sc.Tile() while
// each part of the weights is in memory. When the rows exceed sc.Rows(),
// the pass is split into sub-passes of at most that many rows (a group may
// span two), all under one turn of the streaming trunk.
//
// A row's arithmetic never depends on the other rows: every group's logits
// are bit-identical to running it alone, in any batch, at any split and
// any tile. The groups are checked (token range, context capacity, logits
// buffers) before anything runs; on a failure after that every group's
// state is undefined and must be reset before reuse. A non-finite value
// fails only the groups whose rows held it: their Err is set and
// ForwardBatch returns a *PartialError; the other groups completed
// normally.
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
	*p = pass{ctx: ctx, m: m, c: c, sc: sc, gs: gs}
	defer func() { *p = pass{} }()
	defer p.recoverPanic(&err)
	gi, off := 0, 0 // the next row to place: group gi, token off
	for gi < len(gs) {
		segs := sc.segs[:0]
		rows := 0
		for gi < len(gs) && rows < sc.rows {
			g := &gs[gi]
			n := min(len(g.Tokens)-off, sc.rows-rows)
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
		p.all, p.R = segs, rows
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

// pass is one sub-pass: R rows over the segments of its sequences, each
// segment's rows contiguous and in order, computed tile by tile.
type pass struct {
	ctx context.Context
	m   *Model
	c   *Config
	sc  *Scratch
	gs  []Group   // the pass's groups, whose Err a non-finite row sets (nil: fail the pass)
	all []segment // the sub-pass's segments, in rows [0, R)
	R   int
	l   int // the layer running, -1 outside the layers (for errors)
	// split: a cluster pass whose KDA layers run by heads on every rank
	// (placeStates).
	split bool

	// The current tile: rows [r0, r0+T) of the sub-pass, as segs (their
	// rows relative to the tile). The ops see only the tile.
	r0, T int
	segs  []segment

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

// tiles returns the number of tiles of the sub-pass.
func (p *pass) tiles() int { return (p.R + p.sc.tile - 1) / p.sc.tile }

// setTile makes tile i the current one: its rows, and the share of every
// segment that falls in it, with the position of its first row (a
// sequence's rows of an earlier tile are already in its state's caches when
// a later tile of the same layer runs, as if they had come in an earlier
// pass).
func (p *pass) setTile(i int) {
	r0 := i * p.sc.tile
	r1 := min(r0+p.sc.tile, p.R)
	segs := p.sc.tsegs[:0]
	for _, sg := range p.all {
		lo, hi := max(sg.lo, r0), min(sg.lo+sg.n, r1)
		if lo >= hi {
			continue
		}
		t := sg
		t.lo, t.n, t.p0 = lo-r0, hi-lo, sg.p0+(lo-sg.lo)
		t.tokens, t.out = nil, nil // the pass embeds and takes logits from p.all
		segs = append(segs, t)
	}
	p.r0, p.T, p.segs = r0, r1-r0, segs
}

// run runs every layer over the pass's rows, advances each sequence's
// position, and computes the logits its segments ask for.
func (p *pass) run(ctx context.Context) error {
	m, c, sc := p.m, p.c, p.sc
	E := c.Hidden
	nbMax := c.NumBoundaries()
	for _, sg := range p.all {
		for t, id := range sg.tokens {
			r := sg.lo + t
			if err := m.embedRow(ctx, sc.pref[r*E:(r+1)*E], id, sc.rowBuf); err != nil {
				return err
			}
			if row := sc.pref[r*E : (r+1)*E]; !allFinite(row) {
				if p.gs == nil {
					return fmt.Errorf("%w: embedding row of token %d", ErrNonFinite, id)
				}
				p.failRow(r, fmt.Errorf("%w: embedding row of token %d", ErrNonFinite, id))
				clear(row)
			}
		}
	}
	if err := p.allFailed(); err != nil {
		return err
	}
	if p.sharded() {
		if err := p.placeStates(ctx); err != nil {
			return err
		}
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
	for _, sg := range p.all {
		sg.st.pos += sg.n
	}
	p.l = -1
	return p.logits(nb, nbMax)
}

// pick is one row whose logits a pass computes: its row in the pass and
// where its logits go.
type pick struct {
	r   int
	out []float32
}

// logits runs the model-level aggregator, the final norm and lm_head over
// the selected rows (every row of an All group, the last of the others), a
// tile of them at a time. One sequence's rows go straight to its buffer;
// rows of several sequences share one product over blocks of the
// vocabulary.
func (p *pass) logits(nb, nbMax int) error {
	sc := p.sc
	dsts := 0
	for _, sg := range p.all {
		if sg.out != nil {
			dsts++
		}
	}
	if dsts == 0 {
		return nil
	}
	V := p.c.Vocab
	tile := p.sc.picks[:0]
	for _, sg := range p.all {
		if sg.out == nil {
			continue
		}
		first := sg.n - 1
		if sg.all {
			first = 0
		}
		for i := first; i < sg.n; i++ {
			out := sg.out[:V]
			if sg.all {
				out = sg.out[i*V : (i+1)*V]
			}
			tile = append(tile, pick{r: sg.lo + i, out: out})
			if len(tile) == sc.tile {
				if err := p.tileLogits(tile, dsts == 1, nb, nbMax); err != nil {
					return err
				}
				tile = tile[:0]
			}
		}
	}
	if len(tile) > 0 {
		return p.tileLogits(tile, dsts == 1, nb, nbMax)
	}
	return nil
}

// tileLogits computes the logits of up to a tile of selected rows. single
// says they all belong to one sequence, so their logits are consecutive in
// its buffer and the head writes them there directly.
func (p *pass) tileLogits(tile []pick, single bool, nb, nbMax int) error {
	m, c, sc := p.m, p.c, p.sc
	E, V := c.Hidden, c.Vocab
	k := len(tile)
	for i, pk := range tile {
		r := pk.r
		p.aggregate(sc.x[i*E:(i+1)*E], r, nb, nbMax, sc.pref[r*E:(r+1)*E], m.Plan.foldO)
		rmsNorm(sc.xn[i*E:(i+1)*E], sc.x[i*E:(i+1)*E], m.Plan.finalNorm, c.RMSNormEps)
	}
	head := Linear{Dense: m.lmHead}
	if p.sharded() {
		// Every rank's vocabulary rows: one round into the sequence's
		// buffer, or a tile of rows of logits to copy out.
		out := sc.logitBuf(k * V)
		if single {
			out = tile[0].out[:k*V]
		}
		rd := p.round(-1, RoundHead)
		p.add(rd, Product{N: k, Rows: V, Out: out}, sc.xn[:k*E])
		if err := p.finish(rd, nil); err != nil {
			return err
		}
		if err := p.screenLogits(out, V, tile); err != nil {
			return err
		}
		if !single {
			for i, pk := range tile {
				copy(pk.out[:V], out[i*V:(i+1)*V])
			}
		}
		return nil
	}
	if single {
		out := tile[0].out[:k*V]
		head.MatMul(m.pool, out, sc.xn[:k*E], k)
		return p.screenLogits(out, V, tile)
	}
	// Several destinations: blocks of vocabulary rows, every row of the
	// tile at once, so the head is read once per tile; each block goes
	// through the expert-output buffer (free after the last layer) to the
	// sequences' buffers.
	buf := sc.contrib
	vb := max(1, min(V, len(buf)/k))
	for v0 := 0; v0 < V; v0 += vb {
		v1 := min(v0+vb, V)
		w := v1 - v0
		part := Linear{Dense: head.RowsView(v0, v1)}
		part.MatMul(m.pool, buf[:k*w], sc.xn[:k*E], k)
		if err := p.screenLogits(buf[:k*w], w, tile); err != nil {
			return err
		}
		for i, pk := range tile {
			copy(pk.out[v0:v1], buf[i*w:(i+1)*w])
		}
	}
	return nil
}

// aggregate runs the Attention-Residual aggregator for pass row r over its
// nb block snapshots and the running prefix.
func (p *pass) aggregate(out []float32, r, nb, nbMax int, pref, fold []float32) {
	E := p.c.Hidden
	src := p.sc.sources[:0]
	for b := 0; b < nb; b++ {
		off := (r*nbMax + b) * E
		src = append(src, p.sc.blocks[off:off+E])
	}
	src = append(src, pref)
	attnRes(out, src, fold, p.c.RMSNormEps, p.sc.arScore)
	p.sc.sources = src[:0]
}

// prefix returns the running residual of the current tile's rows.
func (p *pass) prefix() []float32 {
	E := p.c.Hidden
	return p.sc.pref[p.r0*E : (p.r0+p.T)*E]
}

// normIn computes, for the current tile, the aggregated input x of an op
// over nb block snapshots with the fold, and its norm xn with gain.
func (p *pass) normIn(nb, nbMax int, fold, gain []float32) {
	c, sc := p.c, p.sc
	E := c.Hidden
	for t := 0; t < p.T; t++ {
		r := p.r0 + t
		pref := sc.pref[r*E : (r+1)*E]
		x := sc.x[t*E : (t+1)*E]
		if nb > 0 {
			p.aggregate(x, r, nb, nbMax, pref, fold)
		} else {
			copy(x, pref)
		}
		rmsNorm(sc.xn[t*E:(t+1)*E], x, gain, c.RMSNormEps)
	}
}

// layer runs decoder layer l over the pass's rows (§6.7 of the model
// spec), acquiring each part of its weights once and computing every tile
// while it is held.
func (p *pass) layer(ctx context.Context, l int, nb *int, nbMax int) error {
	m, c, sc := p.m, p.c, p.sc
	E := c.Hidden
	vec := &m.Plan.vecs[l]
	mats, err := m.layers.Acquire(ctx, l, PartAttn)
	if err != nil {
		return err
	}
	p.held = heldPart{layer: l, part: PartAttn, ok: true}
	op := "KDA attention"
	if c.IsMLA(l) {
		op = "MLA attention"
	}
	// Pre-attention aggregation over the blocks so far (layer 0 has none
	// and uses pref); at a boundary the prefix becomes a block snapshot
	// and the residual starts afresh from the attention output.
	nb0, boundary := *nb, c.IsBoundary(l)
	for i := range p.tiles() {
		p.setTile(i)
		p.normIn(nb0, nbMax, vec.FoldA, vec.InNorm)
		if boundary {
			for t := 0; t < p.T; t++ {
				r := p.r0 + t
				off := (r*nbMax + nb0) * E
				copy(sc.blocks[off:off+E], sc.pref[r*E:(r+1)*E])
			}
		}
		var err error
		if c.IsMLA(l) {
			err = p.mla(l, mats, vec)
		} else {
			err = p.kda(l, mats, vec)
		}
		if err != nil {
			m.layers.Release(l, PartAttn)
			p.held.ok = false
			return err
		}
		// One check per op result: a NaN from a matrix, or from a
		// restored state, stops here, before it can reach the router.
		attn := sc.attn[:p.T*E]
		if err := p.screen(attn, E, op); err != nil {
			m.layers.Release(l, PartAttn)
			p.held.ok = false
			return err
		}
		pref := p.prefix()
		for i := range pref {
			if boundary {
				pref[i] = attn[i]
			} else {
				pref[i] += attn[i]
			}
		}
	}
	m.layers.Release(l, PartAttn)
	p.held.ok = false
	if boundary {
		*nb++
	}
	if mats, err = m.layers.Acquire(ctx, l, PartFFN); err != nil {
		return err
	}
	p.held = heldPart{layer: l, part: PartFFN, ok: true}
	if c.IsDense(l) {
		for i := range p.tiles() {
			p.setTile(i)
			p.normIn(*nb, nbMax, vec.FoldM, vec.PostNorm)
			if err = p.denseFFN(l, mats); err != nil {
				break
			}
			if err = p.addFFN("dense MLP"); err != nil {
				break
			}
		}
	} else {
		err = p.moe(ctx, l, mats, vec, moeInput{nb: *nb, nbMax: nbMax, fold: vec.FoldM, gain: vec.PostNorm})
	}
	m.layers.Release(l, PartFFN)
	p.held.ok = false
	return err
}

// addFFN checks the current tile's FFN output and adds it to the residual.
func (p *pass) addFFN(op string) error {
	E := p.c.Hidden
	ffn := p.sc.ffn[p.r0*E : (p.r0+p.T)*E]
	if err := p.screen(ffn, E, op); err != nil {
		return err
	}
	pref := p.prefix()
	for i := range pref {
		pref[i] += ffn[i]
	}
	return nil
}

// denseFFN computes ffn = down(SiTU(gate(xn), up(xn))) for the current
// tile.
func (p *pass) denseFFN(l int, mats *LayerMats) error {
	c, sc, T := p.c, p.sc, p.T
	E, Id := c.Hidden, c.DenseIntermediate
	g, u := sc.sg[:T*Id], sc.su[:T*Id]
	rd := p.round(l, RoundFFN)
	p.glu(rd, &mats.GateProj, &mats.UpProj, MatGateProj, g, u, sc.xn[:T*E], T)
	if err := p.finish(rd, mats); err != nil {
		return err
	}
	rd = p.round(l, RoundFFN)
	p.prod(rd, &mats.DownProj, MatDownProj, sc.ffn[p.r0*E:(p.r0+T)*E], g, T)
	return p.finish(rd, mats)
}
