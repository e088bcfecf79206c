package bench

import (
	"github.com/k3go/k3"
	"github.com/k3go/k3/internal/engine"
	"github.com/k3go/k3/internal/engine/draft"
	"github.com/k3go/k3/internal/engine/specpolicy"
)

// replayStats are one decoding of replayed transcripts, measured (a
// model) or projected (the planner's costs): the decode passes only (a
// turn's first token comes from its prompt's pass).
type replayStats struct {
	Tokens int64 `json:"tokens"`
	// Passes over the weights; SeqPasses the sequences' shares of them (a
	// pass of B sequences is B), Rows their rows.
	Passes    int64 `json:"passes"`
	SeqPasses int64 `json:"sequence_passes"`
	Rows      int64 `json:"rows"`
	Drafted   int64 `json:"drafted"`
	Accepted  int64 `json:"accepted"`
	Bytes     int64 `json:"bytes_read"`
	// Seconds is the decode time: measured, or the cost model's.
	Seconds float64 `json:"seconds"`

	SPerToken     float64 `json:"s_per_token"`
	TokensPerPass float64 `json:"tokens_per_pass"`
	RowsPerPass   float64 `json:"rows_per_pass"`
	BytesPerToken float64 `json:"bytes_per_token"`
}

// finish fills the ratios: per sequence, so that a batch's tokens per
// pass and rows per pass read as one sequence's.
func (s *replayStats) finish() {
	if s.Tokens > 0 {
		s.SPerToken = s.Seconds / float64(s.Tokens)
		s.BytesPerToken = float64(s.Bytes) / float64(s.Tokens)
	}
	if s.SeqPasses > 0 {
		s.TokensPerPass = float64(s.Tokens) / float64(s.SeqPasses)
		s.RowsPerPass = float64(s.Rows) / float64(s.SeqPasses)
	}
}

// simulate replays trs without a model, as the engine would decode them:
// batch sequences at once, each taking the next transcript when it ends
// one (every transcript once: a server with batch sessions and these
// conversations to serve; the batch thins out at the end), every pass
// costed by cost. spec is 0
// (plain), a fixed draft length, or k3.SpeculateAuto; a drafted token is
// accepted exactly when it is the transcript's next token. The drafter
// and the policy are the engine's own (internal/engine/specpolicy), with
// a fresh sequence per turn (as the server runs a request) and one shared
// index and acceptance record (as one server).
func simulate(trs []transcript, batch, spec int, cost specpolicy.Cost, maxSpec int) replayStats {
	var st replayStats
	if batch <= 0 {
		return st
	}
	type slot struct {
		active        bool
		tr, turn, pos int
		q             *specpolicy.Seq
		drafts        []int
		surv          []float64
	}
	x := draft.NewIndex(k3SharedIndexTokens)
	var sh specpolicy.Shared
	var ch specpolicy.Chooser
	next := 0
	slots := make([]slot, batch)
	// start gives slot s its next turn: the rest of this transcript's, or
	// the next transcript's first.
	start := func(s *slot, first bool) {
		for {
			if first {
				if next == len(trs) {
					s.active = false
					return
				}
				s.tr, s.turn, s.active = next, 0, true
				next++
				first = false
			} else if s.turn++; s.turn >= len(trs[s.tr].turns) {
				first = true
				continue
			}
			t := trs[s.tr].turns[s.turn]
			if t[1]-t[0] > 1 {
				s.pos = t[0] + 1 // the first token comes from the prompt's pass
				s.q = &specpolicy.Seq{}
				return
			}
		}
	}
	for i := range slots {
		start(&slots[i], true)
	}
	maxDraft := spec
	if spec == k3.SpeculateAuto {
		maxDraft = k3.AutoDraft
	}
	offers := make([]specpolicy.Offer, batch)
	var ks []int
	for {
		active := 0
		for i := range slots {
			s := &slots[i]
			s.drafts, s.surv = nil, nil
			if s.active {
				active++
			}
			if spec != 0 && s.active {
				s.drafts, s.surv = s.q.Propose(trs[s.tr].ids[:s.pos], maxDraft, x, nil, &sh)
			}
			offers[i] = specpolicy.Offer{Survival: s.surv, Force: spec > 0}
		}
		if active == 0 {
			break
		}
		ks = ch.Choose(ks[:0], specpolicy.Pass{Rows: active, Tokens: float64(active), MaxRows: 1 << 20, MaxSpec: maxSpec}, offers, &cost)
		rows, specSeqs := active, 0
		for i := range slots {
			s := &slots[i]
			if !s.active {
				continue
			}
			tr := &trs[s.tr]
			end := tr.turns[s.turn][1]
			k := ks[i]
			right := 0
			for right < k && s.pos+right < end && s.drafts[right] == tr.ids[s.pos+right] {
				right++
			}
			acc := min(right, end-s.pos-1)
			if spec != 0 {
				s.q.Verified(k, acc)
			}
			rows += k
			if k > 0 {
				specSeqs++
			}
			st.Drafted += int64(k)
			st.Accepted += int64(acc)
			st.Tokens += int64(1 + acc)
			s.pos += 1 + acc
			if s.pos >= end {
				t := tr.turns[s.turn]
				x.Add(tr.ids[max(t[0]-indexLead, 0):t[0]], tr.ids[t[0]:t[1]])
				s.q.Flush(&sh)
				start(s, false)
			}
		}
		st.Passes++
		st.SeqPasses += int64(active)
		st.Rows += int64(rows)
		st.Seconds += cost.Seconds(rows, specSeqs)
		st.Bytes += int64(cost.Bytes(rows))
	}
	st.finish()
	return st
}

// k3SharedIndexTokens and indexLead are the engine's: the shared index's
// capacity, and the tokens of context added before each output.
const (
	k3SharedIndexTokens = engine.SharedIndexTokens
	indexLead           = engine.IndexLead
)
