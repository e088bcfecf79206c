package draft

// Matcher indexes one sequence's tokens so that the longest earlier match
// of its suffix is found in time bounded by MaxChain × MaxCompare, however
// long the sequence: every position is chained to the previous position
// that ended the same two tokens (and the same token), as an LZ77
// compressor chains its hash table. It grows with the sequence (about 12
// bytes per token and a table of twice the tokens' count, rounded up to a
// power of two: Bytes) and allocates only when it grows.
type Matcher struct {
	toks         []int32
	prev2, prev1 []int32 // earlier position of the same bigram / token hash, or -1
	head2, head1 []int32 // hash → latest position, or -1
	mask         uint32
}

// minTable is the smallest hash table (entries).
const minTable = 1 << 10

// MatcherBytes returns what a Matcher holds for a sequence of n tokens
// (its largest tables): the planner counts it per session.
func MatcherBytes(n int) int64 {
	t := int64(minTable)
	for t < 2*int64(n) {
		t *= 2
	}
	return 3*4*int64(n) + 2*4*t
}

// Len returns the number of tokens indexed.
func (m *Matcher) Len() int { return len(m.toks) }

// Reset forgets every token, keeping the tables' memory.
func (m *Matcher) Reset() {
	m.toks, m.prev1, m.prev2 = m.toks[:0], m.prev1[:0], m.prev2[:0]
	fill(m.head1, -1)
	fill(m.head2, -1)
}

func fill(s []int32, v int32) {
	for i := range s {
		s[i] = v
	}
}

// Sync makes the matcher index exactly seq: it appends what seq has beyond
// the tokens indexed, or starts over when seq is not their continuation
// (checked at its last indexed token and a few more: the engine calls
// Reset itself when a sequence is reset or rolled back).
func (m *Matcher) Sync(seq []int) {
	n := len(m.toks)
	if n > len(seq) || (n > 0 && (int32(seq[n-1]) != m.toks[n-1] || int32(seq[n/2]) != m.toks[n/2] || int32(seq[0]) != m.toks[0])) {
		m.Reset()
		n = 0
	}
	m.grow(len(seq))
	for _, t := range seq[n:] {
		m.add(int32(t))
	}
}

// grow makes the tables hold n tokens at load at most one half,
// rebuilding the chains when they grow.
func (m *Matcher) grow(n int) {
	size := len(m.head2)
	if size >= 2*n && size >= minTable {
		return
	}
	if size < minTable {
		size = minTable
	}
	for size < 2*n {
		size *= 2
	}
	toks := m.toks
	m.head1, m.head2 = make([]int32, size), make([]int32, size)
	m.mask = uint32(size - 1)
	if cap(m.toks) < n {
		c := max(n, 2*cap(m.toks))
		m.toks = make([]int32, 0, c)
		m.prev1, m.prev2 = make([]int32, 0, c), make([]int32, 0, c)
	}
	m.toks, m.prev1, m.prev2 = m.toks[:0], m.prev1[:0], m.prev2[:0]
	fill(m.head1, -1)
	fill(m.head2, -1)
	// toks may share m.toks' array (no reallocation): add writes position
	// i only after reading it.
	for _, t := range toks {
		m.add(t)
	}
}

// add appends token t and chains its position.
func (m *Matcher) add(t int32) {
	i := int32(len(m.toks))
	m.toks = append(m.toks, t)
	h1 := hash1(t, m.mask)
	m.prev1 = append(m.prev1, m.head1[h1])
	m.head1[h1] = i
	p2 := int32(-1)
	if i > 0 {
		h2 := hash2(m.toks[i-1], t, m.mask)
		p2 = m.head2[h2]
		m.head2[h2] = i
	}
	m.prev2 = append(m.prev2, p2)
}

// Find returns the longest earlier match of the indexed sequence's suffix
// (the most recent of the longest), or a zero Match when its last token
// never occurred before.
func (m *Matcher) Find() Match {
	n := len(m.toks)
	if n < 2 {
		return Match{}
	}
	end := n - 1
	last := m.toks[end]
	best := Match{}
	steps := 0
	for c := m.prev2[end]; c >= 1 && steps < MaxChain; c = m.prev2[c] {
		steps++
		if m.toks[c] != last {
			continue // a hash collision
		}
		l := 1
		for l < MaxCompare && int(c)-l >= 0 && m.toks[int(c)-l] == m.toks[end-l] {
			l++
		}
		if l >= 2 && l > best.Len {
			best = Match{Pos: int(c) + 1, Len: l}
			if l >= MaxCompare {
				break
			}
		}
	}
	if best.Len > 0 {
		return best
	}
	steps = 0
	for c := m.prev1[end]; c >= 0 && steps < MaxChain; c = m.prev1[c] {
		steps++
		if m.toks[c] == last {
			return Match{Pos: int(c) + 1, Len: 1}
		}
	}
	return Match{}
}

// Continuation appends to dst up to max tokens of the sequence from
// mt.Pos on (the tokens that followed the match).
func (m *Matcher) Continuation(mt Match, max int, dst []int) []int {
	end := min(mt.Pos+max, len(m.toks))
	for i := mt.Pos; i < end; i++ {
		dst = append(dst, int(m.toks[i]))
	}
	return dst
}
