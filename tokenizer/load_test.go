package tokenizer

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// modelText returns a tiktoken.model with every single byte (ranks
// 0..255) followed by extra lines.
func modelText(extra ...string) string {
	var b strings.Builder
	for k := range 256 {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(k)}), k)
	}
	for _, l := range extra {
		b.WriteString(l)
	}
	return b.String()
}

const okConfig = `{
 "added_tokens_decoder": {
  "300": {"content": "<|x|>", "special": true},
  "301": {"content": "[y]", "special": false, "lstrip": false}
 },
 "bos_token": "[BOS]",
 "chat_template": "{{ messages }}"
}
`

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestLoadFS(t *testing.T) {
	model := modelText(
		"\r\n", // a blank line with CRLF
		b64("ab")+" 256\r\n",
		"   \n",
		b64("abc")+" 257", // no final newline
	)
	tok, err := LoadFS(fstest.MapFS{
		ModelFile:  {Data: []byte(model)},
		ConfigFile: {Data: []byte(okConfig)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("abc<|x|>ab[y]"); fmt.Sprint(got) != "[257 300 256 301]" {
		t.Errorf("Encode = %v", got)
	}
	want := []AddedToken{{300, "<|x|>", true}, {301, "[y]", false}}
	if got := tok.AddedTokens(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("AddedTokens = %v", got)
	}
	if tok.VocabSize() != 302 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct {
		name, model, config string
		file                string // the file the error must name
		line                int
		msg                 string
	}{
		{"no space", modelText("YWI=\n"), okConfig, ModelFile, 257, "no space"},
		{"bad base64", modelText("YW*= 256\n"), okConfig, ModelFile, 257, "not standard padded base64"},
		{"missing padding", modelText("YWI 256\n"), okConfig, ModelFile, 257, "not standard padded base64"},
		{"negative rank", modelText("YWI= -1\n"), okConfig, ModelFile, 257, "not an integer"},
		{"rank too large", modelText("YWI= 16777216\n"), okConfig, ModelFile, 257, "not an integer"},
		{"two ranks", modelText("YWI= 256 257\n"), okConfig, ModelFile, 257, "not an integer"},
		{"empty token", modelText(" 256\n"), okConfig, ModelFile, 257, "empty token"},
		{"empty decoded token", modelText("= 256\n"), okConfig, ModelFile, 257, ""},
		{"duplicate rank", modelText(b64("ab") + " 5\n"), okConfig, ModelFile, 257, "duplicate rank 5"},
		{"duplicate token", modelText(b64("a") + " 256\n"), okConfig, ModelFile, 257, "duplicates rank 97"},
		{"missing byte", strings.Replace(modelText(), "AA== 0\n", "", 1), okConfig, ModelFile, 0, "single byte 0x00"},
		{"sparse ids", modelText(b64("ab") + " 99999\n"), okConfig, ModelFile, 0, "too sparse"},
		{"empty model", "", okConfig, ModelFile, 0, "empty vocabulary"},
		{"config not json", modelText(), "{\n \"a\": [1,\n}", ConfigFile, 3, "invalid character"},
		{"config truncated", modelText(), "{\n \"added_tokens_decoder\": {", ConfigFile, 2, "unexpected end of JSON"},
		{"config not an object", modelText(), "[1]", ConfigFile, 1, "expected"},
		{"config trailing data", modelText(), `{"added_tokens_decoder": {}} {}`, ConfigFile, 1, "after top-level value"},
		{"no added_tokens_decoder", modelText(), `{"bos_token": "x"}`, ConfigFile, 1, "no added_tokens_decoder"},
		{"added twice", modelText(), `{"added_tokens_decoder": {}, "added_tokens_decoder": {}}`, ConfigFile, 1, "twice"},
		{"non-numeric id", modelText(), "{\"added_tokens_decoder\": {\n\"x\": {\"content\": \"a\"}}}", ConfigFile, 2, "not a canonical id"},
		{"leading zero id", modelText(), "{\"added_tokens_decoder\": {\n\n\"0300\": {\"content\": \"a\"}}}", ConfigFile, 3, "not a canonical id"},
		{"no content", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"special\": true}}}", ConfigFile, 2, "no content"},
		{"content not a string", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"content\": 5}}}", ConfigFile, 2, "cannot unmarshal"},
		{"empty content", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"content\": \"\"}}}", ConfigFile, 2, "length 0"},
		{"id is a rank", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"content\": \"a\"},\n\"65\": {\"content\": \"b\"}}}", ConfigFile, 3, "also a vocabulary rank"},
		{"duplicate content", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"content\": \"q\"},\n\"301\": {\"content\": \"q\"}}}", ConfigFile, 3, "share the content"},
		{"duplicate id", modelText(), "{\"added_tokens_decoder\": {\n\"300\": {\"content\": \"q\"},\n\"300\": {\"content\": \"r\"}}}", ConfigFile, 3, "duplicate added token id 300"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadFS(fstest.MapFS{
				ModelFile:  {Data: []byte(c.model)},
				ConfigFile: {Data: []byte(c.config)},
			})
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FormatError", err)
			}
			if fe.File != c.file || fe.Line != c.line || !strings.Contains(fe.Msg, c.msg) {
				t.Errorf("err = %v (file %q, line %d); want file %q, line %d, message containing %q", err, fe.File, fe.Line, c.file, c.line, c.msg)
			}
		})
	}
}

func TestLoadMissingFiles(t *testing.T) {
	if _, err := LoadFS(fstest.MapFS{ConfigFile: {Data: []byte(okConfig)}}); err == nil || !strings.Contains(err.Error(), ModelFile) {
		t.Errorf("missing model: err = %v", err)
	}
	if _, err := LoadFS(fstest.MapFS{ModelFile: {Data: []byte(modelText())}}); err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("missing config: err = %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty directory succeeded")
	}
}

func TestReadLimited(t *testing.T) {
	fsys := fstest.MapFS{"f": {Data: []byte("0123456789")}}
	if _, err := readLimited(fsys, "f", "f", 9); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("over the limit: err = %v", err)
	}
	if b, err := readLimited(fsys, "f", "f", 10); err != nil || string(b) != "0123456789" {
		t.Errorf("at the limit: %q, %v", b, err)
	}
}

func TestNewErrors(t *testing.T) {
	ranks := map[string]int{}
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	if _, err := New(ranks, []AddedToken{{ID: -1, Content: "x"}}); err == nil {
		t.Error("negative added id accepted")
	}
	ranks["big"] = MaxID + 1
	if _, err := New(ranks, nil); err == nil {
		t.Error("rank above MaxID accepted")
	}
	delete(ranks, "big")
	ranks[""] = 300
	if _, err := New(ranks, nil); err == nil {
		t.Error("empty token accepted")
	}
}

// TestLoadFixtureTime loads the 200k-line fixture vocabulary and reports
// the time; it fails only if loading is grossly slow.
func TestLoadFixtureTime(t *testing.T) {
	dir := fixturesDir(t)
	start := time.Now()
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	t.Logf("Load(%s): %v", dir, d)
	if d > 5*time.Second {
		t.Errorf("Load took %v", d)
	}
}

// TestDecodeBase64 compares the vocabulary's base64 decoder with
// encoding/base64 on valid and corrupted input.
func TestDecodeBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=*- "
	for k := range 20000 {
		var src []byte
		if k%2 == 0 {
			b := make([]byte, rng.IntN(20))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			src = []byte(base64.StdEncoding.EncodeToString(b))
			if len(src) > 0 && k%4 == 0 {
				src[rng.IntN(len(src))] = chars[rng.IntN(len(chars))]
			}
		} else {
			src = make([]byte, rng.IntN(13))
			for i := range src {
				src[i] = chars[rng.IntN(len(chars))]
			}
		}
		want, err := base64.StdEncoding.DecodeString(string(src))
		dst := make([]byte, len(src)/4*3)
		n, ok := decodeBase64(dst, src)
		if wantOK := err == nil && len(src) > 0; ok != wantOK || (ok && string(dst[:n]) != string(want)) {
			t.Fatalf("decodeBase64(%q) = %q, %v; encoding/base64: %q, %v", src, dst[:n], ok, want, err)
		}
	}
	if _, ok := decodeBase64(make([]byte, 6), []byte("QUJD\nQQ==")); ok {
		t.Error("a line break inside a token was accepted")
	}
}

// TestParseConfigLinear parses a config with many entries on many lines;
// line numbers must not cost quadratic time.
func TestParseConfigLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString("{\"added_tokens_decoder\": {\n")
	const n = 50000
	for k := range n {
		fmt.Fprintf(&b, "%q: {\"content\": \"<t%d>\",\n \"special\": true}", fmt.Sprint(300+k), k)
		if k < n-1 {
			b.WriteString(",\n")
		}
	}
	b.WriteString("}}\n")
	start := time.Now()
	added, err := parseConfig("big.json", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != n || added[n-1].line != 2+2*(n-1) {
		t.Errorf("%d entries, last on line %d", len(added), added[n-1].line)
	}
	t.Logf("%d entries (%d bytes) in %v", n, b.Len(), time.Since(start))
}
