package grammar

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/k3go/k3/grammar/internal/automaton"
	"github.com/k3go/k3/grammar/internal/lexer"
)

// Constraint is what a sampler needs to constrain generation: a source of
// matchers, one per sequence. A Constraint is bound to one vocabulary,
// immutable and safe for concurrent use; implement it to plug in a
// grammar of your own. [Grammar.Constraint] gives the package's.
type Constraint interface {
	// NewMatcher returns a matcher at the start of a sequence.
	NewMatcher() Matcher
}

// Matcher follows one sequence through a constraint. It is not safe for
// concurrent use; give each sequence its own (see Clone).
//
// A sampler calls FillMask before sampling each token, samples among the
// allowed ids only, then calls Accept with the chosen id. When CanEnd is
// true the sampler may also let its own stop tokens through (the
// constraint is satisfied if the sequence stops here); when Done is true
// nothing but stopping is left. Speculative decoding advances through
// drafted tokens with Accept and goes back with Rollback.
type Matcher interface {
	// FillMask sets bit id (mask[id/64] >> (id%64) & 1) for every token
	// that may come next and clears the others; mask needs
	// Vocab.MaskWords words. A token is allowed exactly when, after it,
	// the constraint can still be completed.
	FillMask(mask []uint64) error
	// Allowed reports whether token id may come next (without a mask).
	Allowed(id int) bool
	// Accept moves past token id. It fails, changing nothing, when id is
	// not allowed.
	Accept(id int) error
	// CanEnd reports whether the sequence may end here.
	CanEnd() bool
	// Done reports whether the sequence must end here: it may end, and no
	// token may follow.
	Done() bool
	// Rollback undoes the last n accepted tokens.
	Rollback(n int) error
	// Accepted returns the number of tokens accepted so far (net of
	// rollbacks).
	Accepted() int
	// Clone returns an independent copy in the same state.
	Clone() Matcher
}

// ErrNotAllowed is wrapped by Accept's error for a token the constraint
// does not allow there.
var ErrNotAllowed = errors.New("grammar: token not allowed")

// ErrAmbiguous is returned when a grammar keeps more alternatives alive
// at once than a matcher follows (MaxThreads).
var ErrAmbiguous = errors.New("grammar: too many alternatives alive at once")

// MaxThreads bounds the alternatives a matcher follows at once.
const MaxThreads = 256

// GrammarConstraint is a Grammar bound to a Vocab: the package's
// Constraint. It caches, as masks need them, the token classes of the
// grammar's patterns and formats; bind a grammar once per request and
// share the constraint among that request's sequences.
type GrammarConstraint struct {
	p *program
	v *Vocab
	// symOf maps a vocabulary special (its index in v.specials) to the
	// grammar's symbol for it.
	symOf []sym
	// specSyms lists the distinct grammar symbols of the specials (named
	// ones, and symOther), and specIDs the token ids of each.
	specSyms []sym
	specIDs  [][]int32

	classes    sync.Map // lexer.ClassKey → *lexer.ClassEntry, for strings with a dfa
	classBytes atomic.Int64
	lexemes    sync.Map // lexemeKey → *lexer.LexemeEntry
}

// Constraint binds g to the vocabulary v. It fails when g names a special
// token that v does not have.
func (g *Grammar) Constraint(v *Vocab) (*GrammarConstraint, error) {
	c := &GrammarConstraint{p: g.p, v: v, symOf: make([]sym, len(v.specials))}
	for k := range c.symOf {
		c.symOf[k] = symOther
	}
	for k, name := range g.p.specials {
		idx, ok := v.byName[name]
		if !ok {
			return nil, fmt.Errorf("grammar: the vocabulary has no special token %q", name)
		}
		c.symOf[idx] = symSpecial0 + sym(k)
	}
	index := map[sym]int{}
	for k, s := range c.symOf {
		at, ok := index[s]
		if !ok {
			at = len(c.specSyms)
			index[s] = at
			c.specSyms = append(c.specSyms, s)
			c.specIDs = append(c.specIDs, nil)
		}
		c.specIDs[at] = append(c.specIDs[at], int32(v.specials[k].ID))
	}
	return c, nil
}

// Vocab returns the vocabulary c is bound to.
func (c *GrammarConstraint) Vocab() *Vocab { return c.v }

// NewMatcher returns a matcher at the start of a sequence.
func (c *GrammarConstraint) NewMatcher() Matcher { return c.newMatcher() }

func (c *GrammarConstraint) newMatcher() *GrammarMatcher {
	m := &GrammarMatcher{c: c, r: runner{p: c.p}}
	m.cur = append(m.cur, thread{f: m.r.enter(c.p.root, 0), parent: -1})
	m.pushHistory()
	return m
}

type lexemeKey struct {
	dfa *automaton.DFA
	q   int32
}

// maxClassBytes bounds the memory of the token classes one constraint
// keeps for its patterns and formats; past it, classes are computed for
// each mask and dropped (slower, but a hostile pattern cannot make a
// request hold gigabytes).
const maxClassBytes = 64 << 20

func (c *GrammarConstraint) stringClass(k lexer.ClassKey) *lexer.ClassEntry {
	cache, shared := &c.classes, k.DFA == nil || k.DFA.Shared
	if shared {
		cache = &c.v.classes
	}
	if e, ok := cache.Load(k); ok {
		return e.(*lexer.ClassEntry)
	}
	e := lexer.BuildStringClass(&c.v.trie, c.v.tokens, c.v.size, k)
	if !shared && c.classBytes.Add(int64(e.Bytes())) > maxClassBytes {
		return e
	}
	x, _ := cache.LoadOrStore(k, e)
	return x.(*lexer.ClassEntry)
}

func (c *GrammarConstraint) lexemeClass(d *automaton.DFA, q int32) *lexer.LexemeEntry {
	k := lexemeKey{d, q}
	if e, ok := c.lexemes.Load(k); ok {
		return e.(*lexer.LexemeEntry)
	}
	e, _ := c.lexemes.LoadOrStore(k, lexer.BuildLexemeClass(&c.v.trie, c.v.size, d, q))
	return e.(*lexer.LexemeEntry)
}

// GrammarMatcher is the package's Matcher.
type GrammarMatcher struct {
	c   *GrammarConstraint
	r   runner
	cur []thread

	// hist[k] is the state after k accepted tokens: its threads are
	// histThreads[hist[k].from:hist[k].to], its arena length hist[k].arena.
	hist        []histEntry
	histThreads []thread

	// scratch
	sbuf    []thread
	scratch []uint64
	root    [1]thread
	tbuf    []thread
	tbuf2   []thread
	general []thread
	setLo   []int32
	setHi   []int32
	marks   []int32
	err     error
}

type histEntry struct {
	from, to int32
	arena    int32
}

func (m *GrammarMatcher) pushHistory() {
	from := int32(len(m.histThreads))
	m.histThreads = append(m.histThreads, m.cur...)
	m.hist = append(m.hist, histEntry{from: from, to: int32(len(m.histThreads)), arena: int32(len(m.r.arena))})
}

// Accepted returns the number of tokens accepted so far.
func (m *GrammarMatcher) Accepted() int { return len(m.hist) - 1 }

// Rollback undoes the last n accepted tokens.
func (m *GrammarMatcher) Rollback(n int) error {
	if n < 0 || n > len(m.hist)-1 {
		return fmt.Errorf("grammar: cannot roll back %d tokens after %d", n, len(m.hist)-1)
	}
	m.hist = m.hist[:len(m.hist)-n]
	h := m.hist[len(m.hist)-1]
	m.histThreads = m.histThreads[:h.to]
	m.cur = append(m.cur[:0], m.histThreads[h.from:h.to]...)
	m.r.arena = m.r.arena[:h.arena]
	return nil
}

// Clone returns an independent copy of m in the same state.
func (m *GrammarMatcher) Clone() Matcher {
	n := &GrammarMatcher{c: m.c, r: runner{p: m.r.p}}
	n.r.arena = append([]thread(nil), m.r.arena...)
	n.cur = append([]thread(nil), m.cur...)
	n.hist = append([]histEntry(nil), m.hist...)
	n.histThreads = append([]thread(nil), m.histThreads...)
	return n
}

// symbols returns the symbols of token id, or false for an unknown id.
func (m *GrammarMatcher) symbols(id int, one *[1]sym) ([]sym, string, bool) {
	v := m.c.v
	if id < 0 || id >= v.size {
		return nil, "", false
	}
	if k := v.symOf[id]; k >= 0 {
		one[0] = m.c.symOf[k]
		return one[:], "", true
	}
	if v.tokens[id] == "" {
		return nil, "", false
	}
	return nil, v.tokens[id], true
}

// feed advances the threads in from over the symbols of a token (one
// special symbol, or the bytes of text) and returns the threads after it,
// in the matcher's scratch. The arena grows with what they push.
func (m *GrammarMatcher) feed(from []thread, special []sym, text string) []thread {
	a, b := m.tbuf[:0], m.tbuf2[:0]
	a = append(a, from...)
	step := func(s sym) {
		b = b[:0]
		for _, t := range a {
			b = m.r.advance(t, s, b)
		}
		b = dedupe(b)
		if len(b) > MaxThreads {
			m.err = ErrAmbiguous
			b = b[:MaxThreads]
		}
		a, b = b, a
	}
	for _, s := range special {
		step(s)
	}
	for x := 0; x < len(text) && len(a) > 0; x++ {
		step(sym(text[x]))
	}
	m.tbuf, m.tbuf2 = a, b
	return a
}

// takes reports whether thread t can take symbol s (what it pushes stays
// on the arena, for the caller to drop).
func (m *GrammarMatcher) takes(t thread, s sym) bool {
	out := m.r.advance(t, s, m.sbuf[:0])
	m.sbuf = out[:0]
	return len(out) > 0
}

// dedupe drops repeated threads.
func dedupe(ts []thread) []thread {
	if len(ts) < 2 {
		return ts
	}
	out := ts[:1]
next:
	for _, t := range ts[1:] {
		for _, u := range out {
			if u == t {
				continue next
			}
		}
		out = append(out, t)
	}
	return out
}

// Allowed reports whether token id may come next.
func (m *GrammarMatcher) Allowed(id int) bool {
	var one [1]sym
	sp, text, ok := m.symbols(id, &one)
	if !ok {
		return false
	}
	mark := len(m.r.arena)
	n := len(m.feed(m.cur, sp, text))
	m.r.arena = m.r.arena[:mark]
	return n > 0
}

// Accept moves past token id.
func (m *GrammarMatcher) Accept(id int) error {
	var one [1]sym
	sp, text, ok := m.symbols(id, &one)
	if !ok {
		return fmt.Errorf("%w: %d is not a token of the vocabulary", ErrNotAllowed, id)
	}
	mark := len(m.r.arena)
	m.err = nil
	next := m.feed(m.cur, sp, text)
	if len(next) == 0 {
		m.r.arena = m.r.arena[:mark]
		return fmt.Errorf("%w: token %d", ErrNotAllowed, id)
	}
	m.cur = append(m.cur[:0], next...)
	m.pushHistory()
	return m.err
}

// CanEnd reports whether the sequence may end here.
func (m *GrammarMatcher) CanEnd() bool {
	for _, t := range m.cur {
		if m.r.canEnd(t) {
			return true
		}
	}
	return false
}

// Done reports whether the sequence must end here.
func (m *GrammarMatcher) Done() bool {
	if !m.CanEnd() {
		return false
	}
	mark := len(m.r.arena)
	defer func() { m.r.arena = m.r.arena[:mark] }()
	for s := 0; s < 256; s++ {
		for _, t := range m.cur {
			if m.takes(t, sym(s)) {
				return false
			}
		}
	}
	for _, s := range m.c.specSyms {
		for _, t := range m.cur {
			if m.takes(t, s) {
				return false
			}
		}
	}
	return true
}

// FillMask sets the bits of the tokens that may come next.
func (m *GrammarMatcher) FillMask(mask []uint64) error {
	v := m.c.v
	words := maskWords(v.size)
	if len(mask) < words {
		return fmt.Errorf("grammar: mask of %d words, the vocabulary needs %d", len(mask), words)
	}
	clear(mask[:words])
	m.err = nil
	mark := len(m.r.arena)
	m.general = m.general[:0]
	for _, t := range m.cur {
		if !m.fast(t, mask) {
			m.general = append(m.general, t)
		}
	}
	if len(m.general) > 0 {
		m.walk(&v.trie, m.general, mask, exitCheck{})
	}
	// Special tokens: each distinct symbol once.
	for k, s := range m.c.specSyms {
		ok := false
		for _, t := range m.cur {
			if m.takes(t, s) {
				ok = true
				break
			}
		}
		m.r.arena = m.r.arena[:mark]
		if ok {
			for _, id := range m.c.specIDs[k] {
				mask[id>>6] |= 1 << (id & 63)
			}
		}
	}
	m.r.arena = m.r.arena[:mark]
	return m.err
}

// exitCheck, when on, bounds the characters before the quote of an exit
// token: n so far plus those of the token between min and max.
type exitCheck struct {
	n, min, max uint32
	on          bool
}

// noClasses turns the token classes off (tests measure what they save).
var noClasses bool

// fast fills the tokens thread t allows from a token class, when its top
// frame has one; it reports false when t needs a walk of the trie.
func (m *GrammarMatcher) fast(t thread, mask []uint64) bool {
	if noClasses {
		return false
	}
	p := m.r.p
	n := &p.nodes[t.f.node]
	switch n.kind {
	case kText:
		or(mask, m.c.v.ordinary)
		return true
	case kDFA:
		d := p.dfas[n.aux]
		q := d.Start
		if t.f.a > 0 {
			q = int32(t.f.a - 1)
		}
		if q < 0 || m.followTakesBytes(t) {
			return false
		}
		or(mask, m.c.lexemeClass(d, q).Mask)
		return true
	case kString:
		sp := &p.strs[n.aux]
		sub := uint8(t.f.a)
		if sub == lexer.SubStart && sp.Raw {
			sub = lexer.SubNormal
		}
		if sub == lexer.SubStart || sub == lexer.SubClosed {
			return false
		}
		q := int32(t.f.b)
		if sp.DFA == nil {
			q = 0
		} else if uint8(t.f.a) == lexer.SubStart {
			q = sp.DFA.Start
		}
		e := m.c.stringClass(lexer.ClassKey{DFA: sp.DFA, Q: q, Sub: sub, Raw: sp.Raw})
		c := t.f.c
		switch {
		case sp.DFA == nil || sp.Lens == nil:
			rem := uint32(unbounded)
			if sp.Max != unbounded {
				rem = sp.Max - c
			}
			if uint32(e.MaxChars) <= rem {
				or(mask, e.Mask)
				break
			}
			// The tokens are sorted by characters: those that fit are a
			// prefix. Set them one by one when they are few, else take
			// the class's mask and clear the few long ones.
			fit, _ := slices.BinarySearchFunc(e.Chars, rem+1, func(c uint16, r uint32) int { return cmp.Compare(uint32(c), r) })
			if fit <= len(e.IDs)/4 {
				for _, id := range e.IDs[:fit] {
					mask[id>>6] |= 1 << (id & 63)
				}
				break
			}
			m.scratch = append(m.scratch[:0], e.Mask...)
			for _, id := range e.IDs[fit:] {
				m.scratch[id>>6] &^= 1 << (id & 63)
			}
			or(mask, m.scratch)
		default:
			for _, r := range e.Runs {
				if sp.Live(r.Sub, r.Q, c+uint32(r.Chars)) {
					for _, id := range e.IDs[r.From:r.To] {
						mask[id>>6] |= 1 << (id & 63)
					}
				}
			}
		}
		if e.Exits.Nodes() > 0 {
			m.root[0] = t
			m.root[0].f.a = lexer.SubClosed
			m.walk(&e.Exits, m.root[:], mask, exitCheck{n: c, min: sp.Min, max: sp.Max, on: true})
		}
		return true
	}
	return false
}

// followTakesBytes reports whether what follows a lexeme's frame could
// take a byte (so tokens may leave the lexeme in the middle).
func (m *GrammarMatcher) followTakesBytes(t thread) bool {
	if !m.r.pop(&t) {
		return false
	}
	mark := len(m.r.arena)
	defer func() { m.r.arena = m.r.arena[:mark] }()
	for s := 0; s < 256; s++ {
		if m.takes(t, sym(s)) {
			return true
		}
	}
	return false
}

func or(dst, src []uint64) {
	dst = dst[:len(src)]
	for k, x := range src {
		dst[k] |= x
	}
}

// walk sets in mask the tokens of trie tr that some thread of roots
// takes whole. With chk, the trie is a string's exit trie: a token
// counts only if its characters before the quote keep the bounds.
func (m *GrammarMatcher) walk(tr *lexer.Trie, roots []thread, mask []uint64, chk exitCheck) {
	base := len(m.r.arena)
	tb := append(m.tbuf[:0], roots...)
	if cap(m.setLo) < 64 {
		m.setLo, m.setHi, m.marks = make([]int32, 64), make([]int32, 64), make([]int32, 64)
	}
	lo, hi, marks := m.setLo[:1], m.setHi[:1], m.marks[:1]
	lo[0], hi[0], marks[0] = 0, int32(len(tb)), int32(base)
	hit := func(node int) {
		a, b := tr.Records(node)
		for x := a; x < b; x++ {
			if chk.on {
				n := chk.n + tr.Aux[x]
				if n < chk.min || n > chk.max {
					continue
				}
			}
			id := tr.IDs[x]
			mask[id>>6] |= 1 << (id & 63)
		}
	}
	if len(tb) > 0 {
		hit(0)
	}
	for i := 1; i < tr.Nodes(); {
		d := int(tr.Dep[i])
		tb = tb[:hi[d-1]]
		m.r.arena = m.r.arena[:marks[d-1]]
		start := int32(len(tb))
		s := sym(tr.By[i])
		for k := lo[d-1]; k < hi[d-1]; k++ {
			tb = m.r.advance(tb[k], s, tb)
		}
		if n := len(tb) - int(start); n > 1 {
			tb = tb[:start+int32(len(dedupe(tb[start:])))]
			if len(tb)-int(start) > MaxThreads {
				m.err = ErrAmbiguous
				tb = tb[:int(start)+MaxThreads]
			}
		}
		if int32(len(tb)) == start {
			i = int(tr.Skip[i])
			continue
		}
		for len(lo) <= d {
			lo, hi, marks = append(lo, 0), append(hi, 0), append(marks, 0)
		}
		lo[d], hi[d], marks[d] = start, int32(len(tb)), int32(len(m.r.arena))
		if tr.Rec[i] < tr.Rec[i+1] {
			hit(i)
		}
		i++
	}
	m.tbuf = tb
	m.setLo, m.setHi, m.marks = lo, hi, marks
	m.r.arena = m.r.arena[:base]
}

// MaskLogits sets to -Inf the logits of the tokens mask does not allow
// (logits[id] for every id whose bit is clear; ids past the mask count as
// disallowed). Apply it before temperature, top-k and top-p, so that they
// see the allowed tokens only, and greedy decoding picks the best
// allowed one.
func MaskLogits(logits []float32, mask []uint64) {
	negInf := float32(math.Inf(-1))
	for id := range logits {
		w := id >> 6
		if w >= len(mask) || mask[w]>>(id&63)&1 == 0 {
			logits[id] = negInf
		}
	}
}
