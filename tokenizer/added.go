package tokenizer

import (
	"maps"
	"slices"
	"strings"
)

// addedMatcher finds added-token strings in text: the earliest position
// where any of them matches, and there the longest. It is a byte trie with
// sorted edge lists; a table of first bytes skips text that cannot start a
// match.
type addedMatcher struct {
	first  [256]bool
	firsts []byte // the distinct first bytes, when there are few
	nodes  []trieNode
	edges  []trieEdge
}

type trieNode struct {
	lo, hi int32 // edges[lo:hi], sorted by byte
	id     int32 // added token ending here, or -1
}

type trieEdge struct {
	b     byte
	child int32
}

// newAddedMatcher builds the trie; tokens must have distinct, non-empty
// contents.
func newAddedMatcher(tokens []AddedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	// Build with maps of children first, then flatten.
	type tmp struct {
		kids map[byte]int32
		id   int32
	}
	nodes := []tmp{{kids: map[byte]int32{}, id: -1}}
	for _, a := range tokens {
		cur := int32(0)
		for k := 0; k < len(a.Content); k++ {
			b := a.Content[k]
			nx, ok := nodes[cur].kids[b]
			if !ok {
				nx = int32(len(nodes))
				nodes = append(nodes, tmp{kids: map[byte]int32{}, id: -1})
				nodes[cur].kids[b] = nx
			}
			cur = nx
		}
		nodes[cur].id = int32(a.ID)
	}
	m := &addedMatcher{nodes: make([]trieNode, len(nodes))}
	for k, nd := range nodes {
		lo := int32(len(m.edges))
		for _, b := range slices.Sorted(maps.Keys(nd.kids)) {
			m.edges = append(m.edges, trieEdge{b: b, child: nd.kids[b]})
		}
		m.nodes[k] = trieNode{lo: lo, hi: int32(len(m.edges)), id: nd.id}
	}
	for _, e := range m.edges[m.nodes[0].lo:m.nodes[0].hi] {
		m.first[e.b] = true
		m.firsts = append(m.firsts, e.b)
	}
	if len(m.firsts) > maxFirsts {
		m.firsts = nil
	}
	return m
}

// maxFirsts is the most distinct first bytes searched with IndexByte.
const maxFirsts = 4

// finder searches one text for added tokens. With few distinct first
// bytes it remembers where each occurs next, so that the text is scanned
// once per first byte with strings.IndexByte.
type finder struct {
	m    *addedMatcher
	next [maxFirsts]int // next occurrence of firsts[k] at or after the last search, or len(s)
	init bool
}

func (m *addedMatcher) finder() finder { return finder{m: m} }

// find returns the earliest added token in s at or after from: its start,
// end and id; start is -1 when there is none. Calls must use the same s and
// a non-decreasing from.
func (f *finder) find(s string, from int) (start, end, id int) {
	m := f.m
	if m.firsts == nil {
		return m.find(s, from)
	}
	if !f.init {
		for k := range m.firsts {
			f.next[k] = -1
		}
		f.init = true
	}
	for {
		p := len(s)
		for k, b := range m.firsts {
			if f.next[k] < from {
				if q := strings.IndexByte(s[from:], b); q >= 0 {
					f.next[k] = from + q
				} else {
					f.next[k] = len(s)
				}
			}
			p = min(p, f.next[k])
		}
		if p >= len(s) {
			return -1, -1, -1
		}
		if e, id := m.longestAt(s, p); e > 0 {
			return p, e, id
		}
		from = p + 1
	}
}

// find returns the earliest match in s at or after from: its start, end
// and id; start is -1 when there is none.
func (m *addedMatcher) find(s string, from int) (start, end, id int) {
	for p := from; p < len(s); p++ {
		if !m.first[s[p]] {
			continue
		}
		if e, id := m.longestAt(s, p); e > 0 {
			return p, e, id
		}
	}
	return -1, -1, -1
}

// longestAt returns the end and id of the longest token at s[p:], or 0.
func (m *addedMatcher) longestAt(s string, p int) (end, id int) {
	cur := &m.nodes[0]
	for q := p; q < len(s); q++ {
		b := s[q]
		edges := m.edges[cur.lo:cur.hi]
		next := int32(-1)
		for _, e := range edges {
			if e.b >= b {
				if e.b == b {
					next = e.child
				}
				break
			}
		}
		if next < 0 {
			break
		}
		cur = &m.nodes[next]
		if cur.id >= 0 {
			end, id = q+1, int(cur.id)
		}
	}
	return end, id
}
