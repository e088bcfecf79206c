package model

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
)

// KDA heads over a cluster. A KDA head's projections, convolutions,
// recurrence and output norm read nothing of the other heads, so a
// cluster splits the layer by heads (HeadRange): each rank projects its
// heads' rows of the layer's input, keeps its heads of every sequence's
// recurrent state and conv histories, and returns its heads' gated
// outputs, in one round (RoundKDA) where one process's arithmetic would
// need the projections gathered first. The state never crosses the
// network on a pass; rank 0 holds its own heads, the workers theirs, each
// under the sequence's id.
//
// A speculative pass runs split too: each rank copies its heads of a
// speculating sequence's state as the pass reaches each layer and records
// the rows' recurrence inputs for them (RoundSeq.Spec), and a rollback
// replays the kept rows on every rank's heads (StateRanks.RollbackState).
// A prefix-cache entry is kept in slices, each rank's heads by the rank
// (Model.LocalHeads, Model.Away, Model.Placed). The engine's states hold
// only rank 0's heads (Model.NewState): a session's file or a fork reads
// them whole, or fills them, one array at a time from and to every rank
// (Model.EachRecurrent). A state of every head (NewState) can also be
// brought home (Model.Home), and a pass over one that is home with
// positions already consumed sends the workers their heads first. A
// state is away from its first split pass until Home or Reset.

// RoundSeq is one sequence of a RoundKDA round: rows [Lo, Lo+N) of the
// round's input are its next positions, and every rank keeps its heads of
// the sequence's state under ID.
type RoundSeq struct {
	ID    uint64
	Lo, N int
	// Fresh says the sequence starts here: every rank zeroes its heads of
	// the state (making them if new) before the rows run.
	Fresh bool
	// Spec, when not 0, says the rows are rows [At, At+N) of a speculation
	// of up to Spec rows: every rank copies its heads of the state before
	// the speculation's first rows and records the rows' recurrence
	// inputs, so that a rollback (StateRanks.RollbackState) replays the
	// kept rows on its heads.
	Spec, At int
}

// HeadRange returns the KDA heads [h0, h1) rank of ranks holds.
func HeadRange(c *Config, rank, ranks int) (h0, h1 int) { return RowRange(c.KDAHeads, rank, ranks) }

// StateRanks is implemented by Ranks that keep KDA heads of sequences'
// states on the other ranks (RoundKDA). Without it a cluster's KDA layers
// run their products as rounds and their heads on rank 0.
type StateRanks interface {
	Ranks
	// PutState gives rank parts [from, from+len(parts)) of its heads of
	// state id as HeadParts lays them out, replacing what it held of them
	// under id (a state it does not hold is made, zero, first).
	PutState(ctx context.Context, rank int, id uint64, from int, parts [][]float32) error
	// GetState fills parts with parts [from, from+len(parts)) of rank's
	// heads of state id (HeadParts).
	GetState(ctx context.Context, rank int, id uint64, from int, parts [][]float32) error
	// ForgetState tells every rank that state id is gone; it may be called
	// from any goroutine and must not block.
	ForgetState(id uint64)
	// RollbackState tells rank to keep the first keep rows of the
	// speculation over state id its last rounds recorded (RoundSeq.Spec)
	// and roll its heads back to them. It precedes the next round.
	RollbackState(ctx context.Context, rank int, id uint64, keep int) error
}

// stateIDs numbers States, so that a cluster's ranks key their heads of
// each by an id no other State of the process has had.
var stateIDs atomic.Uint64

// HeadParts returns the parts of s that rank of ranks holds, in the order
// the ranks exchange them: for each KDA layer, its heads of S, then its
// channels of the q, k and v conv histories. They alias s.
func HeadParts(s *State, rank, ranks int) [][]float32 {
	c := s.cfg
	h0, h1 := HeadRange(c, rank, ranks)
	D, h := c.KDAHeadDim, c.ConvKernel-1
	var out [][]float32
	for l := range s.kda {
		if c.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		out = append(out, k.S[h0*D*D:h1*D*D], k.qh[h0*D*h:h1*D*h], k.kh[h0*D*h:h1*D*h], k.vh[h0*D*h:h1*D*h])
	}
	return out
}

// headFloats is the floats of heads [h0, h1) of one state (HeadParts).
func headFloats(c *Config, h0, h1 int) int {
	D, h := c.KDAHeadDim, c.ConvKernel-1
	return (c.Layers - c.NumMLA()) * (h1 - h0) * D * (D + 3*h)
}

// Home brings the other ranks' heads of s's KDA state into s, so that s
// is whole on rank 0 (nothing to do in one process, or when s is home).
// A failure leaves s away, its heads where they were.
func (m *Model) Home(ctx context.Context, s *State) error {
	if !s.away {
		return nil
	}
	if s.partial() {
		return fmt.Errorf("model: a state of rank 0's heads only cannot come home (EachRecurrent reads it whole)")
	}
	if sp := s.spec; sp != nil && sp.active && sp.ran {
		// Its heads on the ranks are a speculation's, which only a
		// Rollback on each rank can cut back.
		return fmt.Errorf("model: bringing home a state between a speculative pass and its Rollback")
	}
	sr, ok := m.ranks.(StateRanks)
	if !ok {
		return fmt.Errorf("model: a state away on ranks of a model without them")
	}
	ranks := sr.Size()
	for r := 1; r < ranks; r++ {
		if err := sr.GetState(ctx, r, s.id, 0, HeadParts(s, r, ranks)); err != nil {
			return fmt.Errorf("bringing the state's KDA heads home: %w", err)
		}
	}
	s.away = false
	return nil
}

// SplitHeads reports whether m is rank 0 of a cluster whose ranks keep
// their KDA heads of every state (RoundKDA): a snapshot of a state's
// recurrent arrays then needs them home, or each rank's own (LocalHeads).
func (m *Model) SplitHeads() bool {
	_, ok := m.ranks.(StateRanks)
	return ok && m.Cfg.NumMLA() < m.Cfg.Layers
}

// LocalHeads returns the recurrent arrays rank 0 keeps of s itself, in
// HeadParts' order (rank 0's heads: its share of Recurrent): what rank 0
// saves of s where every rank saves its own. In one process it is
// Recurrent. They alias s.
func (m *Model) LocalHeads(s *State) [][]float32 {
	_, ranks := m.Plan.Rank()
	if !m.SplitHeads() {
		return s.Recurrent()
	}
	return HeadParts(s, 0, ranks)
}

// Away makes the other ranks hold the current values of their heads of s
// (it sends them if s is home with positions consumed), so that each rank
// can save its own heads of s (a prefix-cache entry kept in slices).
// Nothing to do in one process or when s is away already.
func (m *Model) Away(ctx context.Context, s *State) error {
	sr, ok := m.ranks.(StateRanks)
	if !ok || !m.SplitHeads() || s.away {
		return nil
	}
	if s.pos == 0 {
		// Zero on every rank once the next round says so; nothing to send.
		return nil
	}
	return m.send(ctx, sr, s)
}

// Placed records that every other rank has just filled its heads of s
// (a prefix restore on each rank, under s's ID) while rank 0 filled its
// own (LocalHeads): s is away from now on.
func (m *Model) Placed(s *State) {
	if sr, ok := m.ranks.(StateRanks); ok && m.SplitHeads() {
		s.leave(sr)
	}
}

// Forget tells the ranks that hold heads of s to drop them (the caller is
// done with s, or is about to Reset it for another sequence): the workers'
// memory follows rank 0's sequences without waiting for the collector.
// Nothing to do in one process or for a state never split.
func (m *Model) Forget(s *State) {
	if sr, ok := m.ranks.(StateRanks); ok && s.tracked {
		sr.ForgetState(s.id)
		s.away = false
	}
}

// HeadStateBytes returns the bytes a rank of a cluster of ranks keeps per
// sequence for its KDA heads (the most any rank holds: the first ranks'
// share).
func HeadStateBytes(c *Config, ranks int) int64 {
	h0, h1 := HeadRange(c, 0, max(ranks, 1))
	return 4 * int64(headFloats(c, h0, h1))
}

// NewState allocates a state for a sequence of up to capacity positions
// on m: in a cluster whose ranks keep their KDA heads (SplitHeads), rank
// 0's heads only, the others' living on their ranks (so that rank 0's
// memory per session divides by the rank count too); otherwise as
// NewState.
func (m *Model) NewState(capacity int) *State {
	if !m.SplitHeads() {
		return NewState(m.Cfg, capacity)
	}
	_, ranks := m.Plan.Rank()
	_, h1 := HeadRange(m.Cfg, 0, ranks)
	return newState(m.Cfg, capacity, h1)
}

// EachRecurrent calls fn with each of s's recurrent arrays, whole, in
// Recurrent's order: for fn to read them (fill false: writing a state's
// file) or to fill them (fill true: reading one back, s being at its new
// length, as after Extend). A state of rank 0's heads only (NewState in a
// cluster) has each array put together from every rank's heads, or dealt
// out to them, one array at a time through a buffer of one array's size;
// another state is brought home first and its own arrays are given.
func (m *Model) EachRecurrent(ctx context.Context, s *State, fill bool, fn func(v []float32) error) error {
	if !s.partial() {
		if !fill {
			if err := m.Home(ctx, s); err != nil {
				return err
			}
		} else if s.away {
			return fmt.Errorf("model: filling the arrays of a state whose heads are on other ranks (Reset it first)")
		}
		for _, v := range s.Recurrent() {
			if err := fn(v); err != nil {
				return err
			}
		}
		return nil
	}
	sr, ok := m.ranks.(StateRanks)
	if !ok {
		return fmt.Errorf("model: a state of rank 0's heads only on a model without ranks")
	}
	c := m.Cfg
	ranks := sr.Size()
	D, hl := c.KDAHeadDim, c.ConvKernel-1
	var buf []float32
	part := 0
	for l := range s.kda {
		if c.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		for j, own := range [][]float32{k.S, k.qh, k.kh, k.vh} {
			per := D * hl // floats per head
			if j == 0 {
				per = D * D
			}
			if n := c.KDAHeads * per; cap(buf) < n {
				buf = make([]float32, n)
			} else {
				buf = buf[:n]
			}
			if fill {
				if err := fn(buf); err != nil {
					return err
				}
				copy(own, buf)
			} else {
				copy(buf, own)
			}
			for r := 1; r < ranks; r++ {
				h0, h1 := HeadRange(c, r, ranks)
				theirs := [][]float32{buf[h0*per : h1*per]}
				var err error
				switch {
				case fill:
					err = sr.PutState(ctx, r, s.id, part, theirs)
				case s.away:
					err = sr.GetState(ctx, r, s.id, part, theirs)
				default:
					clear(theirs[0]) // a fresh state: zero on every rank
				}
				if err != nil {
					return fmt.Errorf("the state's KDA heads: %w", err)
				}
			}
			if !fill {
				if err := fn(buf); err != nil {
					return err
				}
			}
			part++
		}
	}
	if fill {
		s.leave(sr)
	}
	return nil
}

// HeadSpecBytes returns the bytes a rank of a cluster of ranks keeps for
// one sequence's speculation over passes of rows rows (RoundSeq.Spec): a
// copy of its heads of the state and the record of the rows' recurrence
// inputs for them (the most any rank keeps: the first ranks' share).
func HeadSpecBytes(c *Config, ranks, rows int) int64 {
	h0, h1 := HeadRange(c, 0, max(ranks, 1))
	return HeadStateBytes(c, ranks) + specRecordBytes(c, h1-h0, rows)
}

// send gives every other rank its heads of s, which is home with
// positions consumed, and makes s away.
func (m *Model) send(ctx context.Context, sr StateRanks, s *State) error {
	if s.partial() {
		return fmt.Errorf("model: sending the heads of a state of rank 0's heads only, which has none to send")
	}
	ranks := sr.Size()
	for r := 1; r < ranks; r++ {
		if err := sr.PutState(ctx, r, s.id, 0, HeadParts(s, r, ranks)); err != nil {
			return fmt.Errorf("sending the state's KDA heads: %w", err)
		}
	}
	s.leave(sr)
	return nil
}

// leave marks s away on sr's ranks; once s is garbage, they are told to
// forget it.
func (s *State) leave(sr StateRanks) {
	s.away = true
	if !s.tracked {
		s.tracked = true
		runtime.AddCleanup(s, sr.ForgetState, s.id)
	}
}

// placeStates readies the states of a cluster pass: the pass splits its
// KDA layers by heads (p.split) where the ranks keep heads (StateRanks),
// speculative or not (each rank copies, records and rolls back its own
// heads), and sends the workers their heads of a state that is home with
// positions consumed. Otherwise every state of the pass comes home.
func (p *pass) placeStates(ctx context.Context) error {
	sr, ok := p.m.ranks.(StateRanks)
	p.split = ok && p.c.NumMLA() < p.c.Layers
	for i := range p.all {
		st := p.all[i].st
		switch {
		case p.split && !st.away && st.pos > 0:
			if err := p.m.send(ctx, sr, st); err != nil {
				return err
			}
		case !p.split:
			if err := p.m.Home(ctx, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// kdaSplit runs KDA layer l of a split cluster pass: one RoundKDA for
// every rank's heads of the tile's rows (rank 0's on the states
// themselves), then the output projection.
func (p *pass) kdaSplit(l int, mats *LayerMats) error {
	c, sc, T := p.c, p.sc, p.T
	E, P := c.Hidden, c.KDAWidth()
	xn, o := sc.xn[:T*E], sc.o[:T*P]
	sr := p.m.ranks.(StateRanks)
	rd := p.round(l, RoundKDA)
	for i := range p.segs {
		sg := &p.segs[i]
		st := sg.st
		// A state that is home here is at position 0 (placeStates sent
		// the others), hence zero on every rank once told so.
		rs := RoundSeq{ID: st.id, Lo: sg.lo, N: sg.n, Fresh: !st.away}
		if sp := st.spec; sp != nil && sp.active {
			rs.Spec, rs.At = sp.rows, sg.p0-sp.p0
		}
		rd.Seqs = append(rd.Seqs, rs)
		st.leave(sr)
	}
	p.add(rd, Product{Mat: MatOProj, N: T, Rows: P, Unit: c.KDAHeadDim, Out: o}, xn)
	sc.rwork.states = &sc.passHeads
	sc.passHeads = passHeads{p: p}
	err := p.finish(rd, mats)
	sc.rwork.states, sc.passHeads = nil, passHeads{}
	if err != nil {
		return err
	}
	rd = p.round(l, RoundAttn)
	p.prod(rd, &mats.OProj, MatOProj, sc.attn[:T*E], o, T)
	return p.finish(rd, mats)
}

// headStates gives a rank its heads of a RoundKDA round's sequences.
type headStates interface {
	// heads returns this rank's heads of layer l of sequence i of the
	// round (rs), zeroed first when rs is Fresh, and the record of its
	// speculation when rs is speculative (nil otherwise).
	heads(i int, rs *RoundSeq, l int) (kdaState, *specRecord, error)
}

// passHeads is rank 0's headStates: its heads (the first ones) of the
// pass's states, which are the round's sequences in order.
type passHeads struct{ p *pass }

func (h *passHeads) heads(i int, rs *RoundSeq, l int) (kdaState, *specRecord, error) {
	p := h.p
	if i >= len(p.segs) || p.segs[i].st.id != rs.ID {
		return kdaState{}, nil, fmt.Errorf("model: sequence %d of a KDA round is not the pass's", i)
	}
	c := p.c
	_, ranks := p.m.Plan.Rank()
	_, h1 := HeadRange(c, 0, ranks)
	D, hl := c.KDAHeadDim, c.ConvKernel-1
	st := p.segs[i].st
	k := &st.kda[l]
	var sp *specRecord
	if rs.Spec > 0 {
		sp = st.spec
		if !sp.ran {
			sp.begin(c, 0, h1)
		}
	}
	return kdaState{S: k.S[:h1*D*D], qh: k.qh[:h1*D*hl], kh: k.kh[:h1*D*hl], vh: k.vh[:h1*D*hl]}, sp, nil
}

// HeadStore is a worker's heads of the states of one rank 0's sequences,
// by id: what RoundKDA rounds run on, and what PutState and GetState
// exchange. It is not safe for concurrent use.
type HeadStore struct {
	c      *Config
	h0, h1 int
	states map[uint64][]kdaState
	// specs are the sequences' speculations (RoundSeq.Spec), kept per
	// sequence once it has speculated, until it is forgotten.
	specs map[uint64]*specRecord
	first int // the first KDA layer
}

// NewHeadStore returns an empty store of the heads of m's plan's rank.
func (m *Model) NewHeadStore() *HeadStore {
	rank, ranks := m.Plan.Rank()
	h0, h1 := HeadRange(m.Cfg, rank, ranks)
	first := 0
	for first < m.Cfg.Layers && m.Cfg.IsMLA(first) {
		first++
	}
	return &HeadStore{c: m.Cfg, h0: h0, h1: h1, states: map[uint64][]kdaState{}, specs: map[uint64]*specRecord{}, first: first}
}

// Len returns how many states the store holds.
func (hs *HeadStore) Len() int { return len(hs.states) }

// Bytes returns the bytes one state's heads take in the store.
func (hs *HeadStore) Bytes() int64 { return 4 * int64(headFloats(hs.c, hs.h0, hs.h1)) }

// state returns the heads of id, made (zero) if new.
func (hs *HeadStore) state(id uint64) []kdaState {
	if st, ok := hs.states[id]; ok {
		return st
	}
	c := hs.c
	n := hs.h1 - hs.h0
	D, h := c.KDAHeadDim, c.ConvKernel-1
	st := make([]kdaState, c.Layers)
	for l := range st {
		if c.IsMLA(l) {
			continue
		}
		st[l] = kdaState{S: make([]float32, n*D*D), qh: make([]float32, n*D*h), kh: make([]float32, n*D*h), vh: make([]float32, n*D*h)}
	}
	hs.states[id] = st
	return st
}

// parts lays st out as HeadParts does.
func (hs *HeadStore) parts(st []kdaState) [][]float32 {
	var out [][]float32
	for l := range st {
		if hs.c.IsMLA(l) {
			continue
		}
		k := &st[l]
		out = append(out, k.S, k.qh, k.kh, k.vh)
	}
	return out
}

// Put replaces parts [from, ...) of the heads of id (HeadParts' order)
// with data, the parts end to end, making the state (zero) if new; data
// must end at a part's end.
func (hs *HeadStore) Put(id uint64, from int, data []float32) error {
	parts := hs.parts(hs.state(id))
	if from < 0 || from > len(parts) {
		return fmt.Errorf("model: a state's parts from %d of %d", from, len(parts))
	}
	n := len(data)
	for _, part := range parts[from:] {
		if len(data) == 0 {
			break
		}
		if len(data) < len(part) {
			return fmt.Errorf("model: %d floats of a state end inside part of %d floats for heads [%d, %d)", n, len(part), hs.h0, hs.h1)
		}
		data = data[copy(part, data):]
	}
	if len(data) != 0 {
		return fmt.Errorf("model: %d floats of a state from part %d, beyond the %d parts of heads [%d, %d)", n, from, len(parts), hs.h0, hs.h1)
	}
	return nil
}

// Get returns the heads of id as HeadParts lays them out (aliasing the
// store), or an error if the store has none.
func (hs *HeadStore) Get(id uint64) ([][]float32, error) {
	st, ok := hs.states[id]
	if !ok {
		return nil, fmt.Errorf("model: no state %d here (the rank restarted since it was made?)", id)
	}
	return hs.parts(st), nil
}

// Make returns the heads of id as HeadParts lays them out (aliasing the
// store), made (zero) if new: for a restore to fill.
func (hs *HeadStore) Make(id uint64) [][]float32 { return hs.parts(hs.state(id)) }

// Forget drops the heads of id.
func (hs *HeadStore) Forget(id uint64) {
	delete(hs.states, id)
	delete(hs.specs, id)
}

func (hs *HeadStore) heads(_ int, rs *RoundSeq, l int) (kdaState, *specRecord, error) {
	st, ok := hs.states[rs.ID]
	switch {
	case rs.Fresh:
		st = hs.state(rs.ID)
		for j := range st {
			k := &st[j]
			clear(k.S)
			clear(k.qh)
			clear(k.kh)
			clear(k.vh)
		}
	case !ok:
		return kdaState{}, nil, fmt.Errorf("model: no state %d here (the rank restarted since it was made?)", rs.ID)
	}
	if rs.Spec == 0 {
		return st[l], nil, nil
	}
	sp := hs.specs[rs.ID]
	if sp == nil {
		sp = &specRecord{}
		hs.specs[rs.ID] = sp
	}
	if rs.At == 0 && l == hs.first {
		// The speculation's first rows reach its first KDA layer: it
		// begins (each layer's copy is taken as its round comes).
		sp.active, sp.ran, sp.p0, sp.rows, sp.done = true, false, 0, rs.Spec, 0
		sp.begin(hs.c, hs.h0, hs.h1)
	}
	if !sp.active || sp.rows != rs.Spec {
		return kdaState{}, nil, fmt.Errorf("model: rows [%d, %d) of a speculation over state %d that did not begin here", rs.At, rs.At+rs.N, rs.ID)
	}
	sp.done = max(sp.done, rs.At+rs.N)
	return st[l], sp, nil
}

// Rollback keeps the first keep rows of the speculation over state id
// that the last rounds recorded, rolling this rank's heads back to them.
func (s *Server) Rollback(id uint64, keep int) error {
	hs := s.heads
	sp, st := hs.specs[id], hs.states[id]
	if sp == nil || !sp.active || st == nil {
		return fmt.Errorf("model: a rollback of state %d, which is not speculating here", id)
	}
	if keep < 0 || keep > sp.done {
		return fmt.Errorf("model: a rollback of state %d to %d of the %d rows recorded", id, keep, sp.done)
	}
	sp.active = false
	for l := range st {
		if !hs.c.IsMLA(l) {
			sp.replay(s.m, l, keep, st[l])
		}
	}
	return nil
}

// kdaHeads computes this rank's heads of a RoundKDA round into out[0]
// (N rows × its heads' channels): the same functions in the same order as
// one process's kda, per head, so every head's output is the same bits.
func (m *Model) kdaHeads(rd *Round, mats *LayerMats, w *RoundWork, out [][]float32) error {
	c := m.Cfg
	l := rd.Layer
	if l < 0 || l >= c.Layers || c.IsMLA(l) {
		return fmt.Errorf("model: a KDA round of layer %d, which is not a KDA layer", l)
	}
	E, P, D, kc := c.Hidden, c.KDAWidth(), c.KDAHeadDim, c.ConvKernel
	if len(rd.Products) != 1 || len(rd.Inputs) != 1 {
		return fmt.Errorf("model: a KDA round of %d products and %d inputs", len(rd.Products), len(rd.Inputs))
	}
	pr := &rd.Products[0]
	if pr.Rows != P || pr.Unit != D || pr.In != 0 || pr.Pick != nil {
		return fmt.Errorf("model: a KDA round's output of %d rows in units of %d, want %d in units of %d", pr.Rows, pr.Unit, P, D)
	}
	T := pr.N
	xn := rd.Inputs[0]
	if len(xn) < T*E {
		return fmt.Errorf("model: a KDA round of %d rows with %d input floats", T, len(xn))
	}
	next := 0
	for i := range rd.Seqs {
		rs := &rd.Seqs[i]
		if rs.Lo != next || rs.N <= 0 || rs.Lo+rs.N > T {
			return fmt.Errorf("model: sequence %d of a KDA round has rows [%d, %d) after row %d of %d", i, rs.Lo, rs.Lo+rs.N, next, T)
		}
		next = rs.Lo + rs.N
	}
	if next != T {
		return fmt.Errorf("model: a KDA round's sequences hold %d of its %d rows", next, T)
	}
	rank, ranks := m.Plan.Rank()
	h0, h1 := HeadRange(c, rank, ranks)
	nh := h1 - h0
	W := nh * D
	dst := out[0]
	if nh == 0 || T == 0 {
		return nil
	}
	if w.states == nil {
		return fmt.Errorf("model: a KDA round with no states to run on")
	}
	for _, x := range []struct {
		lin  *Linear
		rows int
		name string
	}{{&mats.QProj, W, "q"}, {&mats.KProj, W, "k"}, {&mats.VProj, W, "v"}, {&mats.GProj, W, "g"},
		{&mats.BProj, nh, "b"}, {&mats.FAProj, D, "f_a"}, {&mats.FBProj, W, "f_b"}} {
		if x.lin.Rows() != x.rows {
			return fmt.Errorf("model: layer %d: this rank holds %d rows of %s_proj, its heads [%d, %d) need %d", l, x.lin.Rows(), x.name, h0, h1, x.rows)
		}
	}
	need := T * (5*W + 2*nh + D)
	if cap(w.kda) < need {
		w.kda = make([]float32, need, need+need/4)
	}
	buf := w.kda[:need]
	take := func(n int) []float32 { s := buf[:n:n]; buf = buf[n:]; return s }
	q, k, v, g, z := take(T*W), take(T*W), take(T*W), take(T*W), take(T*W)
	bl, beta, fa := take(T*nh), take(T*nh), take(T*D)
	pool := m.pool
	mats.QProj.MatMul(pool, q, xn, T)
	mats.KProj.MatMul(pool, k, xn, T)
	mats.VProj.MatMul(pool, v, xn, T)
	mats.GProj.MatMul(pool, g, xn, T)
	mats.BProj.MatMul(pool, bl, xn, T)
	mats.FAProj.MatMul(pool, fa, xn, T)
	mats.FBProj.MatMul(pool, z, fa, T)

	vec := &m.Plan.vecs[l]
	w.kst = w.kst[:0]
	for i := range rd.Seqs {
		rs := &rd.Seqs[i]
		st, sp, err := w.states.heads(i, rs, l)
		if err != nil {
			return err
		}
		if len(st.S) != nh*D*D || len(st.qh) != W*(kc-1) {
			return fmt.Errorf("model: layer %d: a state of %d floats for heads [%d, %d)", l, len(st.S), h0, h1)
		}
		if sp != nil {
			if sp.h0 != h0 || sp.h1 != h1 || rs.At+rs.N > sp.rows {
				return fmt.Errorf("model: layer %d: rows [%d, %d) of a speculation of %d rows over heads [%d, %d), recorded for [%d, %d)", l, rs.At, rs.At+rs.N, sp.rows, h0, h1, sp.h0, sp.h1)
			}
			r0 := rs.Lo
			sp.take(c, l, rs.At, rs.N, st, q[r0*W:], k[r0*W:], v[r0*W:], z[r0*W:], bl[r0*nh:])
		}
		w.kst = append(w.kst, st)
	}
	qConv, kConv, vConv := vec.QConv[h0*D*kc:h1*D*kc], vec.KConv[h0*D*kc:h1*D*kc], vec.VConv[h0*D*kc:h1*D*kc]
	for i := range rd.Seqs {
		rs, st := &rd.Seqs[i], &w.kst[i]
		for t := rs.Lo; t < rs.Lo+rs.N; t++ {
			qt, kt, vt := q[t*W:(t+1)*W], k[t*W:(t+1)*W], v[t*W:(t+1)*W]
			shortConv(qt, qt, qConv, st.qh, kc)
			shortConv(kt, kt, kConv, st.kh, kc)
			shortConv(vt, vt, vConv, st.vh, kc)
		}
	}
	qScale := float32(1 / math.Sqrt(float64(D)))
	for t := 0; t < T; t++ {
		prepHeads(q[t*W:(t+1)*W], k[t*W:(t+1)*W], z[t*W:(t+1)*W], h0, nh, D, qScale, vec, c.GateLowerBound)
		for j := 0; j < nh; j++ {
			beta[t*nh+j] = sigmoid(bl[t*nh+j])
		}
	}
	o := dst[:T*W]
	w.hjob = headJob{w: w, seqs: rd.Seqs, nh: nh, D: D, q: q, k: k, v: v, alpha: z, beta: beta, o: o}
	pool.Run(len(rd.Seqs)*nh, 1, &w.hjob)
	w.hjob = headJob{}
	normGate(o, g, T, nh, D, vec.ONorm, c.RMSNormEps)
	return nil
}

// headJob runs the recurrence of a KDA round, one (sequence, head) per
// index: index i is head i mod nh of sequence i / nh, on its state in
// w.kst.
type headJob struct {
	w                 *RoundWork
	seqs              []RoundSeq
	nh, D             int
	q, k, v, alpha, o []float32
	beta              []float32
}

func (j *headJob) Range(lo, hi int) {
	D, nh := j.D, j.nh
	W := nh * D
	for i := lo; i < hi; i++ {
		rs, h := &j.seqs[i/nh], i%nh
		S := j.w.kst[i/nh].S[h*D*D : (h+1)*D*D]
		for t := rs.Lo; t < rs.Lo+rs.N; t++ {
			base := t*W + h*D
			kdaStep(S, j.q[base:base+D], j.k[base:base+D], j.v[base:base+D], j.alpha[base:base+D], j.beta[t*nh+h], j.o[base:base+D])
		}
	}
}
