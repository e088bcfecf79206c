package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
)

type vectorCase struct {
	Name string `json:"name"`
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

type vectorFile struct {
	Note    string       `json:"note"`
	Pattern string       `json:"pattern"`
	Cases   []vectorCase `json:"cases"`
}

// fixtureLoads holds one load per fixture tokenizer directory.
var fixtureLoads sync.Map // name -> *fixtureLoad

type fixtureLoad struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// fixtureTokenizerIn loads the fixture tokenizer in directory name once per
// test binary, or skips (fails when K3_FIXTURES is set) when it is absent.
func fixtureTokenizerIn(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	dir := fixtures.Path(tb, name)
	fixtures.Path(tb, name+"/"+ModelFile)
	fixtures.Path(tb, name+"/"+ConfigFile)
	v, _ := fixtureLoads.LoadOrStore(name, new(fixtureLoad))
	l := v.(*fixtureLoad)
	l.once.Do(func() { l.tok, l.err = Load(dir) })
	if l.err != nil {
		tb.Fatal(l.err)
	}
	return l.tok
}

// fixtureTokenizer is the o200k fixture tokenizer.
func fixtureTokenizer(tb testing.TB) *Tokenizer { return fixtureTokenizerIn(tb, "tokenizer") }

// readFixtureJSON decodes the fixture file at path into v.
func readFixtureJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	b, err := os.ReadFile(fixtures.Path(tb, path))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatal(err)
	}
}

func loadVectors(tb testing.TB) vectorFile {
	tb.Helper()
	var v vectorFile
	readFixtureJSON(tb, "tokenizer/vectors.json", &v)
	if len(v.Cases) == 0 {
		tb.Fatal("vectors.json has no cases")
	}
	return v
}

func TestVectors(t *testing.T) {
	tok := fixtureTokenizer(t)
	v := loadVectors(t)
	if v.Pattern != Pattern {
		t.Errorf("vectors.json pattern differs from Pattern:\n got %q\nwant %q", Pattern, v.Pattern)
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got := tok.Encode(c.Text)
			if !slices.Equal(got, c.IDs) {
				t.Errorf("Encode(%q)\n got %v\nwant %v\npieces %q", c.Text, got, c.IDs, appendPieces(nil, c.Text))
			}
			text, err := tok.Decode(c.IDs)
			if err != nil || text != c.Text {
				t.Errorf("Decode(%v) = %q, %v; want %q", c.IDs, text, err, c.Text)
			}
			// The zero-alloc path must agree, appending after existing ids.
			dst := tok.AppendEncode([]int{-1}, c.Text, EncodeOptions{})
			if dst[0] != -1 || !slices.Equal(dst[1:], c.IDs) {
				t.Errorf("AppendEncode = %v", dst)
			}
		})
	}
}

func TestFixtureVocabulary(t *testing.T) {
	tok := fixtureTokenizer(t)
	// The fixture is o200k_base: 199,998 ranks plus 256 added ids.
	if got, want := tok.VocabSize(), 200254; got != want {
		t.Errorf("VocabSize = %d, want %d", got, want)
	}
	added := tok.AddedTokens()
	if len(added) != 256 {
		t.Fatalf("%d added tokens, want 256", len(added))
	}
	for _, want := range []AddedToken{
		{199998, "[BOS]", true}, {199999, "[EOS]", true}, {200000, "<|im_end|>", true},
		{200001, "<|im_user|>", true}, {200002, "<|im_assistant|>", true}, {200015, "<|im_middle|>", true},
	} {
		if id, ok := tok.ID(want.Content); !ok || id != want.ID {
			t.Errorf("ID(%q) = %d, %v; want %d", want.Content, id, ok, want.ID)
		}
		if k := slices.IndexFunc(added, func(a AddedToken) bool { return a.ID == want.ID }); k < 0 || added[k] != want {
			t.Errorf("AddedTokens lacks %+v", want)
		}
		if b, ok := tok.TokenBytes(want.ID); !ok || string(b) != want.Content {
			t.Errorf("TokenBytes(%d) = %q, %v", want.ID, b, ok)
		}
	}
	if !slices.IsSortedFunc(added, func(a, b AddedToken) int { return a.ID - b.ID }) {
		t.Error("AddedTokens not sorted by id")
	}
	// Ordinary keys: "!" is rank 0 in o200k.
	if id, ok := tok.ID("!"); !ok || id != 0 {
		t.Errorf(`ID("!") = %d, %v`, id, ok)
	}
	if _, ok := tok.ID("no such token at all"); ok {
		t.Error("ID found a token that does not exist")
	}
}

func TestLoadFSMatchesLoad(t *testing.T) {
	tok := fixtureTokenizer(t)
	dir := filepath.Dir(fixtures.Path(t, "tokenizer/"+ModelFile))
	tok2, err := LoadFS(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello, 世界! <|im_end|> don't"
	if a, b := tok.Encode(text), tok2.Encode(text); !slices.Equal(a, b) {
		t.Errorf("Load and LoadFS differ: %v vs %v", a, b)
	}
}

func fixturesDir(tb testing.TB) string {
	tb.Helper()
	fixtures.Path(tb, "tokenizer/"+ModelFile)
	return fixtures.Path(tb, "tokenizer")
}
