package engine

import (
	"context"
	"fmt"

	"github.com/k3go/k3/model"
)

// speculator is one generation's drafting state: the drafter, the current
// draft length and how the last drafts fared.
type speculator struct {
	drafter  Drafter
	max, k   int
	fails    int // consecutive steps with no draft accepted
	cooldown int // plain steps left before drafting again
	draft    []int
	seq      []int
}

func newSpeculator(opts GenOptions) *speculator {
	if opts.Speculate <= 0 {
		return nil
	}
	d := opts.Drafter
	if d == nil {
		d = ngram{}
	}
	return &speculator{drafter: d, max: opts.Speculate, k: opts.Speculate}
}

// adapt sets the next draft length from how many of n drafts were
// accepted: all of them doubles it (up to the maximum), fewer sets it to
// one more than were accepted, and three steps in a row with none accepted
// stop drafting for 16 steps, so that failing drafts cost little.
func (sp *speculator) adapt(accepted, n int) {
	switch {
	case accepted == n:
		sp.k = min(2*sp.k, sp.max)
		sp.fails = 0
	case accepted == 0:
		sp.k = 1
		if sp.fails++; sp.fails >= 3 {
			sp.fails, sp.cooldown = 0, 16
		}
	default:
		sp.k = min(accepted+1, sp.max)
		sp.fails = 0
	}
}

// speculate runs one speculative step if the drafter has a draft: the
// pending token and the drafts are rows of one pass; the tokens are picked
// row by row while they equal the drafts, every pick emitted; the state
// keeps the rows up to the last emitted token's predecessor, which is
// pending afterwards, exactly as plain decoding leaves it. ran is false
// when no pass ran (no draft); goOn is emit's verdict.
func (s *Seq) speculate(ctx context.Context, sp *speculator, pick func([]float32) (int, error), emit func(int, []float32) bool) (ran, goOn bool, err error) {
	if sp.cooldown > 0 {
		sp.cooldown--
		return false, true, nil
	}
	sp.seq = append(append(sp.seq[:0], s.tokens...), s.pending...)
	sp.draft = sp.drafter.Draft(sp.seq, sp.k, sp.draft[:0])
	draft := sp.draft
	if len(draft) > sp.k {
		draft = draft[:sp.k]
	}
	if len(draft) == 0 {
		return false, true, nil
	}
	V := s.e.m.Cfg.Vocab
	if room := s.e.opts.MaxContext - s.Len() - 1; len(draft) > room {
		if draft = draft[:max(room, 0)]; len(draft) == 0 {
			return false, true, nil
		}
	}
	for _, id := range draft {
		if id < 0 || id >= V {
			return false, true, fmt.Errorf("k3: %w: drafter proposed token %d outside [0, %d)", model.ErrTokenOutOfRange, id, V)
		}
	}
	rows := 1 + len(draft)
	if cap(s.specOut) < rows*V {
		s.specOut = make([]float32, rows*V)
	}
	out := s.specOut[:rows*V]
	start := len(s.tokens)
	pending := s.pending[0]
	s.specRows = rows
	err = s.forward(ctx, draft, out, true)
	s.specRows = 0
	if err != nil {
		// A step that left between passes kept the rows it fed: drafts
		// nobody checked. Take them all back; the pending token stays.
		switch {
		case s.st == nil:
		case !s.broken && len(s.tokens) > start:
			if rerr := s.e.m.Rollback(s.st, 0); rerr != nil {
				s.broken = true
			}
			s.tokens = s.tokens[:start]
			s.pending = append(s.pending[:0], pending)
		default:
			s.st.EndSpeculation()
		}
		return true, false, err
	}
	// The pass fed the pending token and the drafts; pick row by row.
	emitted, accepted := 0, 0
	goOn = true
	for j := 0; j < rows && goOn; j++ {
		row := out[j*V : (j+1)*V]
		id, perr := pick(row) // a constraint masks row j from the state the emitted rows left
		if perr != nil {
			err, goOn = perr, false
			break
		}
		emitted++
		goOn = emit(id, row) // sets s.pending to id
		if j < len(draft) && id == draft[j] {
			accepted++
			continue
		}
		break
	}
	// Keep the rows before the last emitted token (it is pending).
	keep := emitted
	last := s.pending[0]
	if err := s.e.m.Rollback(s.st, keep); err != nil {
		s.broken = true
		return true, false, fmt.Errorf("k3: %w", err)
	}
	s.tokens = s.tokens[:start+keep]
	s.pending = append(s.pending[:0], last)
	s.e.specRows.Add(int64(rows))
	s.e.specAccepted.Add(int64(accepted))
	s.e.specPasses.Add(1)
	sp.adapt(accepted, len(draft))
	return true, goOn, err
}
