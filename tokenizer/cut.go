package tokenizer

// The release's tokenizer cuts text before tiktoken sees it: into pieces of
// at most MaxEncodeChars code points, and each of those wherever a run of
// consecutive whitespace or non-whitespace code points would grow past
// MaxRunChars. Pre-tokens, BPE merges and added tokens never span a cut,
// so the cuts change the ids of long runs (base64, minified JSON, long
// whitespace).
const (
	// MaxEncodeChars is the most code points encoded in one piece.
	MaxEncodeChars = 400_000
	// MaxRunChars is the longest run of whitespace or of non-whitespace
	// code points encoded in one piece.
	MaxRunChars = 25_000
)

// isSpaceClass reports whether a code point of class c and value r is
// whitespace as the release decides it (Python's str.isspace): Unicode
// White_Space, plus the separators U+001C..U+001F.
func isSpaceClass(c uint8, r byte, n int) bool {
	return c&cW != 0 || n == 1 && r >= 0x1C && r <= 0x1F
}

// cutter yields the pieces of a text as the release cuts it. A stray byte
// of invalid UTF-8 counts as one code point (see [class]).
type cutter struct {
	s     string
	i     int // start of the next piece
	chars int // code points before i in the current MaxEncodeChars window
}

// next returns the next piece, or false when the text is used up.
func (c *cutter) next() (string, bool) {
	s, start := c.s, c.i
	if start >= len(s) {
		return "", false
	}
	run, space := 0, false
	i := start
	for i < len(s) {
		if c.chars == MaxEncodeChars {
			c.chars = 0 // a new window, and a new piece with it
			break
		}
		cl, n := class(s, i)
		sp := isSpaceClass(cl, s[i], n)
		if run > 0 && sp == space {
			if run == MaxRunChars {
				break
			}
			run++
		} else {
			space, run = sp, 1
		}
		c.chars++
		i += n
	}
	c.i = i
	return s[start:i], true
}
