package tokenizer

import (
	"bytes"
	"os"
	"slices"
	"testing"
	"unicode"

	"github.com/k3go/k3/tokenizer/internal/ucd"
)

// hanRanges is Script=Han of Unicode 15.1.0 (Scripts.txt), merged: the 22
// ranges of the reference engine's is_han().
var hanRanges = [][2]rune{
	{0x2E80, 0x2E99}, {0x2E9B, 0x2EF3}, {0x2F00, 0x2FD5}, {0x3005, 0x3005},
	{0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303B}, {0x3400, 0x4DBF},
	{0x4E00, 0x9FFF}, {0xF900, 0xFA6D}, {0xFA70, 0xFAD9}, {0x16FE2, 0x16FE3},
	{0x16FF0, 0x16FF1}, {0x20000, 0x2A6DF}, {0x2A700, 0x2B739}, {0x2B740, 0x2B81D},
	{0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D}, {0x2F800, 0x2FA1D},
	{0x30000, 0x3134A}, {0x31350, 0x323AF},
}

// whiteSpace is the White_Space property, which \s means.
var whiteSpace = []rune{
	0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
	0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
	0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
}

func TestTablesUpToDate(t *testing.T) {
	if unicode.Version != ucd.GoVersion {
		t.Skipf("Go's unicode is %s; tables.go is derived from %s", unicode.Version, ucd.GoVersion)
	}
	want, err := ucd.Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("tables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("tables.go is stale: run go generate ./tokenizer")
	}
}

func TestUnicodeVersion(t *testing.T) {
	if UnicodeVersion != "15.1.0" || ucd.Version != UnicodeVersion {
		t.Errorf("UnicodeVersion = %q, ucd.Version = %q", UnicodeVersion, ucd.Version)
	}
}

// TestHanRanges checks the Han bit of every code point against the
// reference's range list, independently of Go's tables.
func TestHanRanges(t *testing.T) {
	var got [][2]rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if classOf(r)&cHan == 0 {
			continue
		}
		if n := len(got); n > 0 && got[n-1][1] == r-1 {
			got[n-1][1] = r
		} else {
			got = append(got, [2]rune{r, r})
		}
	}
	if !slices.Equal(got, hanRanges) {
		t.Errorf("Han ranges:\n got %X\nwant %X", got, hanRanges)
	}
}

func TestWhiteSpace(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if got, want := classOf(r)&cW != 0, slices.Contains(whiteSpace, r); got != want {
			t.Errorf("U+%04X: White_Space %v, want %v", r, got, want)
		}
		if got, want := classOf(r)&cNL != 0, r == '\r' || r == '\n'; got != want {
			t.Errorf("U+%04X: CR/LF bit %v", r, got)
		}
	}
}

// TestClassTable checks every code point against Go's unicode package
// (Unicode 15.0.0) plus Extension I, new in 15.1.0 as Lo and Han.
func TestClassTable(t *testing.T) {
	if unicode.Version != "15.0.0" {
		t.Skipf("Go's unicode is %s, not 15.0.0", unicode.Version)
	}
	bad := 0
	for r := rune(0); r <= unicode.MaxRune && bad < 20; r++ {
		extI := r >= 0x2EBF0 && r <= 0x2EE5D
		is := func(tab *unicode.RangeTable) bool { return unicode.Is(tab, r) }
		han := extI || is(unicode.Han)
		letter := extI || is(unicode.L)
		s1 := !han && (extI || is(unicode.Lu) || is(unicode.Lt) || is(unicode.Lm) || is(unicode.Lo) || is(unicode.M))
		s2 := !han && (is(unicode.Ll) || is(unicode.Lm) || is(unicode.Lo) || is(unicode.M))
		var want uint8
		for _, f := range []struct {
			on  bool
			bit uint8
		}{{han, cHan}, {s1, cS1}, {s2, cS2}, {letter, cL}, {is(unicode.N), cN}, {is(unicode.White_Space), cW}, {r == '\r' || r == '\n', cNL}} {
			if f.on {
				want |= f.bit
			}
		}
		if got := classOf(r); got != want {
			t.Errorf("U+%04X: class %07b, want %07b", r, got, want)
			bad++
		}
	}
	for b := range 0x80 {
		if asciiClass[b] != classOf(rune(b)) {
			t.Errorf("asciiClass[%#x] = %#x, want %#x", b, asciiClass[b], classOf(rune(b)))
		}
	}
}

func TestClassSpotChecks(t *testing.T) {
	for _, c := range []struct {
		r    rune
		want uint8
		what string
	}{
		{'a', cS2 | cL, "Ll"},
		{'A', cS1 | cL, "Lu"},
		{0x01C5, cS1 | cL, "Lt"},
		{0x02B0, cS1 | cS2 | cL, "Lm"},
		{0x05D0, cS1 | cS2 | cL, "Lo (Hebrew)"},
		{0x0301, cS1 | cS2, "Mn: a mark is in both letter classes but is not L"},
		{0x3041, cS1 | cS2 | cL, "Hiragana is Lo, not Han"},
		{0x30AB, cS1 | cS2 | cL, "Katakana is Lo, not Han"},
		{0xAC00, cS1 | cS2 | cL, "Hangul is Lo, not Han"},
		{0x4E2D, cHan | cL, "Han ideograph"},
		{0x3005, cHan | cL, "Han Lm"},
		{0x3007, cHan | cN, "Han Nl"},
		{0x2E80, cHan, "Han radical (So)"},
		{0x16FF0, cHan, "Han Mc (not in the letter classes)"},
		{0x2EBF0, cHan | cL, "Extension I, first"},
		{0x2EE5D, cHan | cL, "Extension I, last"},
		{0x2EE5E, 0, "after Extension I"},
		{0x31350, cHan | cL, "Extension H"},
		{0x323B0, 0, "Extension J is Unicode 17, not 15.1"},
		{0x0295, cS2 | cL, "Ll in 15.1 (Lo only from a later version)"},
		{'7', cN, "Nd"},
		{0x00B2, cN, "No"},
		{0xFF11, cN, "fullwidth digit"},
		{0x00A0, cW, "NBSP"},
		{0x200B, 0, "ZWSP is not White_Space"},
		{0x1F600, 0, "emoji"},
		{'\r', cW | cNL, "CR"},
		{'/', 0, "solidus"},
	} {
		if got := classOf(c.r); got != c.want {
			t.Errorf("U+%04X (%s): class %07b, want %07b", c.r, c.what, got, c.want)
		}
	}
}

func TestClassOfBadBytes(t *testing.T) {
	// A byte that does not start valid UTF-8 is the Latin-1 code point of
	// the same value and is consumed alone.
	for _, c := range []struct {
		s    string
		want uint8
	}{
		{"\xe9", cS2 | cL},         // é
		{"\xc9x", cS1 | cL},        // É (0xC9 followed by a non-continuation)
		{"\xa0", cW},               // NBSP
		{"\x85", cW},               // NEL
		{"\x80", 0},                // a lone continuation byte: a C1 control
		{"\xed\xa0\x80", cL | cS2}, // surrogate encoding: 0xED is í
		{"\xe4\xb8", cS2 | cL},     // truncated 中: 0xE4 is ä
	} {
		got, n := class(c.s, 0)
		if got != c.want || n != 1 {
			t.Errorf("class(%q) = %07b, %d; want %07b, 1", c.s, got, n, c.want)
		}
	}
	if _, n := class("\xef\xbf\xbd", 0); n != 3 {
		t.Errorf("a valid U+FFFD has length %d, want 3", n)
	}
}
