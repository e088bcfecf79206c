// Package specpolicy decides how many drafted tokens each sequence of a
// pass verifies (speculative decoding), so that the pass yields the most
// expected tokens per second. It is pure: the engine gives it what the
// sequences have seen of their drafts (Counts, the acceptance by evidence
// and draft position), the model of what a pass costs (Cost, fitted to the
// passes run so far by Calibration) and the offers of the sequences in the
// next pass; Choose answers with the draft rows of each.
//
// Three ideas carry it:
//
//   - A drafted token is worth its chance of being emitted: the chance
//     that it and every draft before it are accepted (Survival). That
//     chance is learned from every draft the drafter proposes, verified or
//     not: the tokens that follow tell whether it was right (the engine
//     compares them), so the estimate needs no exploration and is not
//     biased by what the policy chose to verify.
//   - A row's cost is what it adds to this pass: the trunk is read once per
//     pass whatever its rows (in a batch, the other sequences already pay
//     for it), a row adds the experts its token routes to beyond the
//     union of the others', and its compute.
//   - The pass maximises expected tokens per second over all its
//     sequences at once, zero drafts included: where rows cost more than
//     they return (everything resident, large batches) it verifies
//     nothing, so the expected speed is never below plain decoding's.
package specpolicy

import (
	"sync"

	"github.com/k3go/k3/internal/engine/draft"
)

// MaxDraft is the most drafted tokens one sequence may verify in a pass.
const MaxDraft = 16

// NumBuckets counts the match-length buckets (Bucket).
const NumBuckets = 13

// bucketEdges are the smallest match length of each bucket from 1 on:
// lengths grow geometrically, since every doubling of the evidence moves
// the chance of a right draft about as much.
var bucketEdges = [NumBuckets - 1]int{1, 2, 3, 4, 6, 9, 13, 17, 25, 33, 65, 129}

// Bucket returns the bucket of a match of n tokens: 0 for none (an
// External draft), then 1, 2, 3, 4–5, 6–8, 9–12, 13–16, 17–24, 25–32,
// 33–64, 65–128, 129 and more.
func Bucket(n int) int {
	b := 0
	for b < len(bucketEdges) && n >= bucketEdges[b] {
		b++
	}
	return b
}

// Counts are acceptance observations: for each evidence (source and match
// bucket) and draft position j, N counts the drafts proposed at position j
// whose earlier drafts were all right, and A those of them that were right
// too. A/N is the conditional chance q(j) that the j-th draft is right
// given that the ones before it were.
//
// Pred and Real follow the estimates themselves: over the drafted tokens
// that were verified, by bin of their estimated survival (tenths), Pred
// sums the estimates (the tokens expected of them) and Real the tokens
// they gave. The drafts a policy verifies are those with the highest
// estimates, which are biased upwards (a winner's curse), the more so the
// higher the bar a regime sets (a row that costs nearly a token of the
// pass is verified only at 0.9 and above); Real/Pred in each bin measures
// that bias, and Corrected applies it.
type Counts struct {
	N, A       [draft.NumSources][NumBuckets][MaxDraft]float32
	Pred, Real [CorrectionBins]float32
}

// CorrectionBins is how many bins of estimated survival the correction
// keeps.
const CorrectionBins = 10

func correctionBin(s float64) int { return min(max(int(s*CorrectionBins), 0), CorrectionBins-1) }

// Observe records one draft of proposed tokens of which the first right
// ones were right (the next, if any, was wrong). Positions after the first
// wrong token are not observed: nothing is known of them.
func (c *Counts) Observe(ev draft.Evidence, proposed, right int) {
	if proposed <= 0 || ev.Source == draft.None || int(ev.Source) >= int(draft.NumSources) {
		return
	}
	s, b := ev.Source, Bucket(ev.Match)
	n := min(proposed, MaxDraft)
	for j := 0; j < n && j <= right; j++ {
		c.N[s][b][j]++
		if j < right {
			c.A[s][b][j]++
		}
	}
}

// Add adds d's observations to c.
func (c *Counts) Add(d *Counts) {
	for s := range c.N {
		for b := range c.N[s] {
			for j := range c.N[s][b] {
				c.N[s][b][j] += d.N[s][b][j]
				c.A[s][b][j] += d.A[s][b][j]
			}
		}
	}
	for i := range c.Pred {
		c.Pred[i] += d.Pred[i]
		c.Real[i] += d.Real[i]
	}
}

// Scale multiplies every count by f (a decay: older observations weigh
// less).
func (c *Counts) Scale(f float32) {
	for s := range c.N {
		for b := range c.N[s] {
			for j := range c.N[s][b] {
				c.N[s][b][j] *= f
				c.A[s][b][j] *= f
			}
		}
	}
	for i := range c.Pred {
		c.Pred[i] *= f
		c.Real[i] *= f
	}
}

// Verified records that drafted tokens with the estimated survivals surv
// were verified and that the first accepted of them were accepted.
func (c *Counts) Verified(surv []float64, accepted int) {
	for j, s := range surv {
		b := correctionBin(s)
		c.Pred[b] += float32(s)
		if j < accepted {
			c.Real[b]++
		}
	}
}

// correctionWeight is how many expected tokens of evidence a bin's
// correction needs to move halfway from 1: a few passes' worth.
const correctionWeight = 32

// Corrected returns estimate s scaled by what the verified drafted tokens
// estimated like it gave against what was expected of them, from one or
// two records (nil skipped): s · (Real + w) / (Pred + w) in its bin, at
// most 1.
func Corrected(s float64, a, b *Counts) float64 {
	bin := correctionBin(s)
	pred, real := float64(correctionWeight), float64(correctionWeight)
	for _, c := range []*Counts{a, b} {
		if c != nil {
			pred += float64(c.Pred[bin])
			real += float64(c.Real[bin])
		}
	}
	return min(1, s*real/pred)
}

// Total returns the observations of the first draft position, summed: how
// many drafts were evaluated.
func (c *Counts) Total() float32 {
	var t float32
	for s := range c.N {
		for b := range c.N[s] {
			t += c.N[s][b][0]
		}
	}
	return t
}

// The priors. A server with no observations yet assumes a drafted token
// is right one time in three (priorA of priorA+priorB pseudo-drafts), a
// guess small enough that its first drafts are verified only where rows
// are cheap, and outweighed after a few observations. A sequence's own
// observations weigh against the server's estimate as if the server's were
// seqWeight observations: after a few dozen drafts a sequence is judged on
// its own record (a reasoning channel and a file being copied differ).
const (
	priorA    = 1
	priorB    = 2
	seqWeight = 16
)

// Survival appends to dst, for draft positions 1..k (k ≤ MaxDraft), the
// chance that the drafts up to that position are all right, given the
// evidence: the product of the conditional chances q(1)..q(j), each
// estimated from the sequence's own counts (own, may be nil) pulled
// towards the server's (prior, may be nil), itself pulled towards the
// flat prior. The result is non-increasing.
func Survival(own, prior *Counts, ev draft.Evidence, k int, dst []float64) []float64 {
	k = min(k, MaxDraft)
	if k <= 0 || ev.Source == draft.None || int(ev.Source) >= int(draft.NumSources) {
		return dst
	}
	s, b := ev.Source, Bucket(ev.Match)
	p := 1.0
	for j := 0; j < k; j++ {
		q := float64(priorA) / float64(priorA+priorB)
		if prior != nil {
			q = (float64(prior.A[s][b][j]) + priorA) / (float64(prior.N[s][b][j]) + priorA + priorB)
		}
		if own != nil {
			q = (float64(own.A[s][b][j]) + seqWeight*q) / (float64(own.N[s][b][j]) + seqWeight)
		}
		p *= q
		dst = append(dst, p)
	}
	return dst
}

// Shared is a server's acceptance record, the prior of every sequence:
// the sum of what every sequence observed, decayed so that it follows a
// change of workload. It is safe for concurrent use.
type Shared struct {
	mu sync.Mutex
	c  Counts
}

// sharedHalfLife is how many drafts' observations halve the weight of the
// older ones: the server's prior follows the last few thousand drafts.
const sharedHalfLife = 4096

// Merge adds a sequence's observations since its last merge (d, which it
// then clears) to the server's record.
func (sh *Shared) Merge(d *Counts) {
	t := d.Total()
	sh.mu.Lock()
	if t > 0 {
		// Decay by 2^(−t/halfLife), to first order.
		sh.c.Scale(max(0, 1-0.6931*t/sharedHalfLife))
	}
	sh.c.Add(d)
	sh.mu.Unlock()
	*d = Counts{}
}

// Snapshot copies the server's record into dst.
func (sh *Shared) Snapshot(dst *Counts) {
	sh.mu.Lock()
	*dst = sh.c
	sh.mu.Unlock()
}
