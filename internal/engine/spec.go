package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/k3go/k3/internal/engine/draft"
	"github.com/k3go/k3/internal/engine/specpolicy"
	"github.com/k3go/k3/model"
)

// Speculative decoding. Before each decoding step of a generation that
// speculates, the sequence's drafter proposes tokens (the longest earlier
// match of the sequence's suffix in itself or in the process's index of
// recent outputs, or the caller's Drafter) with the chance that each is
// accepted (specpolicy.Seq); the step offers them to the batcher with its
// pending token, and the batcher's policy grants each offering sequence of
// the pass the drafts that make the pass yield the most tokens per second
// (specpass.go), zero included, lending a rollback buffer to those it
// grants any. The pass computes the pending token and the granted drafts
// as rows; the tokens are picked row by row with the generation's own
// sampler while they equal the drafts, and the state keeps the rows up to
// the last emitted token's predecessor, exactly as plain decoding would
// leave it.

// speculator is one generation's speculation: auto (the policy sizes the
// drafts) or a fixed draft length (every draft verified), the most drafts
// per step, and the caller's drafter (nil: the built-in one).
type speculator struct {
	auto    bool
	max     int
	drafter Drafter
}

// newSpeculator checks opts' speculation against what the engine reserved
// and returns the generation's speculator (nil: plain decoding).
func (s *Seq) newSpeculator(opts GenOptions) (*speculator, error) {
	e := s.e
	switch {
	case opts.Speculate == 0:
		return nil, nil
	case opts.Speculate < 0 && opts.Speculate != SpeculateAuto:
		return nil, fmt.Errorf("k3: Generate: %w: Speculate %d is negative", ErrBadOptions, opts.Speculate)
	case opts.FullRecompute && opts.Speculate > 0:
		return nil, fmt.Errorf("k3: Generate: %w: Speculate needs incremental decoding", ErrBadOptions)
	case opts.FullRecompute:
		return nil, nil
	}
	sp := &speculator{auto: opts.Speculate == SpeculateAuto, max: opts.Speculate, drafter: opts.Drafter}
	if sp.auto {
		sp.max = AutoDraft
	}
	if e.specMax >= 0 { // under a budget: what it reserved
		switch {
		case sp.auto && e.specMax == 0:
			return nil, nil // auto speculates where it can: here it cannot
		case sp.max > e.specMax && !sp.auto:
			return nil, fmt.Errorf("k3: Generate: %w: Speculate %d exceeds Options.Speculate %d, the drafts the RAM budget reserves room for", ErrBadOptions, opts.Speculate, e.specMax)
		}
		sp.max = min(sp.max, e.specMax)
	}
	sp.max = min(sp.max, specpolicy.MaxDraft)
	return sp, nil
}

// speculate runs one decoding step with drafts, if the drafter has any:
// the pending token and the drafts go to the batcher, which verifies as
// many as its policy grants (perhaps none); the tokens are picked row by
// row while they equal the drafts, every pick emitted; the state keeps the
// rows up to the last emitted token's predecessor, which is pending
// afterwards, exactly as plain decoding leaves it. ran is false when no
// step ran (no draft); goOn is emit's verdict.
func (s *Seq) speculate(ctx context.Context, sp *speculator, pick func([]float32) (int, error), emit func(int, []float32) bool) (ran, goOn bool, err error) {
	e := s.e
	s.specSeq = append(append(s.specSeq[:0], s.tokens...), s.pending...)
	var x *draft.Index
	if sp.drafter == nil {
		x = e.draftIndex()
	}
	drafts, surv := s.sq.Propose(s.specSeq, sp.max, x, sp.drafter, &e.specShared)
	if room := e.opts.MaxContext - s.Len() - 1; len(drafts) > room {
		drafts = drafts[:max(room, 0)]
	}
	if len(drafts) == 0 {
		return false, true, nil
	}
	V := e.m.Cfg.Vocab
	for _, id := range drafts {
		if id < 0 || id >= V {
			return false, true, fmt.Errorf("k3: %w: drafter proposed token %d outside [0, %d)", model.ErrTokenOutOfRange, id, V)
		}
	}
	rows := 1 + len(drafts)
	if cap(s.specOut) < rows*V {
		s.specOut = make([]float32, rows*V)
	}
	out := s.specOut[:rows*V]
	r := &s.req
	r.spec = specStep{on: true, surv: surv[:len(drafts)], force: !sp.auto}
	err = s.forward(ctx, drafts, out, true)
	granted, buf := r.spec.granted, r.spec.buf
	r.spec = specStep{}
	if err != nil {
		// The pass failed, or the step left before it: the state is broken
		// or untouched; end the speculation and give the buffer back.
		if buf != nil {
			if s.st != nil {
				s.st.EndSpeculation()
			}
			e.b.spec.pool.put(buf)
		}
		return true, false, err
	}
	// The pass fed the pending token and the granted drafts; pick row by
	// row.
	emitted, accepted := 0, 0
	goOn = true
	for j := 0; j <= granted && goOn; j++ {
		row := out[j*V : (j+1)*V]
		id, perr := pick(row) // a constraint masks row j from the state the emitted rows left
		if perr != nil {
			err, goOn = perr, false
			break
		}
		emitted++
		goOn = emit(id, row) // sets s.pending to id
		if j < granted && id == drafts[j] {
			accepted++
			continue
		}
		break
	}
	s.sq.Verified(granted, accepted)
	if buf == nil {
		// Nothing was drafted: a plain step (forward kept the pending
		// token, and emit set the new one).
		return true, goOn, err
	}
	// Keep the rows before the last emitted token (it is pending).
	start := time.Now()
	keep := emitted
	last := s.pending[0]
	rerr := e.m.Rollback(s.st, keep)
	e.b.spec.specNanos.Add(int64(time.Since(start)))
	e.b.spec.specCount.Add(1)
	e.b.spec.pool.put(buf)
	if rerr != nil {
		s.broken = true
		return true, false, fmt.Errorf("k3: %w", rerr)
	}
	s.tokens = s.tokens[:len(s.tokens)-(1+granted)+keep]
	s.pending = append(s.pending[:0], last)
	s.specDrafted += int64(granted)
	s.specAccepted += int64(accepted)
	e.specRows.Add(int64(1 + granted))
	e.specAccepted.Add(int64(accepted))
	e.specPasses.Add(1)
	return true, goOn, err
}

// noteOutput ends a speculating generation of n tokens: its output (with
// IndexLead tokens of the context before it) goes into the process's
// index of recent outputs, and what its drafts taught into the server's
// acceptance record.
func (s *Seq) noteOutput(sp *speculator, n int) {
	e := s.e
	s.sq.Flush(&e.specShared)
	if sp.drafter != nil || n <= 0 {
		return
	}
	s.specSeq = append(append(s.specSeq[:0], s.tokens...), s.pending...)
	end := len(s.specSeq)
	from := max(end-n, 0)
	e.draftIndex().Add(s.specSeq[max(from-IndexLead, 0):from], s.specSeq[from:end])
}

// draftIndex returns the process's index of recent outputs, made on first
// use (the plan counts it when it reserves speculation).
func (e *Engine) draftIndex() *draft.Index {
	e.indexOnce.Do(func() { e.index = draft.NewIndex(SharedIndexTokens) })
	return e.index
}
