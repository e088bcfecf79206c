package tokenizer

// addedMatcher finds added-token strings in text: the earliest position
// where any of them matches, and there the longest. It is a byte trie with
// sorted edge lists; a table of first bytes skips text that cannot start a
// match.
type addedMatcher struct {
	first [256]bool
	nodes []trieNode
	edges []trieEdge
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
		for b := 0; b < 256; b++ {
			if c, ok := nd.kids[byte(b)]; ok {
				m.edges = append(m.edges, trieEdge{b: byte(b), child: c})
			}
		}
		m.nodes[k] = trieNode{lo: lo, hi: int32(len(m.edges)), id: nd.id}
	}
	for _, e := range m.edges[m.nodes[0].lo:m.nodes[0].hi] {
		m.first[e.b] = true
	}
	return m
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
