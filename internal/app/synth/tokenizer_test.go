package synth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/tokenizer"
)

func loadGenerated(t *testing.T, vocab int) *tokenizer.Tokenizer {
	t.Helper()
	dir := t.TempDir()
	if err := WriteTokenizer(dir, vocab); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTokenizerRanks: single bytes first, then distinct 2–4-byte merges,
// the same every time.
func TestTokenizerRanks(t *testing.T) {
	for _, v := range []int{MinTokenizerVocab, 512, 4096, 32768} {
		r, err := TokenizerRanks(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(r) != v-len(AddedTokens) {
			t.Fatalf("vocab %d: %d ranks", v, len(r))
		}
		seen := map[string]bool{}
		for i, s := range r {
			if seen[s] {
				t.Fatalf("vocab %d: rank %d %q repeated", v, i, s)
			}
			seen[s] = true
			if i < 256 && s != string([]byte{byte(i)}) {
				t.Fatalf("rank %d is %q, want the byte", i, s)
			}
			if i >= 256 && (len(s) < 2 || len(s) > maxMergeLen) {
				t.Fatalf("rank %d %q has %d bytes", i, s, len(s))
			}
		}
		again, _ := TokenizerRanks(v)
		if !slices.Equal(r, again) {
			t.Fatalf("vocab %d: two calls differ", v)
		}
		if v > 512 {
			small, _ := TokenizerRanks(512)
			if !slices.Equal(small, r[:len(small)]) {
				t.Errorf("vocab %d does not extend vocab 512", v)
			}
		}
	}
	for _, v := range []int{0, 256, MinTokenizerVocab - 1, MaxTokenizerVocab + 1} {
		if _, err := TokenizerRanks(v); err == nil {
			t.Errorf("vocab %d accepted", v)
		}
	}
	// The learnt merges are English: the commonest come first.
	r, _ := TokenizerRanks(512)
	if !slices.Contains(r[256:300], " the") || !slices.Contains(r[256:300], "in") {
		t.Errorf("first merges %q", r[256:300])
	}
}

// TestGeneratedTokenizer loads the files with the tokenizer package: the
// added tokens take the last eight ids, encoding round-trips and merges
// English text.
func TestGeneratedTokenizer(t *testing.T) {
	for _, v := range []int{MinTokenizerVocab, 512, 32768} {
		tok := loadGenerated(t, v)
		if tok.VocabSize() != v {
			t.Fatalf("vocab %d: VocabSize %d", v, tok.VocabSize())
		}
		added := tok.AddedTokens()
		if len(added) != len(AddedTokens) {
			t.Fatalf("%d added tokens", len(added))
		}
		for i, a := range added {
			if a.ID != v-len(AddedTokens)+i || a.Content != AddedTokens[i] || !a.Special {
				t.Errorf("added token %d: %+v", i, a)
			}
		}
		text := "Hello, world! The model reads <|end_of_msg|> tokens.\n\tfunc main() { fmt.Println(42) } 中文 \xff"
		ids := tok.Encode(text)
		if got, err := tok.Decode(ids); err != nil || got != text {
			t.Errorf("vocab %d: round trip %q, %v", v, got, err)
		}
		if end, _ := tok.ID("<|end_of_msg|>"); !slices.Contains(ids, end) {
			t.Errorf("vocab %d: <|end_of_msg|> not recognised in %v", v, ids)
		}
		for _, id := range ids {
			if id < 0 || id >= v {
				t.Fatalf("vocab %d: id %d out of range", v, id)
			}
		}
		if v >= 512 {
			eng := "The people of the village walked to the fields in the morning, and the model predicts the next token."
			if n := len(tok.Encode(eng)); n*2 > len(eng) {
				t.Errorf("vocab %d: %d tokens for %d bytes of English", v, n, len(eng))
			}
		}
	}
}

// TestQuickstartCheckpoint writes the quickstart profile: the tiny model
// with a 512-token vocabulary and its tokenizer, which k3 loads; text goes
// in and out. The tokenizer files are pinned by hash.
func TestQuickstartCheckpoint(t *testing.T) {
	dir, sum := writeTiny(t, Quickstart(), WriteOptions{})
	if !slices.Contains(sum.Files, "tiktoken.model") || !slices.Contains(sum.Files, "tokenizer_config.json") {
		t.Fatalf("files %v", sum.Files)
	}
	for name, h := range map[string]string{
		"tiktoken.model":        "c504f383037e2c936b1e71ca75acf074a5874cbce22c193029759fd5e3c16c75",
		"tokenizer_config.json": "aa809f66de7fcaa05b1f5889241cedb61fa33f0f2763fafcd4beea02ba8a9f06",
		// eos_token_id is <|end_of_msg|>: 512 - 8 + 2.
		GenerationConfigFile: "086ff83f8847f00f0692aa61f9ce4c1263fcdc8196c9a9a6ef82020274d64986",
	} {
		s := sha256.Sum256(readFile(t, dir, name))
		if got := hex.EncodeToString(s[:]); got != h {
			t.Errorf("%s: sha256 %s, want %s", name, got, h)
		}
	}
	m, err := k3.Open(dir, k3.Options{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config().Vocab != 512 || m.Tokenizer() == nil || m.Tokenizer().VocabSize() != 512 {
		t.Fatalf("vocab %d, tokenizer %v", m.Config().Vocab, m.Tokenizer())
	}
	if st := m.StopTokens(); !slices.Equal(st, []int{512 - len(AddedTokens) + EndOfMsg, 512 - len(AddedTokens) + 1}) {
		t.Errorf("stop tokens %v: want <|end_of_msg|> (generation_config.json) and [EOS]", st)
	}
	text, err := m.GenerateText(context.Background(), "Once upon a time", k3.GenerateOptions{MaxTokens: 8})
	if err != nil || text == "" {
		t.Fatalf("GenerateText: %q, %v", text, err)
	}
	// Any profile can take the generated tokenizer; tiny's 256 ids are too
	// few, and a tokenizer directory excludes it.
	p := Tiny()
	p.Config.Vocab = 300
	d2, _ := writeTiny(t, p, WriteOptions{GenerateTokenizer: true})
	if tok, err := tokenizer.Load(d2); err != nil || tok.VocabSize() != 300 {
		t.Errorf("custom vocab 300: %v", err)
	}
	if _, err := Write(context.Background(), filepath.Join(t.TempDir(), "x"), Tiny(), WriteOptions{GenerateTokenizer: true}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("tiny with a generated tokenizer: %v", err)
	}
	if _, err := Write(context.Background(), filepath.Join(t.TempDir(), "y"), Quickstart(), WriteOptions{TokenizerDir: dir}); err == nil {
		t.Error("a generated tokenizer and a tokenizer directory together were accepted")
	}
}
