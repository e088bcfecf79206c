package grammar

import "github.com/k3go/k3/grammar/internal/automaton"

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
	dfa      *automaton.DFA
	min, max uint32          // max may be unbounded
	lens     *automaton.Lens // nil: no bound beyond what dfa accepts
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
			nq := s.dfa.Next(q, b)
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
				nq := s.dfa.Next(q, e)
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
		if s.dfa.Next(q, e) >= 0 {
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
	return s.dfa.Start
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
			if nq := s.dfa.Next(q, e); nq >= 0 && s.lens.OK(nq, n, s.min, s.max) {
				return true
			}
		}
		return false
	}
	return s.lens.OK(q, n, s.min, s.max)
}

// closable reports whether the string may end at dfa state q with n
// characters.
func (s *strSpec) closable(q int32, n uint32) bool {
	return n >= s.min && n <= s.max && (s.dfa == nil || s.dfa.Accept[q])
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
	if s.dfa.Start < 0 {
		return false
	}
	if s.lens == nil {
		return true
	}
	return s.lens.OK(s.dfa.Start, 0, s.min, s.max)
}
