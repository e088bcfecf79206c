package iox

import (
	"strconv"
	"unicode/utf8"
)

// scanner reads the plain JSON that safetensors writers produce: objects,
// arrays, integers and strings without escapes. It is the fast path of
// ParseHeader and of the shard index: encoding/json spends about a second
// on the released checkpoint's 75 MB of headers and its 497,220-entry
// index, which a header-only command (k3 plan, k3 doctor) otherwise spends
// on nothing else. A scanner never decides that input is invalid: every
// method reports false at anything outside its subset (an escape, a
// fraction, an unexpected key, a syntax error), and the caller then parses
// the input again with encoding/json, whose verdict and result stand. So
// for any input both accept, the result is encoding/json's
// (FuzzParseHeader and FuzzParseIndex check it).
type scanner struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eat skips whitespace and then c, if c is next.
func (s *scanner) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// end skips whitespace and reports whether nothing follows.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// str reads a string and returns its bytes (a slice of the input): only
// strings without escapes, control characters or invalid UTF-8, whose
// decoded value is their bytes.
func (s *scanner) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		s.i++
	}
	return nil, false
}

// integer reads an integer in JSON's syntax (no fraction or exponent) that
// fits an int64.
func (s *scanner) integer() (int64, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || (n > 1 && s.b[digits] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// integers reads an array of integers, appending them to dst.
func (s *scanner) integers(dst []int64) ([]int64, bool) {
	if !s.eat('[') {
		return dst, false
	}
	if s.eat(']') {
		return dst, true
	}
	for {
		v, ok := s.integer()
		if !ok {
			return dst, false
		}
		dst = append(dst, v)
		if s.eat(']') {
			return dst, true
		}
		if !s.eat(',') {
			return dst, false
		}
	}
}

// maxSkipDepth bounds the nesting skip follows.
const maxSkipDepth = 64

// skip reads any value: strings as str does, numbers in JSON's full
// syntax, literals, and arrays and objects of those nested at most
// maxSkipDepth deep.
func (s *scanner) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		s.i++
		if s.eat('}') {
			return true
		}
		for {
			if _, ok := s.str(); !ok || !s.eat(':') || !s.skip(depth+1) {
				return false
			}
			if s.eat('}') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case c == '[':
		s.i++
		if s.eat(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if s.eat(']') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
}

// number reads a number in JSON's syntax: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	first := s.i
	if n := digits(); n == 0 || (n > 1 && s.b[first] == '0') {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
