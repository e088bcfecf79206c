package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// fakeIndex is an Index over maps, filled the way an engine saves.
type fakeIndex struct {
	blocks map[Key]bool
	states map[Key][]StateRef
}

func newFakeIndex() *fakeIndex {
	return &fakeIndex{blocks: map[Key]bool{}, states: map[Key][]StateRef{}}
}

func (f *fakeIndex) HasBlock(k Key) bool          { return f.blocks[k] }
func (f *fakeIndex) States(anchor Key) []StateRef { return f.states[anchor] }

// saveBlocks adds the blocks of p that end at or before pos.
func (f *fakeIndex) saveBlocks(p *Prompt, pos int) {
	for i := 0; (i+1)*p.Hasher().BlockSize() <= pos && i < p.Blocks(); i++ {
		f.blocks[p.BlockKey(i)] = true
	}
}

// saveState adds a state at pos (and not its blocks).
func (f *fakeIndex) saveState(p *Prompt, pos int, logits bool) {
	k, m := p.StateMeta(pos)
	f.states[m.Anchor] = append(f.states[m.Anchor], StateRef{Key: k, Tail: m.Tail, HasLogits: logits})
}

// save is what the engine does after a prefill: all blocks, a state every
// `every` blocks (0: none) and one at the end.
func (f *fakeIndex) save(p *Prompt, every int, logits bool) {
	b := p.Hasher().BlockSize()
	f.saveBlocks(p, p.Len())
	if every > 0 {
		for i := every; i*b < p.Len(); i += every {
			f.saveState(p, i*b, false)
		}
	}
	f.saveState(p, p.Len(), logits)
}

func expect(t *testing.T, what string, m Match, pos int) {
	t.Helper()
	if m.Pos != pos {
		t.Errorf("%s: Pos %d, want %d (match %+v)", what, m.Pos, pos, m)
	}
	if m.Hit() != (pos > 0) {
		t.Errorf("%s: Hit %v", what, m.Hit())
	}
}

func concat(parts ...[]int) []int { return slices.Concat(parts...) }

func TestLookupEmpty(t *testing.T) {
	x := mustHasher(t, "fp", 16)
	p := x.Prompt(randTokens(rand.New(rand.NewPCG(1, 1)), 100, 50))
	m := Lookup(newFakeIndex(), p, p.Len())
	expect(t, "empty index", m, 0)
	if m.Blocks != 0 || m.State != (Key{}) {
		t.Errorf("miss %+v", m)
	}
	empty := x.Prompt(nil)
	expect(t, "empty prompt", Lookup(newFakeIndex(), empty, 0), 0)
}

func TestLookupShortPrompts(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	x := mustHasher(t, "fp", 512)
	ix := newFakeIndex()
	turn1 := randTokens(r, 100, 1000) // shorter than one block
	p1 := x.Prompt(turn1)
	ix.save(p1, 4, false)

	// The next turn extends the first: it resumes at the first's end.
	p2 := x.Prompt(concat(turn1, randTokens(r, 50, 1000)))
	m := Lookup(ix, p2, p2.Len())
	expect(t, "next turn", m, 100)
	if m.Anchor != 0 || m.State != p1.StateKey(100) || m.HasLogits {
		t.Errorf("next turn: %+v", m)
	}
	// The same prompt again: the state holds no logits, so at least one
	// token must be fed, and there is no earlier state.
	expect(t, "identical, no logits", Lookup(ix, x.Prompt(turn1), 100), 0)
	// With logits it needs no forward at all.
	ix.saveState(p1, 100, true)
	m = Lookup(ix, x.Prompt(turn1), 100)
	expect(t, "identical, logits", m, 100)
	if !m.HasLogits {
		t.Error("identical, logits: HasLogits false")
	}
	// The limit is honoured.
	expect(t, "limit 99", Lookup(ix, p2, 99), 0)
	// A prompt that differs at its first token shares nothing.
	other := slices.Clone(turn1)
	other[0]++
	expect(t, "first token differs", Lookup(ix, x.Prompt(other), 100), 0)
	// A prompt that is a strict prefix of a saved one shares nothing either
	// (no state at or before its end).
	expect(t, "prefix of saved", Lookup(ix, x.Prompt(turn1[:60]), 60), 0)
}

func TestLookupChangedTail(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	const b = 64
	x := mustHasher(t, "fp", b)
	header := randTokens(r, 11000, 1000)
	p1 := x.Prompt(concat(header, randTokens(r, 300, 1000)))

	// A date at token 1,900 changes on the next request.
	header2 := slices.Clone(header)
	header2[1900]++
	p2 := x.Prompt(concat(header2, randTokens(r, 300, 1000)))

	// States at every block boundary: the last one at or before 1,900.
	ix := newFakeIndex()
	ix.save(p1, 1, false)
	m := Lookup(ix, p2, p2.Len())
	expect(t, "every block", m, 1900/b*b)
	if m.Anchor != 1900/b || m.Blocks != 1900/b {
		t.Errorf("every block: %+v", m)
	}

	// Sparse states every 8 blocks (512 tokens): the last at or before.
	ix = newFakeIndex()
	ix.save(p1, 8, false)
	expect(t, "every 8 blocks", Lookup(ix, p2, p2.Len()), 1900/512*512)

	// A non-aligned state of a prompt that ended just before the change.
	ix.saveState(x.Prompt(header[:1899]), 1899, false)
	expect(t, "turn end at 1899", Lookup(ix, p2, p2.Len()), 1899)
	// One that ended after it is not a match.
	ix = newFakeIndex()
	ix.save(p1, 0, false)
	ix.saveState(x.Prompt(header[:1950]), 1950, false)
	expect(t, "turn end at 1950", Lookup(ix, p2, p2.Len()), 0)
}

func TestLookupAligned(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const b = 16
	x := mustHasher(t, "fp", b)
	tokens := randTokens(r, 4*b, 100) // exactly four blocks
	ix := newFakeIndex()
	p := x.Prompt(tokens)
	ix.save(p, 2, false) // states at 32 and 64
	expect(t, "identical without logits", Lookup(ix, x.Prompt(tokens), len(tokens)), 2*b)
	ix.saveState(p, 4*b, true)
	m := Lookup(ix, x.Prompt(tokens), len(tokens))
	expect(t, "identical with logits", m, 4*b)
	if m.Anchor != 4 || !m.HasLogits {
		t.Errorf("identical with logits: %+v", m)
	}
	longer := x.Prompt(concat(tokens, randTokens(r, 5, 100)))
	expect(t, "extended", Lookup(ix, longer, longer.Len()), 4*b)
	expect(t, "extended, limit 63", Lookup(ix, longer, 63), 2*b)
}

func TestLookupMissingBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const b = 16
	x := mustHasher(t, "fp", b)
	p := x.Prompt(randTokens(r, 10*b+5, 100))
	ix := newFakeIndex()
	ix.save(p, 1, false)
	delete(ix.blocks, p.BlockKey(3)) // block 3 evicted: positions [48, 64)
	m := Lookup(ix, p, p.Len())
	expect(t, "block 3 missing", m, 3*b)
	if m.Blocks != 3 {
		t.Errorf("Blocks %d, want 3", m.Blocks)
	}
	// A tail state inside block 3 needs blocks 0–2 only: it is usable.
	ix.saveState(p, 3*b+7, false)
	expect(t, "tail inside the missing block", Lookup(ix, p, p.Len()), 3*b+7)
	// Without block 0 only states anchored at the seed are usable.
	delete(ix.blocks, p.BlockKey(0))
	expect(t, "block 0 missing", Lookup(ix, p, p.Len()), 0)
	ix.saveState(p, 9, false)
	expect(t, "block 0 missing, state at 9", Lookup(ix, p, p.Len()), 9)
}

func TestLookupSeveralStatesAtOneAnchor(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	const b = 16
	x := mustHasher(t, "fp", b)
	base := randTokens(r, 2*b, 100) // two shared blocks
	ix := newFakeIndex()
	// Four conversations branch inside block 2.
	xs := concat(base, randTokens(r, 10, 100))
	ys := concat(base, randTokens(r, 10, 100))
	for _, c := range []struct {
		tokens []int
		pos    int
	}{{xs, 2*b + 3}, {xs, 2*b + 9}, {ys, 2*b + 5}, {ys, 2*b + 12 - 2}} {
		p := x.Prompt(c.tokens)
		ix.saveBlocks(p, c.pos)
		ix.saveState(p, c.pos, false)
	}
	if n := len(ix.states[x.Prompt(base).Chain(2)]); n != 4 {
		t.Fatalf("%d states at the anchor, want 4", n)
	}
	px := x.Prompt(concat(xs, []int{7, 7}))
	expect(t, "branch x", Lookup(ix, px, px.Len()), 2*b+9)
	expect(t, "branch x, limit", Lookup(ix, px, 2*b+8), 2*b+3)
	py := x.Prompt(concat(ys[:2*b+7], []int{999}))
	expect(t, "branch y cut at 39", Lookup(ix, py, py.Len()), 2*b+5)
	pz := x.Prompt(concat(base, []int{1000}))
	expect(t, "new branch", Lookup(ix, pz, pz.Len()), 0)
}

// TestLookupRandom compares Lookup with a brute force over token slices
// (no hashes) on random prompts from a small alphabet, so prefixes are
// shared often.
func TestLookupRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, b := range []int{1, 3, 8} {
		x := mustHasher(t, "fp", b)
		for trial := range 200 {
			ix := newFakeIndex()
			type saved struct {
				tokens []int
				logits bool
			}
			var states []saved
			var blocks [][]int
			for range r.IntN(6) {
				tokens := randTokens(r, 1+r.IntN(30), 2)
				p := x.Prompt(tokens)
				for i := 0; i < p.Blocks(); i++ {
					if r.IntN(5) > 0 {
						ix.blocks[p.BlockKey(i)] = true
						blocks = append(blocks, tokens[:(i+1)*b])
					}
				}
				for pos := 1; pos <= len(tokens); pos++ {
					if r.IntN(4) == 0 {
						logits := r.IntN(2) == 0
						ix.saveState(p, pos, logits)
						states = append(states, saved{tokens[:pos], logits})
					}
				}
			}
			prompt := randTokens(r, 1+r.IntN(30), 2)
			limit := r.IntN(len(prompt) + 2)
			hasBlock := func(prefix []int) bool {
				return slices.ContainsFunc(blocks, func(bl []int) bool { return slices.Equal(bl, prefix) })
			}
			want := 0
			for _, s := range states {
				pos := len(s.tokens)
				if pos > min(limit, len(prompt)) || !slices.Equal(s.tokens, prompt[:pos]) || (pos == len(prompt) && !s.logits) {
					continue
				}
				ok := true
				for i := 0; (i+1)*b <= pos/b*b; i++ {
					ok = ok && hasBlock(prompt[:(i+1)*b])
				}
				if ok {
					want = max(want, pos)
				}
			}
			m := Lookup(ix, x.Prompt(prompt), limit)
			if m.Pos != want {
				t.Fatalf("B=%d trial %d: Lookup %d, brute force %d (prompt %v, limit %d)", b, trial, m.Pos, want, prompt, limit)
			}
			if m.Hit() && m.Anchor != m.Pos/b {
				t.Fatalf("Anchor %d for Pos %d", m.Anchor, m.Pos)
			}
		}
	}
}
