package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/testkit/fixtures"
	"github.com/k3go/k3/tokenizer"
)

// golden is one conversation of chat/goldens.json, rendered by the
// release's own encoder.
type golden struct {
	Request
	Segments   []Segment
	Text       string
	IDs        []int
	IDsStandin []int
}

func (g *golden) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &g.Request); err != nil {
		return err
	}
	var rest struct {
		Segments   []Segment `json:"segments"`
		Text       string    `json:"text"`
		IDs        []int     `json:"ids"`
		IDsStandin []int     `json:"ids_standin"`
	}
	if err := json.Unmarshal(data, &rest); err != nil {
		return err
	}
	g.Segments, g.Text, g.IDs, g.IDsStandin = rest.Segments, rest.Text, rest.IDs, rest.IDsStandin
	return nil
}

type goldenCase struct {
	name string
	golden
}

func loadGoldens(tb testing.TB) []goldenCase {
	tb.Helper()
	b, err := os.ReadFile(fixtures.Path(tb, "chat/goldens.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var f struct {
		Chats map[string]golden `json:"chats"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		tb.Fatal(err)
	}
	if len(f.Chats) != 18 {
		tb.Fatalf("goldens.json has %d chats, want 18", len(f.Chats))
	}
	var cs []goldenCase
	for name, g := range f.Chats {
		cs = append(cs, goldenCase{name, g})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	return cs
}

var (
	standinOnce sync.Once
	standinTok  *tokenizer.Tokenizer
	standinErr  error
)

// standin loads fixtures/tokenizer-k3: o200k ranks with K3's specials.
func standin(tb testing.TB) *tokenizer.Tokenizer {
	tb.Helper()
	dir := fixtures.Path(tb, "tokenizer-k3")
	fixtures.Path(tb, "tokenizer-k3/"+tokenizer.ModelFile)
	fixtures.Path(tb, "tokenizer-k3/"+tokenizer.ConfigFile)
	standinOnce.Do(func() { standinTok, standinErr = tokenizer.Load(dir) })
	if standinErr != nil {
		tb.Fatal(standinErr)
	}
	return standinTok
}

func TestGoldenSegments(t *testing.T) {
	for _, c := range loadGoldens(t) {
		t.Run(c.name, func(t *testing.T) {
			segs, err := Render(c.Messages, c.Options)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(segs, c.Segments) {
				for k := range max(len(segs), len(c.Segments)) {
					var g, w Segment
					if k < len(segs) {
						g = segs[k]
					}
					if k < len(c.Segments) {
						w = c.Segments[k]
					}
					if g != w {
						t.Fatalf("segment %d = %+v, want %+v (%d segments, want %d)", k, g, w, len(segs), len(c.Segments))
					}
				}
			}
			if got := Text(segs); got != c.Text {
				t.Errorf("text = %q, want %q", got, c.Text)
			}
		})
	}
}

func TestGoldenStandinIDs(t *testing.T) {
	checkGoldenIDs(t, standin(t), func(c goldenCase) []int { return c.IDsStandin })
}

// checkGoldenIDs renders and encodes every golden with tok and compares
// the ids with want's.
func checkGoldenIDs(t *testing.T, tok *tokenizer.Tokenizer, want func(goldenCase) []int) {
	t.Helper()
	for _, c := range loadGoldens(t) {
		segs, err := Render(c.Messages, c.Options)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := Encode(tok, segs)
		if err != nil {
			t.Fatal(err)
		}
		if w := want(c); !slices.Equal(ids, w) {
			t.Errorf("%s: ids %v, want %v", c.name, ids, w)
		}
	}
}

// TestGoldenReleaseIDs checks the release's own ids when
// K3_RELEASE_TOKENIZER names a directory with the release's
// tiktoken.model and tokenizer_config.json.
func TestGoldenReleaseIDs(t *testing.T) {
	dir := os.Getenv("K3_RELEASE_TOKENIZER")
	if dir == "" {
		t.Skip("K3_RELEASE_TOKENIZER is not set: set it to a directory with the release's tiktoken.model and tokenizer_config.json to check the release ids")
	}
	for _, f := range []string{tokenizer.ModelFile, tokenizer.ConfigFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("K3_RELEASE_TOKENIZER=%s: %v", dir, err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkGoldenIDs(t, tok, func(c goldenCase) []int { return c.IDs })
}
