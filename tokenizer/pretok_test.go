package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestPretokenize(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"words", "hello world", []string{"hello", " world"}},
		{"contraction", "I'm", []string{"I'm"}},
		{"contraction ve", "they've", []string{"they've"}},
		{"contraction ll", "you'll", []string{"you'll"}},
		{"contraction upper", "DON'T", []string{"DON'T"}},
		{"contraction mixed case", "we'Re", []string{"we'Re"}},
		{"contraction long s", "it'\u017f", []string{"it'\u017f"}},
		{"not a contraction", "it'x", []string{"it", "'x"}},
		{"contraction in the second rule", "O'Neil's", []string{"O", "'Neil's"}},
		{"apostrophe then upper", "Don'T", []string{"Don'T"}},
		{"camel", "parseHTTPResponseHeader", []string{"parse", "HTTPResponse", "Header"}},
		{"upper run", "HTTP", []string{"HTTP"}},
		{"title case", "\u01c4\u01c5\u01c6", []string{"\u01c4\u01c5\u01c6"}},
		{"S1 gives back to the last mark", "A\u0301B", []string{"A\u0301", "B"}},
		{"combining", "e\u0301", []string{"e\u0301"}},
		{"marks as prefix and letters", "\u0301\u0301a", []string{"\u0301\u0301a"}},
		{"space then mark", " \u0301", []string{" \u0301"}},
		{"lone mark", "\u0301", []string{"\u0301"}},
		{"prefix punctuation", ".Println", []string{".Println"}},
		{"tab prefix", "\tif x", []string{"\tif", " x"}},
		{"no CR prefix", "\rab", []string{"\r", "ab"}},
		{"no digit prefix", "1a", []string{"1", "a"}},
		{"spaces before word", "a   b", []string{"a", "  ", " b"}},
		{"trailing spaces", "a   ", []string{"a", "   "}},
		{"leading spaces", "   x", []string{"  ", " x"}},
		{"space tab word", "a \tb", []string{"a", " ", "\tb"}},
		{"single space then punct", "a !", []string{"a", " !"}},
		{"two spaces then punct", "a  !", []string{"a", " ", " !"}},
		{"ideographic space", "x\u3000\u3000y", []string{"x", "\u3000", "\u3000y"}},
		{"crlf", "a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"spaces around newline", "a \n  b", []string{"a", " \n", " ", " b"}},
		{"newline then spaces at end", "x\n  ", []string{"x", "\n", "  "}},
		{"only newlines", "\n\n\n", []string{"\n\n\n"}},
		{"lone CR", "a\rb", []string{"a", "\r", "b"}},
		{"punct newline tail", "end.\n\nNext", []string{"end", ".\n\n", "Next"}},
		{"no slash in the tail", ".\n/x", []string{".\n", "/x"}},
		{"slash then newline", "a/\nb//\n\nc", []string{"a", "/\n", "b", "//\n\n", "c"}},
		{"space punct", " ?!", []string{" ?!"}},
		{"digits", "1234567", []string{"123", "456", "7"}},
		{"digits then letters", "12345abc", []string{"123", "45", "abc"}},
		{"letters then digits", "abc123def", []string{"abc", "123", "def"}},
		{"other numbers", "\u00bd\u00be", []string{"\u00bd\u00be"}},
		{"arabic-indic digits", "\u0661\u0662\u0663\u0664", []string{"\u0661\u0662\u0663", "\u0664"}},
		{"han", "\u4e2d\u6587", []string{"\u4e2d\u6587"}},
		{"han then hiragana", "\u6f22\u5b57\u304b\u306a", []string{"\u6f22\u5b57", "\u304b\u306a"}},
		{"hangul then han", "\ud55c\uad6d\uc5b4\u4e2d\u6587", []string{"\ud55c\uad6d\uc5b4", "\u4e2d\u6587"}},
		{"space before han", " \u4e2d", []string{" ", "\u4e2d"}},
		{"space before hiragana", " \u304b", []string{" \u304b"}},
		{"latin around han", "abc\u4e2ddef", []string{"abc", "\u4e2d", "def"}},
		{"han number", "\u3007\u4e00", []string{"\u3007\u4e00"}},
		{"han iteration mark", "\u4eba\u3005", []string{"\u4eba\u3005"}},
		{"han radical in punctuation", "!\u2e80", []string{"!\u2e80"}},
		{"extension I", "\U0002EBF0\U0002EE5D", []string{"\U0002EBF0\U0002EE5D"}},
		{"extension I after latin", "a\U0002EBF0", []string{"a", "\U0002EBF0"}},
		{"extension I is a letter", "!\U0002EBF0", []string{"!", "\U0002EBF0"}},
		{"extension I after ext H", "\U00031350\U0002EBF0", []string{"\U00031350\U0002EBF0"}},
		{"emoji", "I \U0001F355!", []string{"I", " \U0001F355!"}},
		{"nbsp", "non\u00a0breaking", []string{"non", "\u00a0breaking"}},
		{"bad byte letter", "caf\xe9 ok", []string{"caf\xe9", " ok"}},
		{"bad bytes", "\xff\xfe", []string{"\xff\xfe"}},
		{"bad continuation byte", "a\x80b", []string{"a", "\x80b"}},
		{"bad byte nbsp", "x\xa0\xa0y", []string{"x", "\xa0", "\xa0y"}},
		{"truncated sequence", "\xe4\xb8", []string{"\xe4", "\xb8"}}, // ä, then ¸ (Sk)
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := appendPieces(nil, c.in); !slices.Equal(got, c.want) {
				t.Errorf("pieces(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

// TestPretokenizeCovers checks on random input that pieces are non-empty
// and tile the input exactly.
func TestPretokenizeCovers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s := randomText(rng, rng.IntN(64))
		pieces := appendPieces(nil, s)
		if strings.Join(pieces, "") != s {
			t.Fatalf("pieces of %q do not tile it: %q", s, pieces)
		}
		for _, p := range pieces {
			if p == "" {
				t.Fatalf("empty piece in %q", s)
			}
		}
	}
}

// randomText draws n items from a mix of tricky code points and raw bytes.
func randomText(rng *rand.Rand, n int) string {
	const alphabet = "aAzZsStTrReEvVmMlLdD'\u2019 \t\r\n\v\f\u0085\u00a0\u2009\u3000 .,!?/-_()[]{}<>\"#:;0123456789" +
		"\u00b2\u00bd\u0301\u0308\u0903\u017f\u00e9\u00df\u01c5\u02b0\u00aa\u03a9\u03c9\u042f\u044f" +
		"\u4e2d\u56fd\u3007\u3005\u30fc\u306e\u30ab\ud55c\u0627\u0663\u0e01\u0e31\u094d\u0928\u2e80" +
		"\U00016FE2\U00016FF0\U00020000\U0002EBF0\U0001F600\u200d\ufe0f\uff21\uff42\uff11\u216b\u2028"
	runes := []rune(alphabet)
	var b strings.Builder
	for range n {
		if rng.IntN(10) == 0 {
			b.WriteByte(byte(rng.IntN(256)))
		} else {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
	}
	return b.String()
}

// TestASCIIWordFastPath checks that wherever the fast path answers, the
// general matcher gives the same piece.
func TestASCIIWordFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const ascii = "aAzZbBsStTlLdDvVrReE'' \t.,;:!?_-(/\"\r\n09\u00e9\u0301\u00c9\u4e2d"
	runes := []rune(ascii)
	answered := 0
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(16) {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		s := b.String()
		for i := 0; i < len(s); i++ {
			if e := asciiWord(s, i); e > 0 {
				answered++
				if want := nextPieceGeneral(s, i); e != want {
					t.Fatalf("asciiWord(%q, %d) = %d, general matcher %d", s, i, e, want)
				}
			}
		}
	}
	if answered == 0 {
		t.Fatal("the fast path never answered")
	}
}
