package lexer

import "github.com/k3go/k3/grammar/internal/automaton"

// String is a string: JSON (quoted, with escapes) or raw (its characters
// as they are, ended by whatever follows). Its characters (code points,
// as JSON Schema counts them) number between min and max, and its
// content, escapes decoded, is accepted by dfa (nil: any content).
//
// Package grammar keeps a string's lexer state in its frame: the
// sub-state, the dfa state and the number of characters so far. Without a dfa the lexer checks
// UTF-8 itself; with one, the dfa does (it only accepts valid UTF-8), and
// \u escapes are not offered, so that the dfa sees each character whole.
type String struct {
	Raw      bool
	DFA      *automaton.DFA
	Min, Max uint32          // Max may be automaton.Unbounded
	Lens     *automaton.Lens // nil: no bound beyond what DFA accepts
}

// Sub-states of the string lexer.
const (
	SubStart  = iota // before the opening quote (a raw string starts normal)
	SubNormal        // between characters
	SubEsc           // after a backslash
	SubU0            // after \u, 0..3 hex digits read; U1D after a first d or D
	SubU1
	SubU1D
	SubU2
	SubU3
	SubC1 // UTF-8: 1, 2 or 3 continuation bytes to go
	SubC2
	SubC3
	SubE0 // after E0: A0..BF, then 1
	SubED // after ED: 80..9F, then 1
	SubF0 // after F0: 90..BF, then 2
	SubF4 // after F4: 80..8F, then 2
	SubClosed
	NumSubStates
)

// escapeByte is the byte a one-letter JSON escape stands for, 0 if none.
var escapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func isHex(b byte) bool { return b-'0' < 10 || (b|0x20)-'a' < 6 }

// lex moves the lexer over byte b from sub-state sub and dfa state q. It
// returns the new sub-state and dfa state, whether a character started
// (counted once, at its first byte), and false if b cannot come here. A
// closing quote is not checked against the bounds here.
func (s *String) Lex(sub uint8, q int32, b byte) (uint8, int32, bool, bool) {
	if sub == SubStart {
		if s.Raw {
			sub = SubNormal
		} else {
			return SubNormal, q, false, b == '"'
		}
	}
	switch sub {
	case SubNormal:
		if !s.Raw {
			switch {
			case b == '"':
				return SubClosed, q, false, true
			case b == '\\':
				return SubEsc, q, true, s.DFA == nil || s.escapeLeads(q)
			case b < 0x20:
				return 0, 0, false, false
			}
		}
		if s.DFA != nil {
			nq := s.DFA.Next(q, b)
			return SubNormal, nq, b < 0x80 || b >= 0xC0, nq >= 0
		}
		switch {
		case b < 0x80:
			return SubNormal, q, true, true
		case b < 0xC2:
			return 0, 0, false, false
		case b < 0xE0:
			return SubC1, q, true, true
		case b == 0xE0:
			return SubE0, q, true, true
		case b == 0xED:
			return SubED, q, true, true
		case b < 0xF0:
			return SubC2, q, true, true
		case b == 0xF0:
			return SubF0, q, true, true
		case b < 0xF4:
			return SubC3, q, true, true
		case b == 0xF4:
			return SubF4, q, true, true
		}
		return 0, 0, false, false
	case SubEsc:
		if e := escapeByte[b]; e != 0 {
			if s.DFA != nil {
				nq := s.DFA.Next(q, e)
				return SubNormal, nq, false, nq >= 0
			}
			return SubNormal, q, false, true
		}
		if b == 'u' && s.DFA == nil {
			return SubU0, q, false, true
		}
		return 0, 0, false, false
	case SubU0:
		switch {
		case b == 'd' || b == 'D':
			return SubU1D, q, false, true // no surrogates: the next digit is 0..7
		case isHex(b):
			return SubU1, q, false, true
		}
	case SubU1D:
		if b >= '0' && b <= '7' {
			return SubU2, q, false, true
		}
	case SubU1:
		if isHex(b) {
			return SubU2, q, false, true
		}
	case SubU2:
		if isHex(b) {
			return SubU3, q, false, true
		}
	case SubU3:
		if isHex(b) {
			return SubNormal, q, false, true
		}
	case SubC1:
		if b >= 0x80 && b < 0xC0 {
			return SubNormal, q, false, true
		}
	case SubC2:
		if b >= 0x80 && b < 0xC0 {
			return SubC1, q, false, true
		}
	case SubC3:
		if b >= 0x80 && b < 0xC0 {
			return SubC2, q, false, true
		}
	case SubE0:
		if b >= 0xA0 && b < 0xC0 {
			return SubC1, q, false, true
		}
	case SubED:
		if b >= 0x80 && b < 0xA0 {
			return SubC1, q, false, true
		}
	case SubF0:
		if b >= 0x90 && b < 0xC0 {
			return SubC2, q, false, true
		}
	case SubF4:
		if b >= 0x80 && b < 0x90 {
			return SubC2, q, false, true
		}
	}
	return 0, 0, false, false
}

// escapeLeads reports whether some one-letter escape can follow a
// backslash at dfa state q.
func (s *String) escapeLeads(q int32) bool {
	for _, e := range escaped {
		if s.DFA.Next(q, e) >= 0 {
			return true
		}
	}
	return false
}

// escaped lists the bytes the one-letter escapes stand for.
var escaped = [...]byte{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'}

// startQ returns the dfa state at the start of the content.
func (s *String) StartQ() int32 {
	if s.DFA == nil {
		return 0
	}
	return s.DFA.Start
}

// live reports whether a string at sub-state sub, dfa state q, with n
// characters so far can still end within its bounds.
func (s *String) Live(sub uint8, q int32, n uint32) bool {
	if n > s.Max {
		return false
	}
	if s.Lens == nil {
		return true
	}
	if sub == SubEsc {
		// The escaped character is counted; one of the escapes must lead
		// on.
		for _, e := range escaped {
			if nq := s.DFA.Next(q, e); nq >= 0 && s.Lens.OK(nq, n, s.Min, s.Max) {
				return true
			}
		}
		return false
	}
	return s.Lens.OK(q, n, s.Min, s.Max)
}

// closable reports whether the string may end at dfa state q with n
// characters.
func (s *String) Closable(q int32, n uint32) bool {
	return n >= s.Min && n <= s.Max && (s.DFA == nil || s.DFA.Accept[q])
}

// Nullable reports whether the string may be empty (a raw one only).
func (s *String) Nullable() bool { return s.Raw && s.Closable(s.StartQ(), 0) }

// first sets the bytes the string can start with.
func (s *String) First(dst []uint64) {
	if !s.Raw {
		setBit(dst, '"')
		return
	}
	for b := range 256 {
		if _, _, _, ok := s.Lex(SubNormal, s.StartQ(), byte(b)); ok {
			setBit(dst, b)
		}
	}
}

// feasible reports whether the string has any valid value.
func (s *String) Feasible() bool {
	if s.Min > s.Max {
		return false
	}
	if s.DFA == nil {
		return true
	}
	if s.DFA.Start < 0 {
		return false
	}
	if s.Lens == nil {
		return true
	}
	return s.Lens.OK(s.DFA.Start, 0, s.Min, s.Max)
}

func setBit(s []uint64, k int) { s[k>>6] |= 1 << (k & 63) }
