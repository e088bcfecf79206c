package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// k3Vectors is tokenizer-k3/vectors.json: texts encoded by the release's
// tokenizer class on the stand-in ranks, and long runs that its cuts change.
type k3Vectors struct {
	Pattern       string         `json:"pattern"`
	SpecialTokens map[string]int `json:"special_tokens"`
	Texts         map[string]struct {
		Text            string `json:"text"`
		IDs             []int  `json:"ids"`
		IDsAllowSpecial []int  `json:"ids_allow_special"`
	} `json:"texts"`
	LongTexts map[string]struct {
		Unit            string `json:"unit"`
		Count           int    `json:"count"`
		Suffix          string `json:"suffix"`
		NumIDs          int    `json:"num_ids"`
		IDsSHA256       string `json:"ids_sha256"`
		NumIDsUnchunked int    `json:"num_ids_unchunked"`
	} `json:"long_texts"`
}

// k3Tokenizer is the stand-in tokenizer with K3's special-token layout.
func k3Tokenizer(tb testing.TB) *Tokenizer { return fixtureTokenizerIn(tb, "tokenizer-k3") }

func loadK3Vectors(tb testing.TB) k3Vectors {
	tb.Helper()
	var v k3Vectors
	readFixtureJSON(tb, "tokenizer-k3/vectors.json", &v)
	if len(v.Texts) != 20 || len(v.LongTexts) != 4 {
		tb.Fatalf("vectors.json has %d texts and %d long texts, want 20 and 4", len(v.Texts), len(v.LongTexts))
	}
	return v
}

func TestK3Vectors(t *testing.T) {
	tk := k3Tokenizer(t)
	v := loadK3Vectors(t)
	if v.Pattern != Pattern {
		t.Errorf("vectors.json pattern differs from Pattern")
	}
	for content, id := range v.SpecialTokens {
		if got, ok := tk.ID(content); !ok || got != id {
			t.Errorf("ID(%q) = %d, %v, want %d", content, got, ok, id)
		}
	}
	for name, c := range v.Texts {
		if got := tk.EncodeOrdinary(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: EncodeOrdinary = %v, want %v", name, got, c.IDs)
		}
		if got := tk.Encode(c.Text); !slices.Equal(got, c.IDsAllowSpecial) {
			t.Errorf("%s: Encode = %v, want %v", name, got, c.IDsAllowSpecial)
		}
	}
}

func idsSHA256(ids []int) string {
	var b []byte
	for k, id := range ids {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestK3LongRuns checks the release's cuts: long runs of whitespace or
// non-whitespace, and text over MaxEncodeChars code points.
func TestK3LongRuns(t *testing.T) {
	tk := k3Tokenizer(t)
	v := loadK3Vectors(t)
	for name, c := range v.LongTexts {
		text := strings.Repeat(c.Unit, c.Count) + c.Suffix
		got := tk.Encode(text)
		if len(got) != c.NumIDs || idsSHA256(got) != c.IDsSHA256 {
			t.Errorf("%s: %d ids (sha256 %s), want %d (%s)", name, len(got), idsSHA256(got), c.NumIDs, c.IDsSHA256)
		}
		if got := tk.AppendEncode(nil, text, EncodeOptions{NoCuts: true}); len(got) != c.NumIDsUnchunked {
			t.Errorf("%s: NoCuts gives %d ids, want %d", name, len(got), c.NumIDsUnchunked)
		}
	}
}

func TestCutter(t *testing.T) {
	pieces := func(s string) []int {
		var n []int
		c := cutter{s: s}
		for p, ok := c.next(); ok; p, ok = c.next() {
			n = append(n, len(p))
		}
		return n
	}
	for _, tc := range []struct {
		name string
		s    string
		want []int
	}{
		{"empty", "", nil},
		{"short", "ab  cd", []int{6}},
		{"run at limit", strings.Repeat("a", MaxRunChars) + " " + strings.Repeat("b", MaxRunChars), []int{2*MaxRunChars + 1}},
		{"run over", strings.Repeat("a", MaxRunChars+1), []int{MaxRunChars, 1}},
		{"spaces over", strings.Repeat(" ", 2*MaxRunChars+3) + "x", []int{MaxRunChars, MaxRunChars, 4}},
		{"file separators are space", strings.Repeat("\x1c\x1f", MaxRunChars/2) + "\x1dx", []int{MaxRunChars, 2}},
		{"multibyte runs count code points", strings.Repeat("é", MaxRunChars+1), []int{2 * MaxRunChars, 2}},
		{"no-break space", strings.Repeat("\u00a0", MaxRunChars+1), []int{2 * MaxRunChars, 2}},
		{"window", strings.Repeat("a ", MaxEncodeChars/2+1), []int{MaxEncodeChars, 2}},
	} {
		if got := pieces(tc.s); !slices.Equal(got, tc.want) {
			t.Errorf("%s: pieces %v, want %v", tc.name, got, tc.want)
		}
	}
}
