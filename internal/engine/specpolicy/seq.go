package specpolicy

import "github.com/k3go/k3/internal/engine/draft"

// Drafter proposes tokens that may follow a sequence (the engine's
// Drafter, a caller's own). It gives no evidence.
type Drafter interface {
	Draft(seq []int, max int, dst []int) []int
}

// Seq is one sequence's speculation: its matcher over its own tokens, its
// record of how its drafts fared, and the drafts still waiting for the
// tokens that judge them. The engine keeps one per sequence (a session's
// turns share it); the replay benchmark drives the same code without a
// model. It is not safe for concurrent use.
type Seq struct {
	m      draft.Matcher
	own    Counts // this sequence's record
	delta  Counts // observations not yet merged into the server's record
	prior  Counts // the server's record as of the last merge
	merged bool   // prior holds a snapshot

	open []proposal // drafts not yet judged, oldest first
	buf  []int      // their tokens, in a ring of proposals
	out  []int
	surv []float64
	raw  []float64 // surv before the correction

	// Proposed and Right count the drafted tokens evaluated and those
	// that were right (verified or not).
	Proposed, Right int64
}

// proposal is a draft waiting for the tokens after position at.
type proposal struct {
	at  int // the sequence's length when it was proposed
	ev  draft.Evidence
	off int // its tokens: buf[off:off+n]
	n   int
}

// mergeEvery is how many judged drafts a sequence collects before it
// merges them into the server's record and refreshes its prior.
const mergeEvery = 32

// Reset forgets the sequence's tokens and open drafts (a reset or
// reloaded sequence); its acceptance record stays.
func (q *Seq) Reset() {
	q.m.Reset()
	q.open, q.buf = q.open[:0], q.buf[:0]
}

// Bytes returns what a Seq holds for a sequence of n tokens besides its
// drafts: the planner counts it per session.
func Bytes(n int) int64 {
	return draft.MatcherBytes(n) + 3*int64(draft.NumSources)*NumBuckets*MaxDraft*2*4
}

// Propose judges the open drafts against seq (the sequence so far, every
// token final), then drafts up to max tokens to follow it: from d when it
// is not nil, else from the longest earlier match in seq or in x (may be
// nil). It returns the draft and, for each of its tokens, the chance that
// it and the ones before it are accepted (Survival), from this sequence's
// record and the server's (sh, may be nil). Both slices are the Seq's own,
// valid until the next call.
func (q *Seq) Propose(seq []int, max int, x *draft.Index, d Drafter, sh *Shared) ([]int, []float64) {
	q.judge(seq, sh)
	q.out = q.out[:0]
	var ev draft.Evidence
	if d != nil {
		q.out = d.Draft(seq, max, q.out)
		if len(q.out) > max {
			q.out = q.out[:max]
		}
		if len(q.out) > 0 {
			ev = draft.Evidence{Source: draft.External}
		}
	} else {
		q.m.Sync(seq)
		q.out, ev = draft.Propose(&q.m, x, seq, max, q.out)
	}
	q.surv = q.surv[:0]
	if len(q.out) == 0 {
		return q.out, q.surv
	}
	// Keep it for judging (its tokens copied: the caller may trim its
	// slice).
	if len(q.open) == 0 {
		q.buf = q.buf[:0]
	} else if len(q.buf) > 64*MaxDraft {
		// Move the open drafts' tokens to the front.
		n := 0
		for i := range q.open {
			p := &q.open[i]
			n += copy(q.buf[n:], q.buf[p.off:p.off+p.n])
			p.off = n - p.n
		}
		q.buf = q.buf[:n]
	}
	q.open = append(q.open, proposal{at: len(seq), ev: ev, off: len(q.buf), n: len(q.out)})
	q.buf = append(q.buf, q.out...)
	var prior *Counts
	if q.merged {
		prior = &q.prior
	}
	q.raw = Survival(&q.own, prior, ev, len(q.out), q.raw[:0])
	// The estimates of chosen drafts are biased upwards; scale them by
	// what the verified ones estimated alike gave against what was
	// expected of them. A survival stays non-increasing: a later draft's
	// is at most an earlier one's.
	q.surv = q.surv[:0]
	for j, v := range q.raw {
		c := Corrected(v, &q.own, prior)
		if j > 0 {
			c = min(c, q.surv[j-1])
		}
		q.surv = append(q.surv, c)
	}
	return q.out, q.surv
}

// Verified records that the first n drafts of the last proposal were
// verified and accepted of them accepted, against their estimates before
// the correction.
func (q *Seq) Verified(n, accepted int) {
	n = min(n, len(q.raw))
	if n <= 0 {
		return
	}
	q.own.Verified(q.raw[:n], accepted)
	q.delta.Verified(q.raw[:n], accepted)
}

// judge settles the open drafts whose fate seq decides: a draft made at
// length at is right up to the first token where seq differs; it is
// settled once seq has that token or covers all of it.
func (q *Seq) judge(seq []int, sh *Shared) {
	k := 0
	for _, p := range q.open {
		toks := q.buf[p.off : p.off+p.n]
		right, settled := 0, false
		for right < p.n {
			i := p.at + right
			if i >= len(seq) {
				break
			}
			if seq[i] != toks[right] {
				settled = true
				break
			}
			right++
		}
		if right == p.n {
			settled = true
		}
		if p.at > len(seq) {
			settled, right = true, -1 // the sequence went back: drop it
		}
		if !settled {
			q.open[k] = p
			k++
			continue
		}
		if right >= 0 {
			q.own.Observe(p.ev, p.n, right)
			q.delta.Observe(p.ev, p.n, right)
			q.Proposed++
			if right > 0 {
				q.Right++
			}
		}
	}
	q.open = q.open[:k]
	if sh != nil && q.delta.Total() >= mergeEvery {
		sh.Merge(&q.delta)
		sh.Snapshot(&q.prior)
		q.merged = true
	} else if sh != nil && !q.merged {
		sh.Snapshot(&q.prior)
		q.merged = true
	}
}

// Flush merges what the sequence observed into the server's record (at
// the end of a generation).
func (q *Seq) Flush(sh *Shared) {
	if sh != nil && q.delta.Total() > 0 {
		sh.Merge(&q.delta)
	}
}
