package tokenizer

import "unicode/utf8"

// Pattern is the Kimi pre-tokenization pattern, eight alternatives joined by
// "|" and tried in order at each position. It is documentation: Go's regexp
// cannot express (?!\S) or the && class intersection, so the package
// implements it with a hand-written matcher (see [Tokenizer.Encode]) that
// behaves as this pattern does under backtracking (leftmost-first) regex
// semantics, with the character classes of Unicode [UnicodeVersion]:
//
//	[\p{Han}]+
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	\p{N}{1,3}
//	 ?[^\s\p{L}\p{N}]+[\r\n]*
//	\s*[\r\n]+
//	\s+(?!\S)
//	\s+
//
// \s is the White_Space property. Case-insensitive matching follows Unicode
// simple case folding, as the Rust regex engine behind tiktoken does: 's
// also matches U+017F LATIN SMALL LETTER LONG S after the apostrophe.
const Pattern = `[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// class returns the class bits and the encoded length of the code point
// that starts at s[i]. UTF-8 is decoded strictly (utf8.DecodeRuneInString).
// A byte that does not begin a valid sequence (malformed, truncated,
// overlong or a surrogate) is one code point whose value is the byte
// itself, classified as that Latin-1 code point (0x85 and 0xA0 are
// White_Space, 0xC0..0xFF mostly letters, 0x80..0x9F controls), and the
// next byte starts afresh. Every byte thus lands in exactly one piece, so
// encoding stays byte-exact. (The reference engine gives a lone bad byte
// the same code point but decodes sloppily, taking any bytes after a lead
// byte as its continuation; no tiktoken oracle exists for such input.)
func class(s string, i int) (uint8, int) {
	if c := byteClass[s[i]]; c != multiByte {
		return c, 1
	}
	return classMulti(s, i)
}

// multiByte marks the bytes of byteClass that do not encode a code point
// on their own.
const multiByte = 0xFF

// byteClass is asciiClass extended to all bytes, multiByte from 0x80 on,
// so that indexing needs no bounds check.
var byteClass = func() (t [256]uint8) {
	for b := range t {
		t[b] = multiByte
		if b < utf8.RuneSelf {
			t[b] = asciiClass[b]
		}
	}
	return t
}()

func classMulti(s string, i int) (uint8, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		r = rune(s[i])
	}
	return classOf(r), n
}

// classOf returns the class bits of a valid code point.
func classOf(r rune) uint8 {
	const mask = 1<<classBlockShift - 1
	return classBlocks[int(classIndex[r>>classBlockShift])<<classBlockShift|int(r&mask)]
}

// isPunct reports whether class c belongs to [^\s\p{L}\p{N}].
func isPunct(c uint8) bool { return c&(cW|cL|cN) == 0 }

// nextPiece returns the end of the pre-token that starts at s[i], i < len(s).
// s is the whole chunk being split: its end is the end of the text for the
// lookahead of \s+(?!\S).
func nextPiece(s string, i int) int {
	if e := asciiWord(s, i); e > 0 {
		return e
	}
	return nextPieceGeneral(s, i)
}

// nextPieceGeneral is nextPiece without the ASCII fast path.
func nextPieceGeneral(s string, i int) int {
	c0, n0 := byteClass[s[i]], 1
	if c0 == multiByte {
		c0, n0 = classMulti(s, i)
	}

	// [\p{Han}]+
	if c0&cHan != 0 {
		j := i + n0
		for j < len(s) {
			c, n := byteClass[s[j]], 1
			if c == multiByte {
				c, n = classMulti(s, j)
			}
			if c&cHan == 0 {
				break
			}
			j += n
		}
		return j
	}

	// The two letter rules.
	if e := letters(s, i, c0, n0); e >= 0 {
		return e
	}

	// \p{N}{1,3}
	if c0&cN != 0 {
		j := i + n0
		for k := 1; k < 3 && j < len(s); k++ {
			c, n := byteClass[s[j]], 1
			if c == multiByte {
				c, n = classMulti(s, j)
			}
			if c&cN == 0 {
				break
			}
			j += n
		}
		return j
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j, c, n := i, c0, n0
	if s[i] == ' ' && i+1 < len(s) {
		if c1, n1 := class(s, i+1); isPunct(c1) {
			j, c, n = i+1, c1, n1
		}
	}
	if isPunct(c) {
		j += n
		for j < len(s) {
			c, n := byteClass[s[j]], 1
			if c == multiByte {
				c, n = classMulti(s, j)
			}
			if !isPunct(c) {
				break
			}
			j += n
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	// Here c0 is White_Space: every other class matched a rule above.
	if c0&cW == 0 {
		return i + n0 // unreachable; keeps the loop advancing regardless
	}
	// \s*[\r\n]+ takes the run up to and including its last CR or LF;
	// \s+(?!\S) leaves the run's last character to the next token when a
	// non-space follows; \s+ takes a lone space.
	j = i
	last, lastNL := i, -1
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == multiByte {
			c, n = classMulti(s, j)
		}
		if c&cW == 0 {
			break
		}
		last = j
		j += n
		if c&cNL != 0 {
			lastNL = j
		}
	}
	if lastNL >= 0 {
		return lastNL
	}
	if j == len(s) || last == i {
		return j
	}
	return last
}

// asciiKind classifies ASCII bytes for asciiWord.
var asciiKind = func() (t [256]uint8) {
	for b := range 0x80 {
		switch c := asciiClass[b]; {
		case c&cS1 != 0:
			t[b] = kUpper
		case c&cS2 != 0:
			t[b] = kLower
		case c&(cNL|cL|cN) == 0:
			t[b] = kPrefix
		}
	}
	return t
}()

const (
	kOther  = iota // digits, CR, LF and non-ASCII bytes
	kPrefix        // may be the optional prefix of the letter rules
	kUpper         // S1 only
	kLower         // S2 only
)

// asciiWord is a fast path for the commonest pre-token: an optional ASCII
// prefix (a space, say), ASCII capitals, then ASCII lower-case letters and
// an optional contraction. It returns the end of the piece when the text
// has that shape, or 0 to let nextPiece decide. It only answers where the
// first letter rule matches with its first choice of prefix, so the result
// is the pattern's: capitals are S1 but not S2 and lower-case letters S2
// but not S1, so S1* ends where the lower-case run begins and no giving
// back happens; a run that stops at a non-ASCII byte, which might extend
// it, is left to the general matcher.
func asciiWord(s string, i int) int {
	j := i
	if asciiKind[s[j]] == kPrefix {
		j++
	}
	for j < len(s) && asciiKind[s[j]] == kUpper {
		j++
	}
	if j >= len(s) || asciiKind[s[j]] != kLower {
		return 0
	}
	for j++; j < len(s) && asciiKind[s[j]] == kLower; j++ {
	}
	if j < len(s) && s[j] >= utf8.RuneSelf {
		return 0
	}
	return contraction(s, j)
}

// letters matches the two letter rules at s[i] (class c0, length n0) and
// returns the end of the match, or -1. The order of attempts is that of a
// backtracking engine: rule one with the optional prefix taken, then not
// taken; then rule two likewise.
func letters(s string, i int, c0 uint8, n0 int) int {
	// The prefix is one code point that is not CR, LF, a letter or a number.
	pfx := c0&(cNL|cL|cN) == 0 && i+n0 < len(s)
	if !pfx && c0&(cS1|cS2) == 0 {
		return -1
	}
	s1p := -1 // end of the S1 run after the prefix
	if pfx {
		e, s1 := letterRun(s, i+n0)
		if e >= 0 {
			return contraction(s, e)
		}
		s1p = s1
	}
	e, s1 := letterRun(s, i)
	if e >= 0 {
		return contraction(s, e)
	}
	if pfx && s1p > i+n0 {
		return contraction(s, s2Run(s, s1p))
	}
	if s1 > i {
		return contraction(s, s2Run(s, s1))
	}
	return -1
}

// letterRun matches S1*S2+ at s[j] and returns the end of the match (-1 if
// none) and the end of the maximal S1 run at j. S1* is greedy and gives
// back until S2+ can take one code point: if the code point after the S1
// run is S2, S2+ runs from there; otherwise the match ends after the last
// code point of the S1 run that is also S2 (S1 and S2 share Lm, Lo and M).
func letterRun(s string, j int) (end, s1end int) {
	last := -1
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == multiByte {
			c, n = classMulti(s, j)
		}
		if c&cS1 == 0 {
			if c&cS2 != 0 {
				return s2Run(s, j+n), j
			}
			break
		}
		j += n
		if c&cS2 != 0 {
			last = j
		}
	}
	return last, j
}

// s2Run returns the end of the run of S2 code points at s[j].
func s2Run(s string, j int) int {
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == multiByte {
			c, n = classMulti(s, j)
		}
		if c&cS2 == 0 {
			break
		}
		j += n
	}
	return j
}

// contraction extends a letter match ending at e by an optional
// case-insensitive 's, 't, 're, 've, 'm, 'll or 'd.
func contraction(s string, e int) int {
	if e+1 >= len(s) || s[e] != '\'' {
		return e
	}
	// b|0x20 folds exactly the ASCII letters' case: no other byte maps
	// onto a lower-case ASCII letter.
	switch s[e+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return e + 2
	case 'r', 'v':
		if e+2 < len(s) && s[e+2]|0x20 == 'e' {
			return e + 3
		}
	case 'l':
		if e+2 < len(s) && s[e+2]|0x20 == 'l' {
			return e + 3
		}
	}
	// U+017F LATIN SMALL LETTER LONG S folds to s.
	if s[e+1] == 0xC5 && e+2 < len(s) && s[e+2] == 0xBF {
		return e + 3
	}
	return e
}

// appendPieces appends the pre-tokens of s to dst as [start, end) offsets;
// it is used by tests.
func appendPieces(dst []string, s string) []string {
	for i := 0; i < len(s); {
		e := nextPiece(s, i)
		dst = append(dst, s[i:e])
		i = e
	}
	return dst
}
