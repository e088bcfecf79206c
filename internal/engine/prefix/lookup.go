package prefix

import "slices"

// StateRef describes one state entry as the lookup sees it.
type StateRef struct {
	Key       Key
	Tail      int  // tokens after the anchoring block boundary, 0 ≤ Tail < B
	HasLogits bool // the entry holds the logits of its last position
}

// Index is what [Lookup] needs to know about the entries present.
// [*Store] implements it over both tiers.
type Index interface {
	// HasBlock reports whether the block entry with this key is present.
	HasBlock(key Key) bool
	// States returns the state entries anchored at the chain hash anchor
	// (in any order). The lookup does not keep or modify the slice.
	States(anchor Key) []StateRef
}

// Match is the result of a lookup: restore the blocks 0 … Anchor−1
// (keys Prompt.BlockKey(i)), then the state entry State, and resume the
// prompt at position Pos. Pos == 0 is a miss.
type Match struct {
	// Pos is the restorable prefix length: the state entry's position.
	Pos int
	// Anchor is ⌊Pos/B⌋: the number of block entries to restore.
	Anchor int
	// State is the key of the state entry at Pos (zero on a miss).
	State Key
	// HasLogits reports whether the state entry holds the logits of
	// position Pos−1 (then Pos may equal the prompt's length).
	HasLogits bool
	// Blocks is the number of leading blocks of the prompt that are
	// present, whether or not a state entry lets them be used. An engine
	// may save a state at Blocks·B on this prefill, so that the next
	// prompt that shares those blocks hits there.
	Blocks int
}

// Hit reports whether the match restores anything.
func (m Match) Hit() bool { return m.Pos > 0 }

// Lookup finds the longest restorable point of the prompt p: the largest
// position pos, 1 ≤ pos ≤ min(limit, p.Len()), with a state entry at pos
// whose key matches p's tokens, and a block entry for every full block
// before ⌊pos/B⌋·B. A state at pos == p.Len() qualifies only if it holds
// logits (the engine needs the last position's logits: without them it
// must feed at least one token). Lookup only reads ix; it is a pure
// function of ix's answers and p.
//
// Cost: one HasBlock per leading present block, and, from the highest
// usable anchor down to the first one with a match, one pass of SHA-256
// over the longest matching-length tail there (at most B tokens each).
func Lookup(ix Index, p *Prompt, limit int) Match {
	b, n := p.x.b, p.Len()
	limit = min(limit, n)
	m := Match{Blocks: leadingBlocks(ix, p, p.Blocks())}
	if limit < 1 {
		return m
	}
	var sh stateHasher
	var tails []StateRef
	for a := min(m.Blocks, limit/b); a >= 0; a-- {
		refs := ix.States(p.chain[a])
		if len(refs) == 0 {
			continue
		}
		base := a * b
		// Tails that fit the limit, longest first; the hasher walks them
		// shortest first, so gather, sort ascending and scan backwards.
		tails = tails[:0]
		for _, r := range refs {
			if r.Tail < 0 || r.Tail >= b || base+r.Tail > limit || base+r.Tail < 1 {
				continue
			}
			if base+r.Tail == n && !r.HasLogits {
				continue
			}
			tails = append(tails, r)
		}
		if len(tails) == 0 {
			continue
		}
		slices.SortFunc(tails, func(x, y StateRef) int { return x.Tail - y.Tail })
		best, done := -1, 0
		sh.reset(p.chain[a])
		for i, r := range tails {
			sh.write(p.tokens[base+done : base+r.Tail])
			done = r.Tail
			if sh.sum() == r.Key {
				best = i // ascending, so the last match is the longest
			}
		}
		if best >= 0 {
			r := tails[best]
			m.Pos, m.Anchor, m.State, m.HasLogits = base+r.Tail, a, r.Key, r.HasLogits
			return m
		}
	}
	return m
}

// leadingBlocks returns the number of leading blocks of p (at most max)
// that ix holds.
func leadingBlocks(ix Index, p *Prompt, max int) int {
	j := 0
	for j < max && ix.HasBlock(p.chain[j+1]) {
		j++
	}
	return j
}
