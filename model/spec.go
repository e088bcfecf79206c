package model

import (
	"context"
	"fmt"
	"math"
)

// Speculative decoding verifies drafted tokens as rows of one pass and
// keeps only the rows up to the first rejected draft. The MLA cache is
// append-only and is cut back; the KDA state and the short-conv histories
// are recurrent, so the state keeps a copy of them from before the pass and
// the pass records every row's inputs to the recurrence (the q, k, v
// projections before their convolutions, the decay and β projections).
// Rolling back restores the copy and replays the recurrence over the kept
// rows only: no weight is read again, and the replay runs the same
// functions in the same order as the pass, so the state is bit for bit the
// one a pass over the kept rows alone would leave.
//
// Cost per speculating step, measured at the released widths (0.46 GB of
// KDA state and conv histories; BenchmarkSpeculationState, 2-core Xeon):
// the copy before the pass, 84 ms, every step; on a rejection the copy
// back and the kept rows' recurrence, 248 / 353 / 574 ms keeping 1 / 2 / 4
// rows. Per-row snapshots, the alternative, copy the state once per row of
// the pass (5 × 84 ms at 4 drafts) on every step, accepted or not, and
// hold k+1 copies instead of one. Against a pass that streams the trunk
// (tens of seconds at an 8 GB budget) either is small; record and replay
// costs less memory and less time when drafts are accepted.

// specRecord is a State's speculation bookkeeping, kept between uses; in
// a cluster it covers the heads the rank holds ([h0, h1); every head in
// one process), and a worker keeps one per sequence (HeadStore).
type specRecord struct {
	active bool
	ran    bool // the pass has recorded rows (and taken the copy)
	p0     int  // position before the pass
	rows   int  // rows it may record
	done   int  // rows recorded (a worker's: rank 0 counts its own)
	h0, h1 int  // the heads covered
	// Per KDA layer: the heads before the pass, taken as the pass reaches
	// the layer (nothing changes a layer's state before that), and per row
	// the recurrence inputs [rows][4W + nh] (q, k, v before the
	// convolutions, z, β logits; W = nh·D, nh = h1−h0).
	snap []kdaState
	rec  [][]float32
	out  []float32 // [nh][D] replay outputs, discarded
	job  replayJob
}

// SpecBuffer is the room one speculative pass needs: a copy of a State's
// KDA state and conv histories, and the record of the pass's rows. A State
// holds one from BeginSpeculationIn until Rollback or EndSpeculation (or
// Reset, Extend) and then lets it go, so that a few buffers serve many
// states, one pass at a time. Its memory is allocated on first use, for
// the config, rows and heads of that use, and kept.
type SpecBuffer struct {
	rec specRecord
}

// BeginSpeculationIn is BeginSpeculation with b's memory instead of the
// state's own; the state gives b back when the speculation ends.
func (s *State) BeginSpeculationIn(b *SpecBuffer, rows int) {
	s.spec, s.lent = &b.rec, true
	s.BeginSpeculation(rows)
}

// endSpec ends a speculation and lets a lent buffer go.
func (s *State) endSpec() {
	if s.spec != nil {
		s.spec.active = false
	}
	if s.lent {
		s.spec, s.lent = nil, false
	}
}

// BeginSpeculation prepares the state for a pass of up to rows rows of
// which only a prefix may be kept: the pass copies the KDA state and conv
// histories of each layer as it reaches it and records the rows'
// recurrence inputs. The next forward pass over this state must carry at
// most rows rows; then call Rollback (or EndSpeculation to keep them
// all). The first use allocates about StateBytes' fixed bytes plus
// rows·(4·KDAWidth+KDAHeads)·4 bytes per KDA layer (in a cluster, the
// share of the heads rank 0 holds); later uses reuse them.
func (s *State) BeginSpeculation(rows int) {
	sp := s.spec
	if sp == nil {
		sp = &specRecord{}
		s.spec = sp
	}
	sp.active, sp.ran, sp.p0, sp.rows = true, false, s.pos, rows
}

// begin readies sp for a pass over heads [h0, h1) of c's KDA layers,
// allocating what it lacks.
func (sp *specRecord) begin(c *Config, h0, h1 int) {
	nh := h1 - h0
	W := nh * c.KDAHeadDim
	if len(sp.snap) != c.Layers {
		sp.snap, sp.rec = make([]kdaState, c.Layers), make([][]float32, c.Layers)
	}
	if cap(sp.out) < W {
		sp.out = make([]float32, W)
	}
	sp.out = sp.out[:W]
	for l := range sp.rec {
		if c.IsMLA(l) {
			continue
		}
		if n := sp.rows * (4*W + nh); cap(sp.rec[l]) < n {
			sp.rec[l] = make([]float32, n)
		} else {
			sp.rec[l] = sp.rec[l][:n]
		}
	}
	sp.h0, sp.h1, sp.ran = h0, h1, true
}

// take records rows [at, at+n) of the speculation for KDA layer l over
// the record's heads, whose state before the pass is st (copied first
// when at is 0, the pass's first rows of the sequence): q, k, v and z
// hold the rows' projections (W wide, the record's heads) before the
// convolutions and the decay, bl their β logits (nh wide).
func (sp *specRecord) take(c *Config, l, at, n int, st kdaState, q, k, v, z, bl []float32) {
	if at == 0 {
		sn := &sp.snap[l]
		sn.S = append(sn.S[:0], st.S...)
		sn.qh = append(sn.qh[:0], st.qh...)
		sn.kh = append(sn.kh[:0], st.kh...)
		sn.vh = append(sn.vh[:0], st.vh...)
	}
	nh := sp.h1 - sp.h0
	W := nh * c.KDAHeadDim
	w := 4*W + nh
	if at+n > sp.rows {
		panic(fmt.Sprintf("model: speculative pass over more rows than BeginSpeculation(%d) allowed", sp.rows))
	}
	for t := 0; t < n; t++ {
		r := sp.rec[l][(at+t)*w : (at+t+1)*w]
		copy(r[0:W], q[t*W:(t+1)*W])
		copy(r[W:2*W], k[t*W:(t+1)*W])
		copy(r[2*W:3*W], v[t*W:(t+1)*W])
		copy(r[3*W:4*W], z[t*W:(t+1)*W])
		copy(r[4*W:], bl[t*nh:(t+1)*nh])
	}
}

// EndSpeculation keeps every row of the speculative pass.
func (s *State) EndSpeculation() { s.endSpec() }

// Rollback keeps the first keep rows of the speculative pass begun with
// BeginSpeculation and forgets the rest: the MLA caches are cut back, the
// KDA state and conv histories restored and advanced over the kept rows by
// replaying the recorded recurrence, on every rank for its heads in a
// cluster. It reads no weights.
func (m *Model) Rollback(s *State, keep int) error {
	sp := s.spec
	if sp == nil || !sp.active {
		return fmt.Errorf("model: Rollback without BeginSpeculation")
	}
	done := s.pos - sp.p0
	if keep < 0 || keep > done {
		return fmt.Errorf("model: Rollback keeps %d of the %d rows of the pass", keep, done)
	}
	defer s.endSpec()
	sp.active = false
	if keep == done {
		return nil
	}
	if !sp.ran {
		return fmt.Errorf("model: Rollback of a speculation whose pass did not run")
	}
	c := m.Cfg
	ckv, r := c.KVLoraRank, c.QKRopeDim
	pos := sp.p0 + keep
	for l := range s.mla {
		if c.IsMLA(l) {
			ml := &s.mla[l]
			ml.lat, ml.kr = ml.lat[:pos*ckv], ml.kr[:pos*r]
		}
	}
	if s.away {
		// The other ranks roll their heads back as rank 0 does its own.
		sr := m.ranks.(StateRanks)
		for rk := 1; rk < sr.Size(); rk++ {
			if err := sr.RollbackState(context.Background(), rk, s.id, keep); err != nil {
				return fmt.Errorf("rolling back the state's KDA heads: %w", err)
			}
		}
	}
	D, hl := c.KDAHeadDim, c.ConvKernel-1
	for l := range s.kda {
		if c.IsMLA(l) {
			continue
		}
		k := &s.kda[l]
		st := kdaState{S: k.S[sp.h0*D*D : sp.h1*D*D], qh: k.qh[sp.h0*D*hl : sp.h1*D*hl], kh: k.kh[sp.h0*D*hl : sp.h1*D*hl], vh: k.vh[sp.h0*D*hl : sp.h1*D*hl]}
		sp.replay(m, l, keep, st)
	}
	s.pos = pos
	return nil
}

// replay restores layer l's heads st (the record's) to their copy and
// advances them over the first keep recorded rows: the pass's functions
// in the pass's order (the three convolutions row by row, then per row
// and head the norms, β and the decay, then the recurrence, heads in
// parallel and rows in order), so that every head ends bit for bit as a
// pass over the kept rows alone would leave it.
func (sp *specRecord) replay(m *Model, l, keep int, st kdaState) {
	c := m.Cfg
	D, kc := c.KDAHeadDim, c.ConvKernel
	h0, h1 := sp.h0, sp.h1
	nh := h1 - h0
	W := nh * D
	w := 4*W + nh
	sn := &sp.snap[l]
	copy(st.S, sn.S)
	copy(st.qh, sn.qh)
	copy(st.kh, sn.kh)
	copy(st.vh, sn.vh)
	vec := &m.Plan.vecs[l]
	qConv, kConv, vConv := vec.QConv[h0*D*kc:h1*D*kc], vec.KConv[h0*D*kc:h1*D*kc], vec.VConv[h0*D*kc:h1*D*kc]
	qScale := float32(1 / math.Sqrt(float64(D)))
	for t := 0; t < keep; t++ {
		rec := sp.rec[l][t*w : (t+1)*w]
		q, k, v, z := rec[0:W], rec[W:2*W], rec[2*W:3*W], rec[3*W:4*W]
		shortConv(q, q, qConv, st.qh, kc)
		shortConv(k, k, kConv, st.kh, kc)
		shortConv(v, v, vConv, st.vh, kc)
		prepHeads(q, k, z, h0, nh, D, qScale, vec, c.GateLowerBound)
	}
	sp.job = replayJob{sp: sp, st: st, l: l, keep: keep, D: D}
	if m.pool != nil {
		m.pool.Run(nh, 1, &sp.job)
	} else {
		sp.job.Range(0, nh)
	}
	sp.job = replayJob{}
}

// replayJob replays the recurrence of layer l over the kept rows, one of
// the record's heads per index; each head has its own output buffer.
type replayJob struct {
	sp         *specRecord
	st         kdaState
	l, keep, D int
}

func (j *replayJob) Range(lo, hi int) {
	D := j.D
	nh := j.sp.h1 - j.sp.h0
	W := nh * D
	w := 4*W + nh
	for h := lo; h < hi; h++ {
		out := j.sp.out[h*D : (h+1)*D]
		S := j.st.S[h*D*D : (h+1)*D*D]
		for t := 0; t < j.keep; t++ {
			rec := j.sp.rec[j.l][t*w : (t+1)*w]
			kdaStep(S, rec[h*D:(h+1)*D], rec[W+h*D:W+(h+1)*D], rec[2*W+h*D:2*W+(h+1)*D], rec[3*W+h*D:3*W+(h+1)*D],
				sigmoid(rec[4*W+h]), out)
		}
	}
}
