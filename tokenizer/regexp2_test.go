package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The pre-tokenizer is cross-checked against regexp2, a backtracking
// engine with .NET semantics, running Pattern rewritten in its dialect:
// class intersection becomes subtraction, \s and \S become the explicit
// White_Space set (so that no engine-specific definition creeps in), and
// the case-insensitive contractions become explicit classes with the
// Unicode simple case folding of tiktoken's engine (s also matches U+017F).
//
// regexp2 uses Go's unicode tables (Unicode 15.0.0), so inputs must avoid
// CJK Extension I, new in 15.1.0. Other 15.1.0 additions are symbols,
// outside every class of the pattern in either version.
var regexp2Pattern = func() string {
	const (
		ws  = `[\t-\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]`
		nws = `[^\t-\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]`
		s1  = `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]`
		s2  = `[\p{Ll}\p{Lm}\p{Lo}\p{M}-[\p{Han}]]`
		ctr = `(?:'[sS\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?`
	)
	return strings.Join([]string{
		`[\p{Han}]+`,
		`[^\r\n\p{L}\p{N}]?` + s1 + `*` + s2 + `+` + ctr,
		`[^\r\n\p{L}\p{N}]?` + s1 + `+` + s2 + `*` + ctr,
		`\p{N}{1,3}`,
		` ?[^\t-\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000\p{L}\p{N}]+[\r\n]*`,
		ws + `*[\r\n]+`,
		ws + `+(?!` + nws + `)`,
		ws + `+`,
	}, "|")
}()

var (
	regexp2Once sync.Once
	regexp2Re   *regexp2.Regexp
)

func regexp2Matcher(tb testing.TB) *regexp2.Regexp {
	regexp2Once.Do(func() {
		regexp2Re = regexp2.MustCompile(regexp2Pattern, regexp2.None)
		regexp2Re.MatchTimeout = 10 * time.Second
	})
	return regexp2Re
}

// latin1Runes decodes s as the pre-tokenizer does: a byte that does not
// start valid UTF-8 is the code point of the same value. It also returns
// the byte offset of each rune, plus len(s).
func latin1Runes(s string) ([]rune, []int) {
	var rs []rune
	var offs []int
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			r = rune(s[i])
		}
		rs = append(rs, r)
		offs = append(offs, i)
		i += n
	}
	return rs, append(offs, len(s))
}

// regexp2Pieces splits s with regexp2; unmatched gaps become pieces too,
// so that they show up as differences.
func regexp2Pieces(tb testing.TB, s string) []string {
	rs, offs := latin1Runes(s)
	idx, err := regexp2Matcher(tb).FindAllRunesIndex(rs, -1)
	if err != nil {
		tb.Fatalf("regexp2 on %q: %v", s, err)
	}
	var out []string
	at := 0
	for _, m := range idx {
		if m[0] > at {
			out = append(out, "GAP:"+s[offs[at]:offs[m[0]]])
		}
		out = append(out, s[offs[m[0]]:offs[m[1]]])
		at = m[1]
	}
	if at < len(rs) {
		out = append(out, "GAP:"+s[offs[at]:])
	}
	return out
}

func hasExtI(s string) bool {
	rs, _ := latin1Runes(s)
	return slices.ContainsFunc(rs, func(r rune) bool { return r >= 0x2EBF0 && r <= 0x2EE5D })
}

func checkAgainstRegexp2(t *testing.T, s string) {
	t.Helper()
	if hasExtI(s) {
		return
	}
	want := regexp2Pieces(t, s)
	if got := appendPieces(nil, s); !slices.Equal(got, want) {
		t.Errorf("pieces(%q)\n got     %q\nregexp2 %q", s, got, want)
	}
}

func TestPretokenizeRegexp2Vectors(t *testing.T) {
	for _, c := range loadVectors(t).Cases {
		checkAgainstRegexp2(t, c.Text)
	}
}

func TestPretokenizeRegexp2Random(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		checkAgainstRegexp2(t, randomText(rng, rng.IntN(40)))
		if t.Failed() {
			return
		}
	}
}

// FuzzPretokenize compares the hand-written matcher with regexp2 on
// arbitrary bytes.
func FuzzPretokenize(f *testing.F) {
	for _, s := range []string{"", "a  b", "I'm HTTPServer's", "x\r\n \n", "\u4e2d\u304b", "e\u0301\u0301", "\xff\xa0x", ".\n/x", "1234"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		pieces := appendPieces(nil, s)
		if strings.Join(pieces, "") != s {
			t.Fatalf("pieces do not tile the input: %q", pieces)
		}
		checkAgainstRegexp2(t, s)
	})
}
