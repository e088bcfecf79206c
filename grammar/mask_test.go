package grammar_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// randomVocab builds a vocabulary that stresses masks: every single byte,
// then tokens glued from JSON-ish pieces, cut at random (so tokens split
// UTF-8 characters and escapes), and a few special tokens.
func randomVocab(tb testing.TB, rng *rand.Rand, n int, specials ...string) *grammar.Vocab {
	tb.Helper()
	pieces := []string{`{"`, `"}`, `":`, `": `, `,"`, `, "`, `[`, `]`, `{`, `}`, `,`, `:`, `"`, ` `, "\n", "\t",
		`0`, `1`, `12`, `7`, `-`, `.`, `.5`, `e`, `E+`, `true`, `false`, `null`, `nul`, `tr`,
		`a`, `ab`, `abc`, `x`, `name`, `kind`, `\`, `\"`, `\\`, `\n`, `\u`, `\u00e9`, `00`, `d83d`,
		`é`, `€`, `😀`, `日本`, "\xff", `A`, `Z`, `-0`, `2024-`, `T`, `:00`, `@`, `.com`, `<`, `|`}
	seen := map[string]bool{}
	toks := make([][]byte, 0, n)
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
		seen[string(rune(b))] = true
	}
	for len(toks) < n {
		var s []byte
		for k := 1 + rng.IntN(4); k > 0; k-- {
			s = append(s, pieces[rng.IntN(len(pieces))]...)
		}
		// Cut at a random place (maybe mid-character).
		s = s[rng.IntN(len(s)):]
		if len(s) > 1 && rng.IntN(3) == 0 {
			s = s[:1+rng.IntN(len(s)-1)]
		}
		if len(s) < 2 || seen[string(s)] {
			continue
		}
		seen[string(s)] = true
		toks = append(toks, s)
	}
	var sp []grammar.SpecialToken
	for k, name := range specials {
		sp = append(sp, grammar.SpecialToken{ID: len(toks) + k, Name: name})
	}
	v, err := grammar.NewVocab(toks, sp)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// checkMask compares the mask with Allowed, which steps each token's
// bytes one by one through the matcher: the trie walk, the token classes
// and the string exits must all agree with it.
func checkMask(tb testing.TB, m grammar.Matcher, v *grammar.Vocab, mask []uint64, ids []int) {
	tb.Helper()
	for _, id := range ids {
		inMask := mask[id/64]>>(id%64)&1 != 0
		if allowed := m.Allowed(id); inMask != allowed {
			b, _ := v.TokenBytes(id)
			tb.Fatalf("token %d (%q): in mask %v, Allowed %v", id, b, inMask, allowed)
		}
	}
}

// exactnessGrammars are grammars whose masks are checked; they cover the
// kinds of nodes and the fast paths.
func exactnessGrammars(tb testing.TB) map[string]*grammar.Grammar {
	tb.Helper()
	gs := map[string]*grammar.Grammar{
		"json_object": grammar.JSONObject(grammar.Options{MaxDepth: 3, Style: grammar.Style{Whitespace: 2}}),
	}
	for _, sc := range boundedSchemas {
		g, err := grammar.CompileJSONSchema([]byte(sc.schema), sc.opts)
		if err != nil {
			tb.Fatal(err)
		}
		gs[sc.name] = g
	}
	for _, sc := range []struct{ name, schema string }{
		{"string bounds", `{"type":"array","items":{"type":"string","minLength":2,"maxLength":4},"maxItems":3}`},
		{"other keys", `{"type":"object","properties":{"name":{"type":"integer"},"kind":{"type":"string","maxLength":3}},"additionalProperties":{"type":"string","maxLength":5}}`},
		{"free strings", `{"type":"object","additionalProperties":{"type":"string"}}`},
	} {
		g, err := grammar.CompileJSONSchema([]byte(sc.schema), grammar.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		gs[sc.name] = g
	}
	re, err := grammar.CompileRegexp(`(ab|é[^"]*)+x?`, grammar.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	gs["regexp"] = re
	s, err := grammar.ParseSchema([]byte(`{"type":"string","maxLength":6,"pattern":"^[a-z€]*$"}`), grammar.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	seq, err := grammar.Compile(grammar.Seq(grammar.Text(), grammar.Special("<|close|>"),
		grammar.Alt(grammar.Seq(grammar.Bytes("raw:"), s.RawString(), grammar.Special("<|sep|>")),
			grammar.Seq(grammar.Bytes("json:"), s.JSON(grammar.Style{}), grammar.Special("<|sep|>")))), grammar.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	gs["expr"] = seq
	return gs
}

func TestMaskExactRandomVocab(t *testing.T) {
	runs, steps := 6, 60
	if testing.Short() {
		runs, steps = 2, 30
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v := randomVocab(t, rng, 1500, "<|close|>", "<|sep|>", "<|other|>")
	ids := make([]int, v.Size())
	for k := range ids {
		ids[k] = k
	}
	for name, g := range exactnessGrammars(t) {
		t.Run(name, func(t *testing.T) {
			c := bind(t, g, v)
			mask := make([]uint64, v.MaskWords())
			for run := range runs {
				rng := rand.New(rand.NewPCG(uint64(run), 3))
				m := c.NewMatcher()
				for step := 0; step < steps && !m.Done(); step++ {
					if err := m.FillMask(mask); err != nil {
						t.Fatal(err)
					}
					checkMask(t, m, v, mask, ids)
					allowed := grammartest.Allowed(nil, mask)
					if len(allowed) == 0 {
						if !m.CanEnd() {
							t.Fatalf("run %d step %d: dead end", run, step)
						}
						break
					}
					// Favour the specials now and then, so free text ends.
					id := int(allowed[rng.IntN(len(allowed))])
					if sid, ok := v.SpecialID("<|close|>"); ok && m.Allowed(sid) && rng.IntN(8) == 0 {
						id = sid
					}
					if err := m.Accept(id); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestMaskExactReleaseVocab checks masks token by token over the whole
// release vocabulary at states along sampled outputs.
func TestMaskExactReleaseVocab(t *testing.T) {
	_, v := grammartest.Release(t)
	states := 12
	if testing.Short() {
		states = 3
	}
	ids := make([]int, v.Size())
	for k := range ids {
		ids[k] = k
	}
	gs := exactnessGrammars(t)
	for _, name := range []string{"json_object", "nested", "strings", "anyOf", "other keys", "string bounds"} {
		t.Run(name, func(t *testing.T) {
			c := bind(t, gs[name], v)
			mask := make([]uint64, v.MaskWords())
			rng := rand.New(rand.NewPCG(9, 9))
			m := c.NewMatcher()
			for step := 0; step < states && !m.Done(); step++ {
				if err := m.FillMask(mask); err != nil {
					t.Fatal(err)
				}
				checkMask(t, m, v, mask, ids)
				id := grammartest.Uniform(nil)(rng, step, mask)
				if id < 0 {
					break
				}
				if err := m.Accept(id); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRollbackAndClone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	v := randomVocab(t, rng, 800)
	g := exactnessGrammars(t)["nested"]
	c := bind(t, g, v)
	m := c.NewMatcher()
	mask := make([]uint64, v.MaskWords())
	var masks [][]uint64
	var taken []int
	for step := 0; step < 40 && !m.Done(); step++ {
		if err := m.FillMask(mask); err != nil {
			t.Fatal(err)
		}
		masks = append(masks, append([]uint64(nil), mask...))
		id := grammartest.Uniform(nil)(rng, step, mask)
		if err := m.Accept(id); err != nil {
			t.Fatal(err)
		}
		taken = append(taken, id)
	}
	if m.Accepted() != len(taken) {
		t.Fatalf("Accepted() = %d, want %d", m.Accepted(), len(taken))
	}
	clone := m.Clone()
	// Go back 8 tokens at a time, as speculation does, and check the mask
	// is the one seen there before; then replay.
	for back := len(taken); back > 0; back -= 8 {
		k := min(8, back)
		if err := m.Rollback(k); err != nil {
			t.Fatal(err)
		}
		pos := back - k
		if err := m.FillMask(mask); err != nil {
			t.Fatal(err)
		}
		for w := range mask {
			if mask[w] != masks[pos][w] {
				t.Fatalf("after rolling back to %d tokens the mask differs", pos)
			}
		}
		// A wrong draft: a token that is not allowed is refused and
		// changes nothing.
		for id := 0; id < v.Size(); id++ {
			if mask[id/64]>>(id%64)&1 == 0 {
				if err := m.Accept(id); err == nil {
					t.Fatalf("Accept(%d) of a masked token succeeded", id)
				}
				break
			}
		}
		if m.Accepted() != pos {
			t.Fatalf("Accepted() = %d, want %d", m.Accepted(), pos)
		}
	}
	if err := m.Rollback(1); err == nil {
		t.Fatal("rolling back past the start succeeded")
	}
	for _, id := range taken {
		if err := m.Accept(id); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	// The clone went on unaffected.
	if clone.Accepted() != len(taken) || clone.CanEnd() != m.CanEnd() {
		t.Fatal("clone changed with the original")
	}
}
