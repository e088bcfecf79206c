package grammar

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// dfa is a deterministic automaton over bytes. Every path it accepts is
// valid UTF-8 (it is built from runes), and every state it keeps can
// still reach an accepting one: dead transitions are -1.
type dfa struct {
	class  [256]uint8
	nclass int
	trans  []int32 // [state*nclass + class]
	accept []bool
	start  int32 // -1 when it accepts nothing
	// shared marks an automaton built once per process (a format's):
	// its token classes are kept with the vocabulary, for every request.
	shared bool
}

func (d *dfa) next(q int32, b byte) int32 { return d.trans[int(q)*d.nclass+int(d.class[b])] }

func (d *dfa) states() int { return len(d.accept) }

// ErrRegexp is wrapped by the errors of regular expressions the package
// cannot turn into an automaton.
var ErrRegexp = errors.New("grammar: unsupported regular expression")

// maxDFAStates bounds the determinization of one expression.
const maxDFAStates = 20000

// maxDFAWork bounds the steps of one determinization, so that a hostile
// expression cannot take seconds to compile.
const maxDFAWork = 20_000_000

// maxNFAStates bounds the expansion of counted repeats.
const maxNFAStates = 200000

type nop uint8

const (
	nByte  nop = iota // consumes a byte in [lo, hi], then out
	nSplit            // out and out1, without consuming
	nBegin            // at the start of the text only, then out
	nEnd              // at the end of the text only, then out
	nMatch
	nFail
)

type nstate struct {
	op     nop
	lo, hi byte
	out    int32
	out1   int32
}

type nfa struct {
	st    []nstate
	bytes map[[3]int32]int32 // shared byte states by (lo, hi, out)
}

func (n *nfa) add(s nstate) (int32, error) {
	if len(n.st) >= maxNFAStates {
		return 0, fmt.Errorf("%w: more than %d states (a large counted repeat?)", ErrRegexp, maxNFAStates)
	}
	n.st = append(n.st, s)
	return int32(len(n.st) - 1), nil
}

func (n *nfa) byteState(lo, hi byte, out int32) (int32, error) {
	k := [3]int32{int32(lo), int32(hi), out}
	if s, ok := n.bytes[k]; ok {
		return s, nil
	}
	s, err := n.add(nstate{op: nByte, lo: lo, hi: hi, out: out})
	if err == nil {
		n.bytes[k] = s
	}
	return s, err
}

func (n *nfa) split(a, b int32) (int32, error) {
	return n.add(nstate{op: nSplit, out: a, out1: b})
}

// runeRanges compiles a set of rune ranges (pairs lo, hi) into states
// that consume one UTF-8 encoded rune of the set, then go to next. The
// encodings' byte ranges are merged into a trie first, so that a large
// class (\pL, say) starts with a few states, not thousands.
func (n *nfa) runeRanges(ranges []rune, next int32) (int32, error) {
	root := &rnode{}
	for k := 0; k+1 < len(ranges); k += 2 {
		utf8Sequences(ranges[k], ranges[k+1], func(seq [][2]byte) {
			cur := root
			for i, r := range seq {
				if i == len(seq)-1 {
					cur.edges = append(cur.edges, redge{lo: r[0], hi: r[1]})
					break
				}
				var child *rnode
				for _, e := range cur.edges {
					if e.lo == r[0] && e.hi == r[1] && e.child != nil {
						child = e.child
						break
					}
				}
				if child == nil {
					child = &rnode{}
					cur.edges = append(cur.edges, redge{lo: r[0], hi: r[1], child: child})
				}
				cur = child
			}
		})
	}
	var emit func(r *rnode) (int32, error)
	emit = func(r *rnode) (int32, error) {
		alts := make([]int32, 0, len(r.edges))
		for _, e := range r.edges {
			to := next
			if e.child != nil {
				var err error
				if to, err = emit(e.child); err != nil {
					return 0, err
				}
			}
			s, err := n.byteState(e.lo, e.hi, to)
			if err != nil {
				return 0, err
			}
			alts = append(alts, s)
		}
		return n.alternate(alts)
	}
	return emit(root)
}

// rnode is a node of the trie of a class's UTF-8 byte ranges.
type rnode struct {
	edges []redge
}

type redge struct {
	lo, hi byte
	child  *rnode // nil for the last byte
}

func (n *nfa) alternate(alts []int32) (int32, error) {
	if len(alts) == 0 {
		return n.add(nstate{op: nFail})
	}
	s := alts[len(alts)-1]
	for k := len(alts) - 2; k >= 0; k-- {
		var err error
		if s, err = n.split(alts[k], s); err != nil {
			return 0, err
		}
	}
	return s, nil
}

// utf8Sequences calls emit with the byte ranges of the UTF-8 encodings
// of the runes lo..hi (surrogates excluded), as sequences of ranges each
// of which covers a rectangle of encodings.
func utf8Sequences(lo, hi rune, emit func([][2]byte)) {
	if lo < 0 {
		lo = 0
	}
	if hi > unicode.MaxRune {
		hi = unicode.MaxRune
	}
	if lo > hi {
		return
	}
	// Leave out the surrogates, which UTF-8 cannot encode.
	if lo < 0xD800 && hi > 0xDFFF {
		utf8Sequences(lo, 0xD7FF, emit)
		utf8Sequences(0xE000, hi, emit)
		return
	}
	if lo >= 0xD800 && lo <= 0xDFFF {
		lo = 0xE000
	}
	if hi >= 0xD800 && hi <= 0xDFFF {
		hi = 0xD7FF
	}
	if lo > hi {
		return
	}
	// Split at the boundaries of encoded lengths.
	for _, b := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= b && hi > b {
			utf8Sequences(lo, b, emit)
			utf8Sequences(b+1, hi, emit)
			return
		}
	}
	if hi < 0x80 {
		emit([][2]byte{{byte(lo), byte(hi)}})
		return
	}
	// Split until every continuation position spans a full or aligned
	// range.
	for i := 1; i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, (hi&^m)-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	na := utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([][2]byte, na)
	for k := range na {
		seq[k] = [2]byte{a[k], b[k]}
	}
	emit(seq)
}

var anyRune = []rune{0, unicode.MaxRune}

// compile compiles re into states that then go to next.
func (n *nfa) compile(re *syntax.Regexp, next int32) (int32, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return n.add(nstate{op: nFail})
	case syntax.OpEmptyMatch:
		return next, nil
	case syntax.OpLiteral:
		s := next
		for k := len(re.Rune) - 1; k >= 0; k-- {
			r := re.Rune[k]
			ranges := []rune{r, r}
			if re.Flags&syntax.FoldCase != 0 {
				ranges = foldRanges(r)
			}
			var err error
			if s, err = n.runeRanges(ranges, s); err != nil {
				return 0, err
			}
		}
		return s, nil
	case syntax.OpCharClass:
		return n.runeRanges(re.Rune, next)
	case syntax.OpAnyCharNotNL:
		return n.runeRanges([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}, next)
	case syntax.OpAnyChar:
		return n.runeRanges(anyRune, next)
	case syntax.OpBeginText:
		return n.add(nstate{op: nBegin, out: next})
	case syntax.OpEndText:
		return n.add(nstate{op: nEnd, out: next})
	case syntax.OpBeginLine, syntax.OpEndLine:
		return 0, fmt.Errorf("%w: multi-line anchors (the m flag) are not supported", ErrRegexp)
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, fmt.Errorf("%w: word boundaries (\\b, \\B) are not supported", ErrRegexp)
	case syntax.OpCapture:
		return n.compile(re.Sub[0], next)
	case syntax.OpStar:
		return n.star(re.Sub[0], next)
	case syntax.OpPlus:
		s, err := n.star(re.Sub[0], next)
		if err != nil {
			return 0, err
		}
		return n.compile(re.Sub[0], s)
	case syntax.OpQuest:
		body, err := n.compile(re.Sub[0], next)
		if err != nil {
			return 0, err
		}
		return n.split(body, next)
	case syntax.OpRepeat:
		tail := next
		var err error
		if re.Max < 0 {
			if tail, err = n.star(re.Sub[0], next); err != nil {
				return 0, err
			}
		} else {
			for k := re.Min; k < re.Max; k++ {
				body, err := n.compile(re.Sub[0], tail)
				if err != nil {
					return 0, err
				}
				if tail, err = n.split(body, next); err != nil {
					return 0, err
				}
			}
		}
		for k := 0; k < re.Min; k++ {
			if tail, err = n.compile(re.Sub[0], tail); err != nil {
				return 0, err
			}
		}
		return tail, nil
	case syntax.OpConcat:
		s := next
		for k := len(re.Sub) - 1; k >= 0; k-- {
			var err error
			if s, err = n.compile(re.Sub[k], s); err != nil {
				return 0, err
			}
		}
		return s, nil
	case syntax.OpAlternate:
		alts := make([]int32, len(re.Sub))
		for k, sub := range re.Sub {
			var err error
			if alts[k], err = n.compile(sub, next); err != nil {
				return 0, err
			}
		}
		return n.alternate(alts)
	}
	return 0, fmt.Errorf("%w: operator %v", ErrRegexp, re.Op)
}

// star compiles sub* followed by next.
func (n *nfa) star(sub *syntax.Regexp, next int32) (int32, error) {
	s, err := n.split(-1, next)
	if err != nil {
		return 0, err
	}
	body, err := n.compile(sub, s)
	if err != nil {
		return 0, err
	}
	n.st[s].out = body
	return s, nil
}

// anyStar compiles (?s:.)* followed by next.
func (n *nfa) anyStar(next int32) (int32, error) {
	s, err := n.split(-1, next)
	if err != nil {
		return 0, err
	}
	body, err := n.runeRanges(anyRune, s)
	if err != nil {
		return 0, err
	}
	n.st[s].out = body
	return s, nil
}

// foldRanges returns the ranges of the runes equal to r under simple case
// folding.
func foldRanges(r rune) []rune {
	rs := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		rs = append(rs, f)
	}
	slices.Sort(rs)
	out := make([]rune, 0, 2*len(rs))
	for _, x := range rs {
		out = append(out, x, x)
	}
	return out
}

// parseRegexp parses a regular expression with Go's regexp/syntax, Perl
// flags (as package regexp does).
func parseRegexp(expr string) (*syntax.Regexp, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRegexp, err)
	}
	return re.Simplify(), nil
}

// compileDFA builds the DFA of re: anchored, it accepts exactly the texts
// re matches as a whole; unanchored (search), the texts that contain a
// match, as JSON Schema's pattern means.
func compileDFA(re *syntax.Regexp, search bool) (*dfa, error) {
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

// literalsDFA builds the DFA accepting exactly the given strings.
func literalsDFA(lits []string) (*dfa, error) {
	re := &syntax.Regexp{Op: syntax.OpAlternate}
	for _, l := range lits {
		re.Sub = append(re.Sub, &syntax.Regexp{Op: syntax.OpLiteral, Rune: []rune(l)})
	}
	if len(re.Sub) == 0 {
		re = &syntax.Regexp{Op: syntax.OpNoMatch}
	}
	return compileDFA(re, false)
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
func (n *nfa) determinize(start int32) (*dfa, error) {
	d := &dfa{}
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
	d.accept = make([]bool, len(states))
	for q, s := range states {
		d.accept[q] = s.accept
	}
	d.start = q0
	d.prune()
	return d, nil
}

// prune drops the states that cannot reach acceptance and renumbers the
// rest; start becomes -1 if it is one of them.
func (d *dfa) prune() {
	ns := d.states()
	live := make([]bool, ns)
	for q := range ns {
		live[q] = d.accept[q]
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
		accept = append(accept, d.accept[q])
	}
	d.trans, d.accept = trans, accept
	if d.start >= 0 {
		d.start = renum[d.start]
	}
}

// product returns the DFA of the texts a accepts and b accepts (andNot
// false), or that a accepts and b does not (andNot true).
func product(a, b *dfa, andNot bool) (*dfa, error) {
	d := &dfa{}
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
	if a.start < 0 || (!andNot && b.start < 0) {
		return &dfa{nclass: 1, start: -1}, nil
	}
	q0, err := intern(a.start, b.start)
	if err != nil {
		return nil, err
	}
	for q := 0; q < len(states); q++ {
		p := states[q]
		for _, rep := range reps {
			x := a.next(p.x, rep)
			y := int32(-1)
			if p.y >= 0 {
				y = b.next(p.y, rep)
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
	d.accept = make([]bool, len(states))
	for q, p := range states {
		bacc := p.y >= 0 && b.accept[p.y]
		if andNot {
			d.accept[q] = a.accept[p.x] && !bacc
		} else {
			d.accept[q] = a.accept[p.x] && bacc
		}
	}
	d.start = q0
	d.prune()
	return d, nil
}

// matches reports whether d accepts s (for tests and enum filtering).
func (d *dfa) matches(s string) bool {
	q := d.start
	for k := 0; k < len(s) && q >= 0; k++ {
		q = d.next(q, s[k])
	}
	return q >= 0 && d.accept[q]
}
