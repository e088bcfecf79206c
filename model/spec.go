package model

import (
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

// specRecord is a State's speculation bookkeeping, kept between uses.
type specRecord struct {
	active  bool
	pending bool // the copy is not taken yet (the state was away)
	p0      int  // position before the pass
	rows    int  // rows it may record
	// Per KDA layer: the state before the pass, and per row the recurrence
	// inputs [rows][4P + Hk] (q, k, v before the convolutions, z, β logits).
	snap []kdaState
	rec  [][]float32
	out  []float32 // [Hk][D] replay outputs, discarded
	job  replayJob
}

// SpecBuffer is the room one speculative pass needs: a copy of a State's
// KDA state and conv histories, and the record of the pass's rows. A State
// holds one from BeginSpeculationIn until Rollback or EndSpeculation (or
// Reset, Extend) and then lets it go, so that a few buffers serve many
// states, one pass at a time. Its memory is allocated on first use, for
// the config and rows of that use, and kept.
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
// which only a prefix may be kept: it copies the KDA state and conv
// histories and makes room to record the pass's recurrence inputs. The next
// forward pass over this state must carry at most rows rows; then call
// Rollback (or EndSpeculation to keep them all). The first call allocates
// about StateBytes' fixed bytes plus rows·(4·KDAWidth+KDAHeads)·4 bytes per
// KDA layer; later calls reuse them.
func (s *State) BeginSpeculation(rows int) {
	c := s.cfg
	sp := s.spec
	if sp == nil {
		sp = &specRecord{}
		s.spec = sp
	}
	if len(sp.snap) != c.Layers {
		sp.snap, sp.rec, sp.out = make([]kdaState, c.Layers), make([][]float32, c.Layers), make([]float32, c.KDAHeads*c.KDAHeadDim)
	}
	P, Hk := c.KDAWidth(), c.KDAHeads
	for l := range s.kda {
		if c.IsMLA(l) {
			continue
		}
		if n := rows * (4*P + Hk); cap(sp.rec[l]) < n {
			sp.rec[l] = make([]float32, n)
		} else {
			sp.rec[l] = sp.rec[l][:n]
		}
	}
	sp.active, sp.p0, sp.rows = true, s.pos, rows
	sp.pending = true
	if !s.away {
		s.snapshot()
	}
	// Else the pass brings the state home and takes the copy then.
}

// snapshot copies the KDA state and conv histories for a speculation.
func (s *State) snapshot() {
	sp := s.spec
	for l := range s.kda {
		if s.cfg.IsMLA(l) {
			continue
		}
		k, sn := &s.kda[l], &sp.snap[l]
		sn.S = append(sn.S[:0], k.S...)
		sn.qh = append(sn.qh[:0], k.qh...)
		sn.kh = append(sn.kh[:0], k.kh...)
		sn.vh = append(sn.vh[:0], k.vh...)
	}
	sp.pending = false
}

// EndSpeculation keeps every row of the speculative pass.
func (s *State) EndSpeculation() { s.endSpec() }

// record stores the recurrence inputs of rows [lo, lo+n) of the pass, which
// are this state's rows from position p0 on, for KDA layer l.
func (sp *specRecord) record(c *Config, l int, sg *segment, q, k, v, z, bl []float32) {
	P, Hk := c.KDAWidth(), c.KDAHeads
	w := 4*P + Hk
	for t := 0; t < sg.n; t++ {
		i := sg.p0 - sp.p0 + t
		if i >= sp.rows {
			panic(fmt.Sprintf("model: speculative pass over more rows than BeginSpeculation(%d) allowed", sp.rows))
		}
		r := sp.rec[l][i*w : (i+1)*w]
		row := sg.lo + t
		copy(r[0:P], q[row*P:(row+1)*P])
		copy(r[P:2*P], k[row*P:(row+1)*P])
		copy(r[2*P:3*P], v[row*P:(row+1)*P])
		copy(r[3*P:4*P], z[row*P:(row+1)*P])
		copy(r[4*P:], bl[row*Hk:(row+1)*Hk])
	}
}

// Rollback keeps the first keep rows of the speculative pass begun with
// BeginSpeculation and forgets the rest: the MLA caches are cut back, the
// KDA state and conv histories restored and advanced over the kept rows by
// replaying the recorded recurrence. It reads no weights.
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
	if sp.pending {
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
	P, D, Hk, kc := c.KDAWidth(), c.KDAHeadDim, c.KDAHeads, c.ConvKernel
	w := 4*P + Hk
	qScale := float32(1 / math.Sqrt(float64(D)))
	for l := range s.kda {
		if c.IsMLA(l) {
			continue
		}
		st, sn := &s.kda[l], &sp.snap[l]
		copy(st.S, sn.S)
		copy(st.qh, sn.qh)
		copy(st.kh, sn.kh)
		copy(st.vh, sn.vh)
		vec := &m.Plan.vecs[l]
		// The pass's order: the three convolutions row by row, then per
		// row and head the norms, β and the decay, then the recurrence
		// (heads in parallel, rows in order).
		for t := 0; t < keep; t++ {
			rec := sp.rec[l][t*w : (t+1)*w]
			q, k, v, z := rec[0:P], rec[P:2*P], rec[2*P:3*P], rec[3*P:4*P]
			shortConv(q, q, vec.QConv, st.qh, kc)
			shortConv(k, k, vec.KConv, st.kh, kc)
			shortConv(v, v, vec.VConv, st.vh, kc)
			for h := 0; h < Hk; h++ {
				qh := q[h*D : (h+1)*D]
				l2Norm(qh)
				for i := range qh {
					qh[i] *= qScale
				}
				l2Norm(k[h*D : (h+1)*D])
				zh := z[h*D : (h+1)*D]
				kdaDecay(zh, zh, zh, vec.DTBias[h*D:(h+1)*D], vec.ALog[h], c.GateLowerBound)
			}
		}
		sp.job = replayJob{sp: sp, st: st, l: l, keep: keep, c: c}
		if m.pool != nil {
			m.pool.Run(Hk, 1, &sp.job)
		} else {
			sp.job.Range(0, Hk)
		}
		sp.job = replayJob{}
	}
	s.pos = pos
	return nil
}

// replayJob replays the recurrence of layer l over the kept rows, one head
// per index; each head has its own output buffer in the record.
type replayJob struct {
	sp      *specRecord
	st      *kdaState
	c       *Config
	l, keep int
}

func (j *replayJob) Range(lo, hi int) {
	P, D, Hk := j.c.KDAWidth(), j.c.KDAHeadDim, j.c.KDAHeads
	w := 4*P + Hk
	for h := lo; h < hi; h++ {
		out := j.sp.out[h*D : (h+1)*D]
		S := j.st.S[h*D*D : (h+1)*D*D]
		for t := 0; t < j.keep; t++ {
			rec := j.sp.rec[j.l][t*w : (t+1)*w]
			kdaStep(S, rec[h*D:(h+1)*D], rec[P+h*D:P+(h+1)*D], rec[2*P+h*D:2*P+(h+1)*D], rec[3*P+h*D:3*P+(h+1)*D],
				sigmoid(rec[4*P+h]), out)
		}
	}
}
