package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

var (
	optFixtureOnce sync.Once
	optFixtureTok  *Tokenizer
)

// optionalFixtureTokenizer returns the fixture tokenizer, or nil when the
// fixture is absent: fuzz targets run with the tiny tokenizer regardless.
func optionalFixtureTokenizer(tb testing.TB) *Tokenizer {
	optFixtureOnce.Do(func() {
		dir, _ := fixtures.Dir()
		dir = filepath.Join(dir, "tokenizer")
		if _, err := os.Stat(filepath.Join(dir, ModelFile)); err != nil {
			return
		}
		tok, err := Load(dir)
		if err != nil {
			tb.Fatal(err)
		}
		optFixtureTok = tok
	})
	return optFixtureTok
}

// allocated runs f and returns the bytes it allocated (approximately: the
// whole process is counted).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzRoundTrip encodes arbitrary bytes and checks that decoding, plain or
// streamed, gives them back exactly.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "I'm here\r\n\r\n  ok", "\u4e2d\u6587 \u304b\u306a", "\xff\xfe\xe4\xb8", "\xf0\x9f\x98",
		"<|im_end|>[BOS]<|x|>", "  \t\n\u3000", "e\u0301\u0301", strings.Repeat("ab", 200),
	} {
		f.Add([]byte(s))
	}
	toks := []*Tokenizer{newTiny(f, []string{"ab", "  ", "\xe4\xb8", "\xe4\xb8\xad", "he", "hel", "hello"}, AddedToken{ID: 999, Content: "<|x|>"})}
	if tok := optionalFixtureTokenizer(f); tok != nil {
		toks = append(toks, tok)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		s := string(data)
		for _, tok := range toks {
			ids := tok.Encode(s)
			if got, err := tok.Decode(ids); err != nil || got != s {
				t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, err)
			}
			ord := tok.EncodeOrdinary(s)
			if got, err := tok.Decode(ord); err != nil || got != s {
				t.Fatalf("Decode(EncodeOrdinary(%q)) = %q, %v", s, got, err)
			}
			for _, id := range ord {
				if b, ok := tok.v.bytesOf(id); ok && tok.addedID[b] == id {
					if _, isAdded := tok.addedID[b]; isAdded {
						t.Fatalf("EncodeOrdinary(%q) produced added token %d", s, id)
					}
				}
			}
			d := tok.NewStreamDecoder()
			var out strings.Builder
			for _, id := range ids {
				chunk, err := d.Write(id)
				if err != nil {
					t.Fatal(err)
				}
				out.WriteString(chunk)
			}
			out.WriteString(d.Flush())
			if out.String() != s {
				t.Fatalf("streamed %q, want %q", out.String(), s)
			}
		}
	})
}

// FuzzParseModel feeds arbitrary bytes to the tiktoken.model parser and
// builder: no panic, allocation bounded by the input size, and a
// consistent vocabulary when the input is accepted.
func FuzzParseModel(f *testing.F) {
	f.Add([]byte(modelText()))
	f.Add([]byte(modelText(b64("ab") + " 256\r\n\r\n" + b64("abc") + " 257")))
	f.Add([]byte("QQ== 0\nQg== 1\n"))
	f.Add([]byte("QQ== 99999999\n"))
	f.Add([]byte("QQ==\n= 1\n QQ== 2\nQQ 3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tok *Tokenizer
		var err error
		n := allocated(func() {
			var arena []byte
			var toks []rawTok
			arena, toks, err = parseModel("fuzz", data)
			if err == nil {
				tok, err = build("fuzz", arena, toks, "", nil)
			}
		})
		if limit := 64*uint64(len(data)) + 2<<20; n > limit {
			t.Errorf("parsing %d bytes allocated %d bytes, more than %d", len(data), n, limit)
		}
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		for id := range tok.VocabSize() {
			b, ok := tok.TokenBytes(id)
			if !ok {
				continue
			}
			if got, ok := tok.ID(string(b)); !ok || got != id {
				t.Fatalf("ID(TokenBytes(%d)) = %d, %v", id, got, ok)
			}
		}
		if s := string(data); tok.DecodeLenient(tok.Encode(s)) != s {
			t.Fatalf("round trip through the fuzzed vocabulary failed for %q", s)
		}
	})
}

// FuzzParseConfig feeds arbitrary bytes to the tokenizer_config.json
// parser: no panic, allocation bounded by the input size, and accepted
// added tokens encode to themselves.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(okConfig))
	f.Add([]byte(`{"added_tokens_decoder": {}}`))
	f.Add([]byte(`{"added_tokens_decoder": {"300": {"content": "a"}, "301": {"content": "ab", "special": true}}}`))
	f.Add([]byte(`{"added_tokens_decoder": {"300": {"content": 1}}}`))
	f.Add([]byte(`{"a": [1, {"b": null}], "added_tokens_decoder": {"16777215": {"content": "x"}}}`))
	ranks := map[string]int{}
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var added []rawAdded
		var err error
		n := allocated(func() { added, err = parseConfig("fuzz", data) })
		if limit := 64*uint64(len(data)) + 1<<20; n > limit {
			t.Errorf("parsing %d bytes allocated %d bytes, more than %d", len(data), n, limit)
		}
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		list := make([]AddedToken, len(added))
		for k, a := range added {
			list[k] = a.AddedToken
		}
		tok, err := New(ranks, list)
		if err != nil {
			return // e.g. ids colliding with ranks or too sparse
		}
		for _, a := range tok.AddedTokens() {
			if got := tok.Encode(a.Content); len(got) != 1 || got[0] != a.ID {
				t.Fatalf("Encode(%q) = %v, want [%d]", a.Content, got, a.ID)
			}
		}
	})
}
