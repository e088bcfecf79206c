package automaton

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

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

// ParseRegexp parses a regular expression with Go's regexp/syntax, Perl
// flags (as package regexp does).
func ParseRegexp(expr string) (*syntax.Regexp, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRegexp, err)
	}
	return re.Simplify(), nil
}
