package automaton

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
)

// DFA is a deterministic automaton over bytes. Every path it accepts is
// valid UTF-8 (it is built from runes), and every state it keeps can
// still reach an accepting one: dead transitions are -1.
type DFA struct {
	class  [256]uint8
	nclass int
	trans  []int32 // [state*nclass + class]
	// Accept marks the accepting states.
	Accept []bool
	// Start is the start state, -1 when the automaton accepts nothing.
	Start int32
	// Shared marks an automaton built once per process (a format's):
	// its token classes are kept with the vocabulary, for every request.
	Shared bool
}

// Next returns the state after byte b from state q, -1 if b is refused.
func (d *DFA) Next(q int32, b byte) int32 { return d.trans[int(q)*d.nclass+int(d.class[b])] }

// States returns the number of states.
func (d *DFA) States() int { return len(d.Accept) }

// ErrRegexp is wrapped by the errors of regular expressions the package
// cannot turn into an automaton.
var ErrRegexp = errors.New("grammar: unsupported regular expression")

// ErrUnsupported is wrapped by the errors of bounds the package cannot
// enforce (package grammar exports it as its own ErrUnsupported).
var ErrUnsupported = errors.New("not supported")

// Compile builds the DFA of re: anchored, it accepts exactly the texts
// re matches as a whole; unanchored (search), the texts that contain a
// match, as JSON Schema's pattern means.
func Compile(re *syntax.Regexp, search bool) (*DFA, error) {
	n := &nfa{bytes: map[[3]int32]int32{}}
	final, err := n.add(nstate{op: nMatch})
	if err != nil {
		return nil, err
	}
	tail := final
	if search {
		if tail, err = n.anyStar(final); err != nil {
			return nil, err
		}
	}
	start, err := n.compile(re, tail)
	if err != nil {
		return nil, err
	}
	if search {
		if start, err = n.anyStar(start); err != nil {
			return nil, err
		}
	}
	return n.determinize(start)
}

// Literals builds the DFA accepting exactly the given strings.
func Literals(lits []string) (*DFA, error) {
	re := &syntax.Regexp{Op: syntax.OpAlternate}
	for _, l := range lits {
		re.Sub = append(re.Sub, &syntax.Regexp{Op: syntax.OpLiteral, Rune: []rune(l)})
	}
	if len(re.Sub) == 0 {
		re = &syntax.Regexp{Op: syntax.OpNoMatch}
	}
	return Compile(re, false)
}

// closure adds to set the states reachable from s without consuming:
// through splits, begin assertions when atStart, and end assertions when
// atEnd.
func (n *nfa) closure(s int32, atStart, atEnd bool, seen []uint32, mark uint32, set []int32) []int32 {
	stack := []int32{s}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s < 0 || seen[s] == mark {
			continue
		}
		seen[s] = mark
		st := &n.st[s]
		switch st.op {
		case nSplit:
			stack = append(stack, st.out1, st.out)
		case nBegin:
			if atStart {
				stack = append(stack, st.out)
			}
		case nEnd:
			if atEnd {
				stack = append(stack, st.out)
			}
		case nByte, nMatch:
			set = append(set, s)
		}
	}
	return set
}

// determinize runs the subset construction from start and drops the
// states that cannot reach acceptance.
func (n *nfa) determinize(start int32) (*DFA, error) {
	d := &DFA{}
	// Byte classes: bytes no range boundary separates behave alike. 0x80
	// and 0xC0 split too, so a class is all continuation bytes or none.
	var cut [257]bool
	cut[0], cut[0x80], cut[0xC0], cut[256] = true, true, true, true
	for _, st := range n.st {
		if st.op == nByte {
			cut[st.lo] = true
			cut[int(st.hi)+1] = true
		}
	}
	c := -1
	for b := range 256 {
		if cut[b] {
			c++
		}
		d.class[b] = uint8(c)
	}
	d.nclass = c + 1

	seen := make([]uint32, len(n.st))
	mark := uint32(0)
	type dstate struct {
		set    []int32
		accept bool
	}
	var states []dstate
	index := map[string]int32{}
	var key strings.Builder
	intern := func(set []int32, accept bool) (int32, error) {
		slices.Sort(set)
		key.Reset()
		if accept {
			key.WriteByte(1)
		} else {
			key.WriteByte(0)
		}
		for _, s := range set {
			key.WriteByte(byte(s))
			key.WriteByte(byte(s >> 8))
			key.WriteByte(byte(s >> 16))
		}
		if id, ok := index[key.String()]; ok {
			return id, nil
		}
		if len(states) >= maxDFAStates {
			return 0, fmt.Errorf("%w: more than %d automaton states", ErrRegexp, maxDFAStates)
		}
		id := int32(len(states))
		index[key.String()] = id
		states = append(states, dstate{set: slices.Clone(set), accept: accept})
		return id, nil
	}
	accepts := func(seeds []int32, atStart bool) bool {
		mark++
		for _, s := range seeds {
			for _, x := range n.closure(s, atStart, true, seen, mark, nil) {
				if n.st[x].op == nMatch {
					return true
				}
			}
		}
		return false
	}
	// The start state is the closure at the start of the text.
	mark++
	set := n.closure(start, true, false, seen, mark, nil)
	q0, err := intern(set, accepts([]int32{start}, true))
	if err != nil {
		return nil, err
	}
	var trans []int32
	moves := make([][]int32, d.nclass)
	work := 0
	for q := 0; q < len(states); q++ {
		for c := range moves {
			moves[c] = moves[c][:0]
		}
		for _, s := range states[q].set {
			st := &n.st[s]
			if st.op != nByte {
				continue
			}
			for c := int(d.class[st.lo]); c <= int(d.class[st.hi]); c++ {
				moves[c] = append(moves[c], st.out)
			}
			work += int(d.class[st.hi]) - int(d.class[st.lo]) + 1
		}
		for c := range d.nclass {
			moved := moves[c]
			if len(moved) == 0 {
				trans = append(trans, -1)
				continue
			}
			mark++
			var next []int32
			for _, s := range moved {
				next = n.closure(s, false, false, seen, mark, next)
			}
			work += len(next) + len(moved)
			if work > maxDFAWork {
				return nil, fmt.Errorf("%w: too complex to turn into an automaton", ErrRegexp)
			}
			id, err := intern(next, accepts(moved, false))
			if err != nil {
				return nil, err
			}
			trans = append(trans, id)
		}
	}
	d.trans = trans
	d.Accept = make([]bool, len(states))
	for q, s := range states {
		d.Accept[q] = s.accept
	}
	d.Start = q0
	d.prune()
	return d, nil
}

// prune drops the states that cannot reach acceptance and renumbers the
// rest; start becomes -1 if it is one of them.
func (d *DFA) prune() {
	ns := d.States()
	live := make([]bool, ns)
	for q := range ns {
		live[q] = d.Accept[q]
	}
	for changed := true; changed; {
		changed = false
		for q := range ns {
			if live[q] {
				continue
			}
			for c := range d.nclass {
				if t := d.trans[q*d.nclass+c]; t >= 0 && live[t] {
					live[q] = true
					changed = true
					break
				}
			}
		}
	}
	renum := make([]int32, ns)
	k := int32(0)
	for q := range ns {
		renum[q] = -1
		if live[q] {
			renum[q] = k
			k++
		}
	}
	trans := make([]int32, 0, int(k)*d.nclass)
	accept := make([]bool, 0, k)
	for q := range ns {
		if !live[q] {
			continue
		}
		for c := range d.nclass {
			t := d.trans[q*d.nclass+c]
			if t >= 0 {
				t = renum[t]
			}
			trans = append(trans, t)
		}
		accept = append(accept, d.Accept[q])
	}
	d.trans, d.Accept = trans, accept
	if d.Start >= 0 {
		d.Start = renum[d.Start]
	}
}

// product returns the DFA of the texts a accepts and b accepts (andNot
// false), or that a accepts and b does not (andNot true).
func Product(a, b *DFA, andNot bool) (*DFA, error) {
	d := &DFA{}
	pairs := map[[2]int32]int32{}
	type pair struct{ x, y int32 }
	var states []pair
	// The classes of the product refine both.
	classOf := map[[2]uint8]uint8{}
	var reps []byte
	for bt := range 256 {
		k := [2]uint8{a.class[bt], b.class[bt]}
		c, ok := classOf[k]
		if !ok {
			c = uint8(len(classOf))
			classOf[k] = c
			reps = append(reps, byte(bt))
		}
		d.class[bt] = c
	}
	d.nclass = len(reps)
	intern := func(x, y int32) (int32, error) {
		if id, ok := pairs[[2]int32{x, y}]; ok {
			return id, nil
		}
		if len(states) >= maxDFAStates {
			return 0, fmt.Errorf("%w: more than %d automaton states", ErrRegexp, maxDFAStates)
		}
		id := int32(len(states))
		pairs[[2]int32{x, y}] = id
		states = append(states, pair{x, y})
		return id, nil
	}
	if a.Start < 0 || (!andNot && b.Start < 0) {
		return &DFA{nclass: 1, Start: -1}, nil
	}
	q0, err := intern(a.Start, b.Start)
	if err != nil {
		return nil, err
	}
	for q := 0; q < len(states); q++ {
		p := states[q]
		for _, rep := range reps {
			x := a.Next(p.x, rep)
			y := int32(-1)
			if p.y >= 0 {
				y = b.Next(p.y, rep)
			}
			if x < 0 || (!andNot && y < 0) {
				d.trans = append(d.trans, -1)
				continue
			}
			id, err := intern(x, y)
			if err != nil {
				return nil, err
			}
			d.trans = append(d.trans, id)
		}
	}
	d.Accept = make([]bool, len(states))
	for q, p := range states {
		bacc := p.y >= 0 && b.Accept[p.y]
		if andNot {
			d.Accept[q] = a.Accept[p.x] && !bacc
		} else {
			d.Accept[q] = a.Accept[p.x] && bacc
		}
	}
	d.Start = q0
	d.prune()
	return d, nil
}

// matches reports whether d accepts s (for tests and enum filtering).
func (d *DFA) Matches(s string) bool {
	q := d.Start
	for k := 0; k < len(s) && q >= 0; k++ {
		q = d.Next(q, s[k])
	}
	return q >= 0 && d.Accept[q]
}
