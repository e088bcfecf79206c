package draft

import "sync"

// Index is the process's memory of what it generated lately, for drafts
// across sequences (the SuffixDecoding idea: agents repeat tool-call
// shapes, commands and file contents from one session to the next): a
// ring of the last Cap tokens of outputs, each added with a few tokens of
// the context before it, chained like a Matcher's bigrams. Its memory is
// fixed at creation (IndexBytes), so the planner counts it inside the RAM
// budget. It is safe for concurrent use: lookups share a read lock, Add
// takes the write lock.
type Index struct {
	mu   sync.RWMutex
	toks []int32  // ring; sep between documents
	prev []uint32 // ring: the absolute position of the previous same-bigram position
	head []uint32 // hash → absolute position + 1 (0: empty)
	pos  uint32   // absolute position of the next token
	mask uint32   // ring and table mask
}

// sep separates documents in the ring: no match crosses it.
const sep = -1

// IndexBytes returns the memory of an index of capacity tokens (rounded
// up to a power of two, at least 1024).
func IndexBytes(capacity int) int64 {
	c := int64(roundPow2(capacity))
	return c*4 + c*4 + c*4
}

func roundPow2(n int) int {
	c := minTable
	for c < n {
		c *= 2
	}
	return c
}

// NewIndex returns an empty index of about capacity tokens (a power of two,
// at least 1024).
func NewIndex(capacity int) *Index {
	c := roundPow2(capacity)
	x := &Index{toks: make([]int32, c), prev: make([]uint32, c), head: make([]uint32, c), mask: uint32(c - 1)}
	fill(x.toks, sep)
	return x
}

// Cap returns the ring's capacity in tokens.
func (x *Index) Cap() int { return len(x.toks) }

// Add appends a document: lead, the tokens of context before it (a
// suffix ending there matches into it), then tokens. The oldest tokens
// make room.
func (x *Index) Add(lead, tokens []int) {
	if len(tokens) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.put(sep)
	for _, t := range lead {
		x.put(int32(t))
	}
	for _, t := range tokens {
		x.put(int32(t))
	}
}

// put appends one token to the ring and chains it.
func (x *Index) put(t int32) {
	p := x.pos
	i := p & x.mask
	x.toks[i] = t
	x.prev[i] = 0
	if t != sep {
		if a := x.toks[(p-1)&x.mask]; p > 0 && a != sep {
			h := hash2(a, t, x.mask)
			x.prev[i] = x.head[h] // absolute + 1, or 0
			x.head[h] = p + 1
		}
	}
	x.pos = p + 1
}

// live reports whether absolute position a is still in the ring and
// before the next position.
func (x *Index) live(a uint32) bool {
	age := x.pos - a
	return age >= 1 && age < uint32(len(x.toks))
}

// Draft appends to dst up to max tokens that followed the longest match
// of seq's suffix in the ring, if it is longer than beat tokens, and
// returns the draft and the match (Pos is an absolute ring position).
func (x *Index) Draft(seq []int, beat, max int, dst []int) ([]int, Match) {
	n := len(seq)
	if n < 2 || max <= 0 {
		return dst, Match{}
	}
	a, b := int32(seq[n-2]), int32(seq[n-1])
	x.mu.RLock()
	defer x.mu.RUnlock()
	best := Match{}
	steps := 0
	last := ^uint32(0) // ages must grow along a chain
	for e := x.head[hash2(a, b, x.mask)]; e != 0 && steps < MaxChain; {
		c := e - 1
		if !x.live(c) || x.pos-c <= x.pos-last && last != ^uint32(0) {
			break
		}
		last = c
		steps++
		ci := c & x.mask
		e = x.prev[ci]
		if x.toks[ci] != b {
			continue
		}
		l := 1
		for l < MaxCompare && l < n && l <= int(x.pos-c) {
			t := x.toks[(c-uint32(l))&x.mask]
			if t == sep || t != int32(seq[n-1-l]) || !x.live(c-uint32(l)) {
				break
			}
			l++
		}
		if l >= 2 && l > best.Len && l > beat && x.live(c+1) && x.toks[(c+1)&x.mask] != sep {
			best = Match{Pos: int(c + 1), Len: l}
			if l >= MaxCompare {
				break
			}
		}
	}
	if best.Len == 0 {
		return dst, Match{}
	}
	for p, k := uint32(best.Pos), 0; k < max && x.live(p); p, k = p+1, k+1 {
		t := x.toks[p&x.mask]
		if t == sep {
			break
		}
		dst = append(dst, int(t))
	}
	return dst, best
}
