package specpolicy

import (
	"math"
	"slices"
)

// Offer is one sequence's drafts for the next pass.
type Offer struct {
	// Survival[j-1] is the chance that drafts 1..j are all right: a
	// non-increasing list, one entry per drafted token (Survival).
	Survival []float64
	// Force verifies every draft, whatever it costs (a fixed draft
	// length, for tests and benchmarks).
	Force bool
}

// Pass is the next pass without its drafts.
type Pass struct {
	// Rows are the rows the pass carries already: decoding sequences'
	// pending tokens (those of the offering sequences included) and
	// prompt rows.
	Rows int
	// Tokens are the tokens those rows yield for sure: one per decoding
	// sequence.
	Tokens float64
	// MaxRows bounds the pass's rows, drafts included.
	MaxRows int
	// MaxSpec bounds the sequences that may speculate (each needs a
	// rollback buffer); negative means no bound.
	MaxSpec int
}

// Chooser chooses drafts pass after pass; it keeps its scratch between
// calls. The zero value is ready to use; it is not safe for concurrent
// use.
type Chooser struct {
	cands []cand
	dp    []float64 // [spec][rows] best gain
	next  []float64
	pick  []uint8 // [offer][spec][rows] drafts of the offer on the best path

	greedyOnly bool // tests: the fallback alone
}

// cand is one draft row a sequence could verify: its j-th draft (1-based),
// worth its survival.
type cand struct {
	i, j int
	s    float64
}

// Choose appends to dst, for each offer, how many of its drafts the pass
// verifies. Forced offers get all their drafts (as rows and rollback
// buffers allow, in order). The others get the drafts that maximise the
// pass's expected tokens per second, (Tokens + Σ survivals of the drafts
// chosen) / c.Seconds(rows, speculating sequences), zero drafts included
// (the fewest rows on a tie), if that beats zero drafts by MinGain. The pass's time depends only on its rows and
// its speculating sequences, so a dynamic program over the offers finds,
// for every count of both, the drafts worth most, and the best count wins:
// the optimum. A pass too large for it (more than maxExactCells cells)
// takes the m likeliest drafts for the best m instead (a sequence's drafts
// come in order, since its survivals do not increase), which is the
// optimum too when sequences cost nothing by themselves (c.SpecSeq zero)
// and the speculating sequences are not bounded.
func (ch *Chooser) Choose(dst []int, p Pass, offers []Offer, c *Cost) []int {
	base := len(dst)
	for range offers {
		dst = append(dst, 0)
	}
	ks := dst[base:]
	rows, spec, tokens := p.Rows, 0, p.Tokens
	room := func() bool { return p.MaxSpec < 0 || spec < p.MaxSpec }
	for i, o := range offers {
		if !o.Force || len(o.Survival) == 0 || !room() {
			continue
		}
		k := min(len(o.Survival), max(p.MaxRows-rows, 0))
		if k == 0 {
			continue
		}
		ks[i] = k
		rows += k
		spec++
		for _, sv := range o.Survival[:k] {
			tokens += sv // a draft's expected tokens: its survival
		}
	}
	if !ch.greedyOnly && ch.exact(ks, p, offers, c, rows, spec, tokens) {
		return dst
	}
	ch.cands = ch.cands[:0]
	for i, o := range offers {
		if o.Force {
			continue
		}
		for j, s := range o.Survival {
			if s <= 0 {
				break
			}
			ch.cands = append(ch.cands, cand{i: i, j: j + 1, s: s})
		}
	}
	if len(ch.cands) == 0 {
		return dst
	}
	slices.SortFunc(ch.cands, func(a, b cand) int {
		switch {
		case a.s > b.s:
			return -1
		case a.s < b.s:
			return 1
		case a.i != b.i:
			return a.i - b.i
		}
		return a.j - b.j
	})
	// Walk the candidates in order, skipping those of a sequence that
	// cannot speculate (no buffer left, or an earlier draft of it skipped),
	// and remember the prefix with the best ratio.
	bestM, bestRatio := 0, (1+MinGain)*tokens/c.Seconds(rows, spec)
	m, gain, s := 0, 0.0, spec
	taken := ks // reuse: counts drafts taken per offer while walking
	for _, cd := range ch.cands {
		if rows+m >= p.MaxRows {
			break
		}
		if taken[cd.i] != cd.j-1 {
			continue // an earlier draft of this sequence was skipped
		}
		if taken[cd.i] == 0 {
			if p.MaxSpec >= 0 && s >= p.MaxSpec {
				continue
			}
			s++
		}
		taken[cd.i] = cd.j
		m++
		gain += cd.s
		if r := (tokens + gain) / c.Seconds(rows+m, s); r > bestRatio {
			bestM, bestRatio = m, r
		}
	}
	// Take the best prefix again, for real.
	for i, o := range offers {
		if !o.Force {
			ks[i] = 0
		}
	}
	m, s = 0, spec
	for _, cd := range ch.cands {
		if m == bestM {
			break
		}
		if rows+m >= p.MaxRows || ks[cd.i] != cd.j-1 {
			continue
		}
		if ks[cd.i] == 0 {
			if p.MaxSpec >= 0 && s >= p.MaxSpec {
				continue
			}
			s++
		}
		ks[cd.i] = cd.j
		m++
	}
	return dst
}

// MinGain is the least rise of a pass's expected tokens per second that
// drafts must promise to be verified: a gain smaller than the estimates'
// error is no gain. The chances of the drafts the policy picks are the
// highest estimates, and so biased upwards (a winner's curse: measured on
// agent transcripts, drafts estimated right 93% of the time were right
// 87% of the time), which matters only where a draft's gain is marginal:
// with the trunk resident, where a row costs about as much as the pass.
const MinGain = 0.02

// maxExactCells bounds the dynamic program's work (offers × speculating
// sequences × draft rows × drafts per offer): a few milliseconds at most,
// beside passes of tenths of seconds or more.
const maxExactCells = 1 << 22

// exact solves the unforced offers by dynamic programming over (speculating
// sequences, draft rows) and sets ks; it reports false when the pass is
// too large for it.
func (ch *Chooser) exact(ks []int, p Pass, offers []Offer, c *Cost, rows, spec int, tokens float64) bool {
	n, total, kmax := 0, 0, 0
	for _, o := range offers {
		if !o.Force && len(o.Survival) > 0 {
			n++
			total += len(o.Survival)
			kmax = max(kmax, len(o.Survival))
		}
	}
	if n == 0 {
		return true
	}
	M := min(total, max(p.MaxRows-rows, 0))
	S := n
	if p.MaxSpec >= 0 {
		S = min(S, max(p.MaxSpec-spec, 0))
	}
	if M == 0 || S == 0 {
		return true
	}
	W := M + 1
	if len(offers)*(S+1)*W*kmax > maxExactCells {
		return false
	}
	cells := (S + 1) * W
	ch.dp, ch.next = resize(ch.dp, cells), resize(ch.next, cells)
	if need := len(offers) * cells; cap(ch.pick) < need {
		ch.pick = make([]uint8, need)
	} else {
		ch.pick = ch.pick[:need]
	}
	neg := math.Inf(-1)
	for i := range ch.dp {
		ch.dp[i] = neg
	}
	ch.dp[0] = 0
	for i, o := range offers {
		pk := ch.pick[i*cells : (i+1)*cells]
		copy(ch.next, ch.dp)
		clear(pk)
		if !o.Force && len(o.Survival) > 0 {
			for s := 0; s < S; s++ {
				for m := 0; m < M; m++ {
					g0 := ch.dp[s*W+m]
					if g0 == neg {
						continue
					}
					g := g0
					for k := 1; k <= len(o.Survival) && m+k <= M; k++ {
						g += o.Survival[k-1]
						if x := (s+1)*W + m + k; g > ch.next[x] {
							ch.next[x], pk[x] = g, uint8(k)
						}
					}
				}
			}
		}
		ch.dp, ch.next = ch.next, ch.dp
	}
	bestS, bestM, best := 0, 0, (1+MinGain)*tokens/c.Seconds(rows, spec)
	for m := 1; m <= M; m++ {
		for s := 1; s <= S; s++ {
			g := ch.dp[s*W+m]
			if g == neg {
				continue
			}
			if r := (tokens + g) / c.Seconds(rows+m, spec+s); r > best {
				bestS, bestM, best = s, m, r
			}
		}
	}
	// Walk back through the offers.
	s, m := bestS, bestM
	for i := len(offers) - 1; i >= 0; i-- {
		if offers[i].Force {
			continue
		}
		k := int(ch.pick[i*cells+s*W+m])
		ks[i] = k
		if k > 0 {
			s--
			m -= k
		}
	}
	return true
}

func resize(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}
