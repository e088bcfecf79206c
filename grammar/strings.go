package grammar

import "github.com/k3go/k3/grammar/internal/lexer"

// A string frame keeps the lexer's sub-state in a, the dfa state in b and
// the number of characters so far in c (see lexer.String).

// stepString feeds symbol x to a string frame. It returns the new frame and
// whether x was taken; done means the string is complete and x belongs to
// what follows.
func stepString(s *lexer.String, f frame, x sym) (frame, bool, bool) {
	sub := uint8(f.a)
	q := int32(f.b)
	if sub == lexer.SubStart {
		q = s.StartQ()
	}
	if sub == lexer.SubClosed {
		return f, false, true
	}
	if x >= symSpecial0 {
		// A special token ends a raw string, if it may end here.
		if s.Raw && (sub == lexer.SubStart || sub == lexer.SubNormal) && s.Closable(q, f.c) {
			return f, false, true
		}
		return f, false, false
	}
	nsub, nq, char, ok := s.Lex(sub, q, byte(x))
	if !ok {
		return f, false, false
	}
	n := f.c
	if char {
		n++
	}
	if nsub == lexer.SubClosed {
		if !s.Closable(q, n) {
			return f, false, false
		}
	} else if !s.Live(nsub, nq, n) {
		return f, false, false
	}
	f.a, f.b, f.c = uint32(nsub), uint32(nq), n
	return f, true, false
}

// stringCanEnd reports whether the string may end in frame f.
func stringCanEnd(s *lexer.String, f frame) bool {
	sub := uint8(f.a)
	if !s.Raw {
		return sub == lexer.SubClosed
	}
	if sub == lexer.SubStart {
		return s.Closable(s.StartQ(), 0)
	}
	return sub == lexer.SubNormal && s.Closable(int32(f.b), f.c)
}
