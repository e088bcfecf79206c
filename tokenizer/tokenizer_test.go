package tokenizer

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// newTiny returns a tokenizer whose ranks 0..255 are the single bytes and
// 256.. the extra tokens in order, with the given added tokens.
func newTiny(tb testing.TB, extra []string, added ...AddedToken) *Tokenizer {
	tb.Helper()
	ranks := make(map[string]int, 256+len(extra))
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	for k, s := range extra {
		ranks[s] = 256 + k
	}
	tok, err := New(ranks, added)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// naiveBPE is the definition of tiktoken's byte-pair merge, written for
// clarity: the whole piece if it is a token, else repeatedly join the
// adjacent pair whose concatenation has the lowest rank, leftmost on ties.
func naiveBPE(piece string, rank func(string) (int, bool)) []int {
	if r, ok := rank(piece); ok {
		return []int{r}
	}
	var parts []string
	for k := range len(piece) {
		parts = append(parts, piece[k:k+1])
	}
	for {
		best, at := -1, -1
		for k := 0; k+1 < len(parts); k++ {
			if r, ok := rank(parts[k] + parts[k+1]); ok && (at < 0 || r < best) {
				best, at = r, k
			}
		}
		if at < 0 {
			break
		}
		parts[at] += parts[at+1]
		parts = slices.Delete(parts, at+1, at+2)
	}
	ids := make([]int, len(parts))
	for k, p := range parts {
		ids[k], _ = rank(p)
	}
	return ids
}

func rankFunc(tok *Tokenizer) func(string) (int, bool) {
	return func(s string) (int, bool) {
		r, ok := tok.v.lookup(s, 0, len(s))
		return int(r), ok
	}
}

func TestBPEMergeOrder(t *testing.T) {
	// "ab" outranks "bc", so "abc" merges to ab+c; "bc" first would give a+bc.
	tok := newTiny(t, []string{"ab", "bc"})
	if got := tok.EncodeOrdinary("abc"); !slices.Equal(got, []int{256, 'c'}) {
		t.Errorf("abc: %v", got)
	}
	tok = newTiny(t, []string{"bc", "ab"})
	if got := tok.EncodeOrdinary("abc"); !slices.Equal(got, []int{'a', 256}) {
		t.Errorf("abc with bc first: %v", got)
	}
	// Ties go to the leftmost pair: "aaa" -> aa+a.
	tok = newTiny(t, []string{"aa"})
	if got := tok.EncodeOrdinary("aaa"); !slices.Equal(got, []int{256, 'a'}) {
		t.Errorf("aaa: %v", got)
	}
	// A piece that is itself a token wins even if merges cannot reach it.
	tok = newTiny(t, []string{"xyz"})
	if got := tok.EncodeOrdinary("xyz"); !slices.Equal(got, []int{256}) {
		t.Errorf("xyz: %v", got)
	}
	// Merges are by the rank of the concatenated bytes, not of the parts:
	// "abcd" -> ab, cd, then "abcd" itself (rank 259) joins them.
	tok = newTiny(t, []string{"ab", "cd", "zz", "abcd"})
	if got := tok.EncodeOrdinary("abcdab"); !slices.Equal(got, []int{259, 256}) {
		t.Errorf("abcdab: %v", got)
	}
}

// TestBPEAgainstDefinition compares the short and long merge paths with
// naiveBPE on random vocabularies and pieces.
func TestBPEAgainstDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 30 {
		alpha := "abc"[:2+trial%2]
		seen := map[string]bool{}
		var extra []string
		for range 60 {
			n := 2 + rng.IntN(5)
			var b strings.Builder
			for range n {
				b.WriteByte(alpha[rng.IntN(len(alpha))])
			}
			if s := b.String(); !seen[s] {
				seen[s] = true
				extra = append(extra, s)
			}
		}
		tok := newTiny(t, extra)
		for range 30 {
			n := 2 + rng.IntN(200)
			buf := make([]byte, n)
			for k := range buf {
				buf[k] = alpha[rng.IntN(len(alpha))]
			}
			piece := string(buf)
			want := naiveBPE(piece, rankFunc(tok))
			if got := tok.appendPiece(nil, piece, 0, n, new(scratch)); !slices.Equal(got, want) {
				t.Fatalf("appendPiece(%q) = %v, want %v", piece, got, want)
			}
			merged := naiveMerge(tok, piece)
			if got := tok.bpeLong(nil, piece, 0, n, new(scratch)); !slices.Equal(got, merged) {
				t.Fatalf("bpeLong(%q) = %v, want %v", piece, got, merged)
			}
			if n <= maxShortPiece {
				if got := tok.bpeShort(nil, piece, 0, n, new(scratch)); !slices.Equal(got, merged) {
					t.Fatalf("bpeShort(%q) = %v, want %v", piece, got, merged)
				}
			}
		}
	}
}

// naiveMerge is naiveBPE without the whole-piece shortcut.
func naiveMerge(tok *Tokenizer, piece string) []int {
	first := true
	return naiveBPE(piece, func(s string) (int, bool) {
		if first {
			first = false
			return 0, false
		}
		return rankFunc(tok)(s)
	})
}

func TestAddedTokens(t *testing.T) {
	tok := newTiny(t, nil,
		AddedToken{ID: 300, Content: "<a>"},
		AddedToken{ID: 301, Content: "<a>b", Special: true},
		AddedToken{ID: 302, Content: "bcd"},
		AddedToken{ID: 303, Content: "abcde"},
	)
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"x<a>y", []int{'x', 300, 'y'}},
		{"x<a>by", []int{'x', 301, 'y'}},      // the longest at a position
		{"abcdef", []int{303, 'f'}},           // earliest position wins...
		{"zbcdef", []int{'z', 302, 'e', 'f'}}, // ...then the longest there
		{"<a<a>", []int{'<', 'a', 300}},
		{"<a>", []int{300}},
		{"<a><a>", []int{300, 300}},
	} {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
		if got := tok.EncodeOrdinary(c.in); slices.ContainsFunc(got, func(id int) bool { return id >= 256 }) {
			t.Errorf("EncodeOrdinary(%q) = %v contains an added token", c.in, got)
		}
		if s, err := tok.Decode(tok.Encode(c.in)); err != nil || s != c.in {
			t.Errorf("round trip of %q = %q, %v", c.in, s, err)
		}
	}
	// Text between added tokens is split on its own: "a " before a token
	// keeps its trailing space whole, as at the end of a text.
	tok2 := newTiny(t, []string{"  "}, AddedToken{ID: 400, Content: "<e>"})
	if got, want := appendPieces(nil, "a  "), []string{"a", "  "}; !slices.Equal(got, want) {
		t.Fatalf("pieces %q", got)
	}
	if got := tok2.Encode("a  <e>"); !slices.Equal(got, []int{'a', 256, 400}) {
		t.Errorf("Encode(a  <e>) = %v", got)
	}
	if got := tok2.EncodeOrdinary("a  <e>"); !slices.Equal(got, []int{'a', ' ', ' ', '<', 'e', '>'}) {
		t.Errorf("EncodeOrdinary(a  <e>) = %v", got)
	}
	if got := tok.AddedTokens(); len(got) != 4 || got[1] != (AddedToken{301, "<a>b", true}) {
		t.Errorf("AddedTokens = %v", got)
	}
	if id, ok := tok.ID("<a>b"); !ok || id != 301 {
		t.Errorf("ID(<a>b) = %d, %v", id, ok)
	}
}

func TestSpecialTokensFixture(t *testing.T) {
	tok := fixtureTokenizer(t)
	const text = "[BOS]Hello<|im_end|>"
	got := tok.Encode(text)
	if got[0] != 199998 || got[len(got)-1] != 200000 {
		t.Errorf("Encode(%q) = %v, want [BOS] first and <|im_end|> last", text, got)
	}
	ord := tok.EncodeOrdinary(text)
	for _, id := range ord {
		if id >= 199998 {
			t.Errorf("EncodeOrdinary(%q) = %v contains added id %d", text, ord, id)
		}
	}
	if s, err := tok.Decode(ord); err != nil || s != text {
		t.Errorf("Decode(EncodeOrdinary) = %q, %v", s, err)
	}
	if len(ord) <= len(got) {
		t.Errorf("ordinary encoding %v is not longer than %v", ord, got)
	}
	via := tok.AppendEncode(nil, text, EncodeOptions{NoAddedTokens: true})
	if !slices.Equal(via, ord) {
		t.Errorf("AppendEncode with NoAddedTokens = %v, want %v", via, ord)
	}
}

func TestRoundTrip(t *testing.T) {
	toks := map[string]*Tokenizer{"tiny": newTiny(t, []string{"ab", "  ", "\xe4\xb8", "\xe4\xb8\xad"}, AddedToken{ID: 999, Content: "<|x|>"})}
	if tok := optionalFixtureTokenizer(t); tok != nil {
		toks["fixture"] = tok
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for name, tok := range toks {
		for k := range 3000 {
			var s string
			switch k % 3 {
			case 0: // arbitrary bytes
				b := make([]byte, rng.IntN(200))
				for i := range b {
					b[i] = byte(rng.IntN(256))
				}
				s = string(b)
			case 1:
				s = randomText(rng, rng.IntN(100))
			case 2:
				s = randomText(rng, rng.IntN(20)) + "<|x|>" + "<|im_end|>" + strings.Repeat(" ", rng.IntN(300)) + randomText(rng, 5)
			}
			for _, ids := range [][]int{tok.Encode(s), tok.EncodeOrdinary(s)} {
				got, err := tok.Decode(ids)
				if err != nil || got != s {
					t.Fatalf("%s: Decode(Encode(%q)) = %q, %v", name, s, got, err)
				}
			}
		}
	}
}

func TestLongPieces(t *testing.T) {
	tok := fixtureTokenizer(t)
	for _, s := range []string{
		strings.Repeat(" ", 1000),
		strings.Repeat("a", 700),
		strings.Repeat("ab", 300),
		strings.Repeat("!", 513),
		strings.Repeat("\u00e9", 200),
		strings.Repeat("\u4e2d\u6587", 100),
		strings.Repeat("\xff", 300),
	} {
		ids := tok.EncodeOrdinary(s)
		if got, _ := tok.Decode(ids); got != s {
			t.Fatalf("round trip failed for a %d-byte run", len(s))
		}
		pieces := appendPieces(nil, s)
		var want []int
		for _, p := range pieces {
			want = append(want, naiveBPE(p, rankFunc(tok))...)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%d-byte run of %q: heap merge differs from the definition", len(s), s[:3])
		}
	}
}

func TestDecodeUnknown(t *testing.T) {
	tok := newTiny(t, []string{"ab"}, AddedToken{ID: 300, Content: "<x>"})
	ids := []int{'h', -1, 'i', 257, 300, 1 << 40, 'a'}
	s, err := tok.Decode(ids)
	if !errors.Is(err, ErrUnknownID) {
		t.Fatalf("err = %v, want ErrUnknownID", err)
	}
	if !strings.Contains(err.Error(), "id -1 at index 1") {
		t.Errorf("error %q does not name the first unknown id", err)
	}
	if s != "hi<x>a" {
		t.Errorf("Decode = %q, want the known ids' text", s)
	}
	if got := tok.DecodeLenient(ids); got != "hi<x>a" {
		t.Errorf("DecodeLenient = %q", got)
	}
	if b, err := tok.AppendDecode([]byte("pre:"), []int{256, 300}); err != nil || string(b) != "pre:ab<x>" {
		t.Errorf("AppendDecode = %q, %v", b, err)
	}
	if _, ok := tok.TokenBytes(257); ok {
		t.Error("TokenBytes(257) found a token")
	}
	b, _ := tok.TokenBytes('a')
	b[0] = 'z' // a copy: the vocabulary must not change
	if b2, _ := tok.TokenBytes('a'); string(b2) != "a" {
		t.Error("TokenBytes returned internal storage")
	}
	if tok.VocabSize() != 301 {
		t.Errorf("VocabSize = %d, want 301", tok.VocabSize())
	}
}

func TestStreamDecoder(t *testing.T) {
	tok := newTiny(t, []string{"\xe4\xb8", "\xad\xe6"}, AddedToken{ID: 300, Content: "<x>"})
	d := tok.NewStreamDecoder()
	step := func(id int, want string) {
		t.Helper()
		got, err := d.Write(id)
		if err != nil || got != want {
			t.Errorf("Write(%d) = %q, %v; want %q", id, got, err, want)
		}
	}
	// 中文 = e4 b8 ad e6 96 87, split across tokens.
	step(256, "")        // e4 b8: incomplete
	step(257, "\u4e2d")  // ad e6: completes 中, e6 held
	step(0x96, "")       // e6 96
	step(0x87, "\u6587") // 文
	step(0xe4, "")
	step('a', "\xe4a") // the held byte can no longer become valid: passed through
	step(0xf0, "")
	step(0x9f, "")
	step(300, "\xf0\x9f<x>") // an added token ends a pending sequence too
	step(0xe4, "")
	if _, err := d.Write(-5); !errors.Is(err, ErrUnknownID) {
		t.Errorf("Write(-5) err = %v", err)
	}
	if got := d.Flush(); got != "\xe4" {
		t.Errorf("Flush = %q", got)
	}
	if got := d.Flush(); got != "" {
		t.Errorf("second Flush = %q", got)
	}
	step(0xc3, "")
	step(0xa9, "\u00e9")
}

// TestStreamDecoderRandom checks that streamed output concatenates to
// Decode's and that, for valid UTF-8 input, no chunk splits a character.
func TestStreamDecoderRandom(t *testing.T) {
	tok := optionalFixtureTokenizer(t)
	if tok == nil {
		tok = newTiny(t, []string{"\xe4\xb8", "\xad\xe6", "ab", " \xe4"}, AddedToken{ID: 999, Content: "<|x|>"})
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for k := range 500 {
		s := randomText(rng, rng.IntN(80))
		valid := utf8.ValidString(s)
		ids := tok.Encode(s)
		d := tok.NewStreamDecoder()
		var out strings.Builder
		for _, id := range ids {
			chunk, err := d.Write(id)
			if err != nil {
				t.Fatal(err)
			}
			if valid && !utf8.ValidString(chunk) {
				t.Fatalf("case %d: chunk %q of valid text %q splits a character", k, chunk, s)
			}
			out.WriteString(chunk)
		}
		out.WriteString(d.Flush())
		if out.String() != s {
			t.Fatalf("streamed %q, want %q", out.String(), s)
		}
	}
}

// TestPathologicalInputs checks that long runs, which are single pieces,
// and near-misses of added tokens encode in about linear time.
func TestPathologicalInputs(t *testing.T) {
	size := 1 << 18
	if testing.Short() {
		size = 1 << 14
	}
	toks := map[string]*Tokenizer{"tiny": newTiny(t, []string{"  ", "aa", "ab", "\xff\xff"}, AddedToken{ID: 999, Content: "<|reserved_token_1|>"})}
	if tok := optionalFixtureTokenizer(t); tok != nil {
		toks["fixture"] = tok
	}
	for _, unit := range []string{" ", "a", "ab", "\xff", "\u4e2d", "A\u0301", "<|reserved_token_", "'s", "1", "\r\n"} {
		s := strings.Repeat(unit, size/len(unit))
		for name, tok := range toks {
			start := time.Now()
			ids := tok.Encode(s)
			d := time.Since(start)
			if got := tok.DecodeLenient(ids); got != s {
				t.Fatalf("%s: round trip of %q x %d failed", name, unit, len(s)/len(unit))
			}
			if d > 200*time.Millisecond {
				t.Logf("%s: %d bytes of %q: %v", name, len(s), unit, d)
			}
			if d > 10*time.Second {
				t.Errorf("%s: %d bytes of %q took %v", name, len(s), unit, d)
			}
		}
	}
}

// TestEncodeAgainstDefinition encodes random text with the fixture
// vocabulary and compares with naiveBPE applied to each pre-token.
func TestEncodeAgainstDefinition(t *testing.T) {
	tok := fixtureTokenizer(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for range 300 {
		s := randomText(rng, rng.IntN(60))
		var want []int
		for _, p := range appendPieces(nil, s) {
			want = append(want, naiveBPE(p, rankFunc(tok))...)
		}
		if got := tok.EncodeOrdinary(s); !slices.Equal(got, want) {
			t.Fatalf("EncodeOrdinary(%q)\n got %v\nwant %v", s, got, want)
		}
	}
}

// TestConcurrentEncode shares one tokenizer between goroutines; run it
// with -race.
func TestConcurrentEncode(t *testing.T) {
	tok := newTiny(t, []string{"ab", "  ", "\xe4\xb8"}, AddedToken{ID: 999, Content: "<|x|>"})
	if ft := optionalFixtureTokenizer(t); ft != nil {
		tok = ft
	}
	rng := rand.New(rand.NewPCG(17, 18))
	texts := make([]string, 64)
	want := make([][]int, len(texts))
	for k := range texts {
		texts[k] = randomText(rng, 200) + strings.Repeat("a", rng.IntN(300)) + "<|x|>"
		want[k] = tok.Encode(texts[k])
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range texts {
				k := (k + g*16) % len(texts)
				if got := tok.Encode(texts[k]); !slices.Equal(got, want[k]) {
					t.Errorf("goroutine %d: text %d encoded differently", g, k)
				}
			}
		})
	}
	wg.Wait()
}
