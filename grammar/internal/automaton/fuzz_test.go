package automaton

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

// FuzzRegexpDFA compares the automata built from regular expressions with
// Go's regexp package, anchored (Regexp, CompileRegexp) and searching
// (JSON Schema's pattern).
func FuzzRegexpDFA(f *testing.F) {
	for _, s := range [][2]string{
		{`[a-c]{2,3}x?`, "abcx"}, {`^ab$`, "ab"}, {`a|^b`, "xb"}, {`(?i)straße`, "STRASSE"},
		{`\p{Greek}+`, "αβγ"}, {`[^a]`, "é"}, {`a*$`, "baa"}, {`(?s).`, "\n"}, {`.`, "\n"},
		{`[\x{10000}-\x{10FFFF}]`, "😀"}, {`x{0}`, ""}, {`(a|b)*c`, "ababc"}, {`^$`, ""},
		{`[0-9]{4}-[0-9]{2}`, "2024-01"}, {`[^\x00-\x{D7FF}]`, "\uE000"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, expr, input string) {
		if !utf8.ValidString(input) || len(expr) > 64 {
			return
		}
		std, err := regexp.Compile(expr)
		if err != nil {
			return
		}
		re, err := ParseRegexp(expr)
		if err != nil {
			t.Fatalf("%q: regexp compiles it, ParseRegexp does not: %v", expr, err)
		}
		for _, search := range []bool{false, true} {
			d, err := Compile(re, search)
			if err != nil {
				return // an unsupported operator, or too many states
			}
			want := std.MatchString(input)
			if !search {
				want = matchesWhole(expr, input)
			}
			if got := d.Matches(input); got != want {
				t.Fatalf("%q on %q (search %v): dfa %v, regexp %v", expr, input, search, got, want)
			}
		}
	})
}

// matchesWhole reports whether expr matches all of input, as the anchored
// automaton must. It asks regexp for the leftmost-longest match rather than
// compiling `^(?:expr)$`: wrapping the text breaks expressions such as `\Q)`,
// whose quoting runs to the end of the pattern and would swallow the `)$`.
func matchesWhole(expr, input string) bool {
	re := regexp.MustCompile(expr)
	re.Longest()
	loc := re.FindStringIndex(input)
	return loc != nil && loc[0] == 0 && loc[1] == len(input)
}
