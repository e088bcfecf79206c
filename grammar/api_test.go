package grammar_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// TestConcurrentMatchers shares one constraint (and vocabulary) among
// sequences on several goroutines, as a batch does: every sequence must
// see the masks it would see alone. Run under -race in CI.
func TestConcurrentMatchers(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	v := randomVocab(t, rng, 1200)
	g, err := grammar.CompileJSONSchema([]byte(`{"type":"array","maxItems":4,"items":{"type":"object","properties":{"s":{"type":"string","pattern":"^[a-f]*$","maxLength":6},"e":{"type":"string","format":"date"}},"required":["s","e"],"additionalProperties":false}}`), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Alone: record each sequence's tokens and masks.
	const seqs = 8
	type rec struct {
		ids   []int
		masks [][]uint64
	}
	alone := make([]rec, seqs)
	c := bind(t, g, v)
	for s := range alone {
		r := rand.New(rand.NewPCG(uint64(s), 1))
		m := c.NewMatcher()
		for step := 0; step < 80 && !m.Done(); step++ {
			mask := make([]uint64, v.MaskWords())
			if err := m.FillMask(mask); err != nil {
				t.Fatal(err)
			}
			id := grammartest.Uniform(nil)(r, step, mask)
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
			alone[s].ids = append(alone[s].ids, id)
			alone[s].masks = append(alone[s].masks, mask)
		}
	}
	// Together, on a fresh constraint whose caches fill concurrently.
	c = bind(t, g, v)
	var wg sync.WaitGroup
	errs := make(chan error, seqs)
	for s := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.NewMatcher()
			mask := make([]uint64, v.MaskWords())
			for k, id := range alone[s].ids {
				if err := m.FillMask(mask); err != nil {
					errs <- err
					return
				}
				for w := range mask {
					if mask[w] != alone[s].masks[k][w] {
						errs <- errors.New("a mask differs from the sequence's alone")
						return
					}
				}
				if err := m.Accept(id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestVocabErrors(t *testing.T) {
	toks := [][]byte{[]byte("a"), []byte("b"), nil}
	for _, sp := range [][]grammar.SpecialToken{
		{{ID: 2, Name: "<x>"}, {ID: 2, Name: "<y>"}},
		{{ID: 2, Name: "<x>"}, {ID: 3, Name: "<x>"}},
		{{ID: -1, Name: "<x>"}},
		{{ID: 5, Name: ""}},
	} {
		if _, err := grammar.NewVocab(toks, sp); !errors.Is(err, grammar.ErrVocab) {
			t.Errorf("specials %v: error %v, want ErrVocab", sp, err)
		}
	}
	v, err := grammar.NewVocab(toks, []grammar.SpecialToken{{ID: 4, Name: "<e>"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Size() != 5 || v.MaskWords() != 1 {
		t.Fatalf("size %d, words %d", v.Size(), v.MaskWords())
	}
	if id, ok := v.SpecialID("<e>"); !ok || id != 4 {
		t.Fatalf("SpecialID = %d, %v", id, ok)
	}
	if b, ok := v.TokenBytes(1); !ok || string(b) != "b" {
		t.Fatalf("TokenBytes(1) = %q, %v", b, ok)
	}
	for _, id := range []int{2, 3, 4, -1, 5} {
		if _, ok := v.TokenBytes(id); ok {
			t.Errorf("TokenBytes(%d) found", id)
		}
	}
	// A grammar that names a special the vocabulary lacks cannot bind.
	g, err := grammar.Compile(grammar.Special("<missing>"), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Constraint(v); err == nil {
		t.Fatal("bound a grammar to a vocabulary without its special token")
	}
}

func TestExprs(t *testing.T) {
	v := byteVocab(t, "<s>", "<e>", "<z>")
	s, e := 256, 257
	g, err := grammar.Compile(grammar.Seq(
		grammar.Bytes("a"), grammar.Optional(grammar.Bytes("b")), grammar.Special("<s>"),
		grammar.Text(), grammar.Special("<e>"),
		grammar.Repeat(grammar.Alt(grammar.Bytes("xy"), grammar.Bytes("z")), 1, 3)), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := bind(t, g, v)
	feed := func(ids ...int) (bool, bool) {
		m := c.NewMatcher()
		for _, id := range ids {
			if m.Accept(id) != nil {
				return false, false
			}
		}
		return m.CanEnd(), m.Done()
	}
	ids := func(parts ...any) []int {
		var out []int
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				for _, b := range []byte(p) {
					out = append(out, int(b))
				}
			case int:
				out = append(out, p)
			}
		}
		return out
	}
	for _, in := range [][]int{
		ids("a", s, e, "z"), ids("ab", s, "free <e> text\xff", e, "xyzxy"), ids("a", s, e, "zzz"),
	} {
		if end, _ := feed(in...); !end {
			t.Errorf("refuses %v", in)
		}
	}
	for _, in := range [][]int{
		ids("a", s, e), ids("abb", s, e, "z"), ids("a", s, 258, e, "z"), ids("a", s, e, "zzzz"), ids(s, e, "z"), ids("a", e),
	} {
		if end, _ := feed(in...); end {
			t.Errorf("takes %v", in)
		}
	}
	if _, done := feed(ids("a", s, e, "zzz")...); !done {
		t.Error("not done after the third repeat")
	}
	if _, done := feed(ids("a", s, e, "z")...); done {
		t.Error("done after one repeat of three")
	}

	for name, bad := range map[string]grammar.Expr{
		"nothing":         grammar.Alt(),
		"empty repeat":    grammar.Repeat(grammar.Optional(grammar.Bytes("a")), 0, 5),
		"bad bounds":      grammar.Repeat(grammar.Bytes("a"), 3, 2),
		"bad regexp":      grammar.Regexp("(a"),
		"no special name": grammar.Special(""),
	} {
		if _, err := grammar.Compile(bad, grammar.Options{}); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
}

func TestMatcherEdges(t *testing.T) {
	v := byteVocab(t, "<e>")
	g, err := grammar.CompileJSONSchema([]byte(`{"enum":[1,12]}`), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := bind(t, g, v).NewMatcher()
	if err := m.FillMask(make([]uint64, v.MaskWords()-1)); err == nil {
		t.Error("FillMask took a short mask")
	}
	for _, id := range []int{-1, v.Size(), 'x'} {
		if err := m.Accept(id); !errors.Is(err, grammar.ErrNotAllowed) || m.Allowed(id) {
			t.Errorf("Accept(%d) = %v", id, err)
		}
	}
	if err := m.Accept('1'); err != nil {
		t.Fatal(err)
	}
	// "1" may end, or go on to "12": CanEnd, not Done.
	if !m.CanEnd() || m.Done() {
		t.Fatalf("after 1: CanEnd %v, Done %v", m.CanEnd(), m.Done())
	}
	if err := m.Accept('2'); err != nil || !m.Done() {
		t.Fatalf("after 12: %v, Done %v", err, m.Done())
	}
	mask := make([]uint64, v.MaskWords())
	if err := m.FillMask(mask); err != nil {
		t.Fatal(err)
	}
	for _, x := range mask {
		if x != 0 {
			t.Fatal("a token allowed after the end")
		}
	}
}

func TestMaskLogits(t *testing.T) {
	logits := []float32{1, 2, 3, 4, 5}
	mask := []uint64{0b10110}
	grammar.MaskLogits(logits, mask)
	want := []float32{float32(math.Inf(-1)), 2, 3, float32(math.Inf(-1)), 5}
	for k := range want {
		if logits[k] != want[k] {
			t.Fatalf("logits %v, want %v", logits, want)
		}
	}
}
