package grammar

import "fmt"

// strSpec is a string: JSON (quoted, with escapes) or raw (its characters
// as they are, ended by whatever follows). Its characters (code points,
// as JSON Schema counts them) number between min and max, and its
// content, escapes decoded, is accepted by dfa (nil: any content).
//
// A string frame keeps the lexer's sub-state in a, the dfa state in b and
// the number of characters so far in c. Without a dfa the lexer checks
// UTF-8 itself; with one, the dfa does (it only accepts valid UTF-8), and
// \u escapes are not offered, so that the dfa sees each character whole.
type strSpec struct {
	raw      bool
	dfa      *dfa
	min, max uint32 // max may be unbounded
	lens     *lens  // nil: no bound beyond what dfa accepts
}

// Sub-states of the string lexer.
const (
	sqStart  = iota // before the opening quote (a raw string starts normal)
	sqNormal        // between characters
	sqEsc           // after a backslash
	sqU0            // after \u, 0..3 hex digits read; U1D after a first d or D
	sqU1
	sqU1D
	sqU2
	sqU3
	sqC1 // UTF-8: 1, 2 or 3 continuation bytes to go
	sqC2
	sqC3
	sqE0 // after E0: A0..BF, then 1
	sqED // after ED: 80..9F, then 1
	sqF0 // after F0: 90..BF, then 2
	sqF4 // after F4: 80..8F, then 2
	sqClosed
	numSubStates
)

// escapeByte is the byte a one-letter JSON escape stands for, 0 if none.
var escapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func isHex(b byte) bool { return b-'0' < 10 || (b|0x20)-'a' < 6 }

// lex moves the lexer over byte b from sub-state sub and dfa state q. It
// returns the new sub-state and dfa state, whether a character started
// (counted once, at its first byte), and false if b cannot come here. A
// closing quote is not checked against the bounds here.
func (s *strSpec) lex(sub uint8, q int32, b byte) (uint8, int32, bool, bool) {
	if sub == sqStart {
		if s.raw {
			sub = sqNormal
		} else {
			return sqNormal, q, false, b == '"'
		}
	}
	switch sub {
	case sqNormal:
		if !s.raw {
			switch {
			case b == '"':
				return sqClosed, q, false, true
			case b == '\\':
				return sqEsc, q, true, s.dfa == nil || s.escapeLeads(q)
			case b < 0x20:
				return 0, 0, false, false
			}
		}
		if s.dfa != nil {
			nq := s.dfa.next(q, b)
			return sqNormal, nq, b < 0x80 || b >= 0xC0, nq >= 0
		}
		switch {
		case b < 0x80:
			return sqNormal, q, true, true
		case b < 0xC2:
			return 0, 0, false, false
		case b < 0xE0:
			return sqC1, q, true, true
		case b == 0xE0:
			return sqE0, q, true, true
		case b == 0xED:
			return sqED, q, true, true
		case b < 0xF0:
			return sqC2, q, true, true
		case b == 0xF0:
			return sqF0, q, true, true
		case b < 0xF4:
			return sqC3, q, true, true
		case b == 0xF4:
			return sqF4, q, true, true
		}
		return 0, 0, false, false
	case sqEsc:
		if e := escapeByte[b]; e != 0 {
			if s.dfa != nil {
				nq := s.dfa.next(q, e)
				return sqNormal, nq, false, nq >= 0
			}
			return sqNormal, q, false, true
		}
		if b == 'u' && s.dfa == nil {
			return sqU0, q, false, true
		}
		return 0, 0, false, false
	case sqU0:
		switch {
		case b == 'd' || b == 'D':
			return sqU1D, q, false, true // no surrogates: the next digit is 0..7
		case isHex(b):
			return sqU1, q, false, true
		}
	case sqU1D:
		if b >= '0' && b <= '7' {
			return sqU2, q, false, true
		}
	case sqU1:
		if isHex(b) {
			return sqU2, q, false, true
		}
	case sqU2:
		if isHex(b) {
			return sqU3, q, false, true
		}
	case sqU3:
		if isHex(b) {
			return sqNormal, q, false, true
		}
	case sqC1:
		if b >= 0x80 && b < 0xC0 {
			return sqNormal, q, false, true
		}
	case sqC2:
		if b >= 0x80 && b < 0xC0 {
			return sqC1, q, false, true
		}
	case sqC3:
		if b >= 0x80 && b < 0xC0 {
			return sqC2, q, false, true
		}
	case sqE0:
		if b >= 0xA0 && b < 0xC0 {
			return sqC1, q, false, true
		}
	case sqED:
		if b >= 0x80 && b < 0xA0 {
			return sqC1, q, false, true
		}
	case sqF0:
		if b >= 0x90 && b < 0xC0 {
			return sqC2, q, false, true
		}
	case sqF4:
		if b >= 0x80 && b < 0x90 {
			return sqC2, q, false, true
		}
	}
	return 0, 0, false, false
}

// escapeLeads reports whether some one-letter escape can follow a
// backslash at dfa state q.
func (s *strSpec) escapeLeads(q int32) bool {
	for _, e := range escaped {
		if s.dfa.next(q, e) >= 0 {
			return true
		}
	}
	return false
}

// escaped lists the bytes the one-letter escapes stand for.
var escaped = [...]byte{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'}

// startQ returns the dfa state at the start of the content.
func (s *strSpec) startQ() int32 {
	if s.dfa == nil {
		return 0
	}
	return s.dfa.start
}

// live reports whether a string at sub-state sub, dfa state q, with n
// characters so far can still end within its bounds.
func (s *strSpec) live(sub uint8, q int32, n uint32) bool {
	if n > s.max {
		return false
	}
	if s.lens == nil {
		return true
	}
	if sub == sqEsc {
		// The escaped character is counted; one of the escapes must lead
		// on.
		for _, e := range escaped {
			if nq := s.dfa.next(q, e); nq >= 0 && s.lens.ok(nq, n, s.min, s.max) {
				return true
			}
		}
		return false
	}
	return s.lens.ok(q, n, s.min, s.max)
}

// closable reports whether the string may end at dfa state q with n
// characters.
func (s *strSpec) closable(q int32, n uint32) bool {
	return n >= s.min && n <= s.max && (s.dfa == nil || s.dfa.accept[q])
}

// step feeds symbol x to a string frame. It returns the new frame and
// whether x was taken; done means the string is complete and x belongs to
// what follows.
func (s *strSpec) step(f frame, x sym) (frame, bool, bool) {
	sub := uint8(f.a)
	q := int32(f.b)
	if sub == sqStart {
		q = s.startQ()
	}
	if sub == sqClosed {
		return f, false, true
	}
	if x >= symSpecial0 {
		// A special token ends a raw string, if it may end here.
		if s.raw && (sub == sqStart || sub == sqNormal) && s.closable(q, f.c) {
			return f, false, true
		}
		return f, false, false
	}
	nsub, nq, char, ok := s.lex(sub, q, byte(x))
	if !ok {
		return f, false, false
	}
	n := f.c
	if char {
		n++
	}
	if nsub == sqClosed {
		if !s.closable(q, n) {
			return f, false, false
		}
	} else if !s.live(nsub, nq, n) {
		return f, false, false
	}
	f.a, f.b, f.c = uint32(nsub), uint32(nq), n
	return f, true, false
}

// canEnd reports whether the string may end in frame f.
func (s *strSpec) canEnd(f frame) bool {
	sub := uint8(f.a)
	if !s.raw {
		return sub == sqClosed
	}
	if sub == sqStart {
		return s.closable(s.startQ(), 0)
	}
	return sub == sqNormal && s.closable(int32(f.b), f.c)
}

func (s *strSpec) nullable() bool { return s.raw && s.closable(s.startQ(), 0) }

// first sets the bytes the string can start with.
func (s *strSpec) first(dst []uint64) {
	if !s.raw {
		setBit(dst, '"')
		return
	}
	for b := range 256 {
		if _, _, _, ok := s.lex(sqNormal, s.startQ(), byte(b)); ok {
			setBit(dst, b)
		}
	}
}

// feasible reports whether the string has any valid value.
func (s *strSpec) feasible() bool {
	if s.min > s.max {
		return false
	}
	if s.dfa == nil {
		return true
	}
	if s.dfa.start < 0 {
		return false
	}
	if s.lens == nil {
		return true
	}
	return s.lens.ok(s.dfa.start, 0, s.min, s.max)
}

// lens tells, for each dfa state, how many more characters an accepted
// content can have from there: bit L of set[q] when some accepted
// continuation has L characters (L <= top), and beyond[q] when one has
// more than top.
type lens struct {
	top    int
	words  int
	set    []uint64 // [q*words + L/64]
	beyond []bool
}

// ok reports whether from state q, with n characters so far, a
// continuation ends with between lo and hi characters in all.
func (l *lens) ok(q int32, n, lo, hi uint32) bool {
	from := 0
	if lo > n {
		from = int(lo - n)
	}
	to := l.top
	if hi != unbounded {
		if n > hi {
			return false
		}
		to = min(to, int(hi-n))
	}
	if hi == unbounded && l.beyond[q] {
		return true
	}
	if from > to {
		return false
	}
	row := l.set[int(q)*l.words : int(q+1)*l.words]
	for w := from >> 6; w <= to>>6; w++ {
		x := row[w]
		if w == from>>6 {
			x &= ^uint64(0) << (from & 63)
		}
		if w == to>>6 && to&63 != 63 {
			x &= 1<<(to&63+1) - 1
		}
		if x != 0 {
			return true
		}
	}
	return false
}

// maxLensWork bounds the work of computing a lens table.
const maxLensWork = 1 << 24

// newLens computes the lens table of d up to top characters, with the
// beyond flags when needed (hi unbounded).
func newLens(d *dfa, top int, needBeyond bool) (*lens, error) {
	ns := d.states()
	if needBeyond {
		top = max(top, ns)
	}
	if work := (top + 1) * ns * d.nclass; work > maxLensWork || top > 1<<20 {
		return nil, fmt.Errorf("%w: length bounds of %d characters with a pattern or format of %d states", ErrUnsupported, top, ns)
	}
	words := (top + 64) / 64
	l := &lens{top: top, words: words, set: make([]uint64, ns*words), beyond: make([]bool, ns)}
	// Reverse edges, split by weight: a byte that starts a character
	// weighs 1, a continuation byte 0.
	rev0 := make([][]int32, ns)
	rev1 := make([][]int32, ns)
	contClass := make([]bool, d.nclass)
	for b := 0x80; b < 0xC0; b++ {
		contClass[d.class[b]] = true
	}
	for q := range ns {
		for c := range d.nclass {
			t := d.trans[q*d.nclass+c]
			if t < 0 {
				continue
			}
			if contClass[c] {
				rev0[t] = append(rev0[t], int32(q))
			} else {
				rev1[t] = append(rev1[t], int32(q))
			}
		}
	}
	cur := make([]bool, ns)
	var stack []int32
	// close0 adds the states that reach a state of cur by continuation
	// bytes only.
	close0 := func() {
		stack = stack[:0]
		for q := range ns {
			if cur[q] {
				stack = append(stack, int32(q))
			}
		}
		for len(stack) > 0 {
			q := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, p := range rev0[q] {
				if !cur[p] {
					cur[p] = true
					stack = append(stack, p)
				}
			}
		}
	}
	for q := range ns {
		cur[q] = d.accept[q]
	}
	next := make([]bool, ns)
	for L := 0; L <= top; L++ {
		close0()
		any := false
		for q := range ns {
			if cur[q] {
				l.set[q*words+L>>6] |= 1 << (L & 63)
				any = true
			}
		}
		if !any {
			break
		}
		clear(next)
		for q := range ns {
			if cur[q] {
				for _, p := range rev1[q] {
					next[p] = true
				}
			}
		}
		cur, next = next, cur
	}
	if needBeyond {
		// Every state can reach acceptance, and no cycle reads
		// continuation bytes only (the dfa accepts valid UTF-8 only), so
		// a continuation longer than ns characters exists exactly when a
		// cycle that reads a character is reachable; shorter ones are in
		// the table, whose top is at least ns.
		onCycle := weightedCycles(d, contClass)
		reach := make([]bool, ns)
		for q := range ns {
			reach[q] = onCycle[q]
		}
		for changed := true; changed; {
			changed = false
			for q := range ns {
				if reach[q] {
					continue
				}
				for c := range d.nclass {
					if t := d.trans[q*d.nclass+c]; t >= 0 && reach[t] {
						reach[q] = true
						changed = true
						break
					}
				}
			}
		}
		copy(l.beyond, reach)
	}
	return l, nil
}

// weightedCycles marks the states on a cycle that reads at least one
// byte starting a character.
func weightedCycles(d *dfa, contClass []bool) []bool {
	ns := d.states()
	// Tarjan's strongly connected components, iteratively.
	index := make([]int32, ns)
	low := make([]int32, ns)
	onStack := make([]bool, ns)
	comp := make([]int32, ns)
	for q := range index {
		index[q] = -1
	}
	var stack []int32
	next := int32(0)
	ncomp := int32(0)
	type item struct {
		q int32
		c int
	}
	for root := range ns {
		if index[root] >= 0 {
			continue
		}
		work := []item{{int32(root), 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, int32(root))
		onStack[root] = true
		for len(work) > 0 {
			it := &work[len(work)-1]
			q := it.q
			if it.c < d.nclass {
				t := d.trans[int(q)*d.nclass+it.c]
				it.c++
				if t < 0 {
					continue
				}
				if index[t] < 0 {
					index[t], low[t] = next, next
					next++
					stack = append(stack, t)
					onStack[t] = true
					work = append(work, item{t, 0})
				} else if onStack[t] {
					low[q] = min(low[q], index[t])
				}
				continue
			}
			if low[q] == index[q] {
				for {
					x := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[x] = false
					comp[x] = ncomp
					if x == q {
						break
					}
				}
				ncomp++
			}
			work = work[:len(work)-1]
			if len(work) > 0 {
				p := work[len(work)-1].q
				low[p] = min(low[p], low[q])
			}
		}
	}
	cyc := make([]bool, ncomp)
	for q := range ns {
		for c := range d.nclass {
			t := d.trans[q*d.nclass+c]
			if t >= 0 && comp[t] == comp[q] && !contClass[c] {
				cyc[comp[q]] = true
			}
		}
	}
	on := make([]bool, ns)
	for q := range ns {
		on[q] = cyc[comp[q]]
	}
	return on
}
