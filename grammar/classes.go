package grammar

import (
	"slices"

	"github.com/k3go/k3/grammar/internal/automaton"
	"github.com/k3go/k3/grammar/internal/lexer"
)

// Token classes. Inside a string (or a lexeme such as a regular
// expression's text) most of the vocabulary is allowed, and walking the
// whole trie for every mask would cost milliseconds. What a token does
// there depends only on the lexer's state, not on the rest of the stack:
// it stays inside with some number of characters, or closes the string
// and hands the rest of its bytes to what follows, or cannot come. So the
// classes are computed once per lexer state, with one walk of the trie,
// and kept: per vocabulary for plain strings, per grammar for strings
// with a pattern or format.

// classKey names the lexer state of a string class.
type classKey struct {
	dfa *automaton.DFA
	q   int32
	sub uint8
	raw bool
}

// classEntry holds the tokens of one lexer state.
type classEntry struct {
	// Tokens that stay inside the string: ids and their characters, by
	// characters ascending; with a dfa, grouped in runs of the same
	// sub-state, dfa state and characters after them (whose bounds are
	// checked once per run).
	mask     []uint64
	ids      []int32
	chars    []uint16
	runs     []classRun
	maxChars int
	// exits holds the tokens that close the string, keyed by the bytes
	// after the closing quote, with the characters before it in aux.
	exits trie
}

// bytes returns the memory the entry takes, roughly.
func (e *classEntry) bytes() int {
	return 8*len(e.mask) + 4*len(e.ids) + 2*len(e.chars) + 12*len(e.runs) +
		len(e.exits.by) + 2*len(e.exits.dep) + 4*(len(e.exits.skip)+len(e.exits.rec)+len(e.exits.ids)+len(e.exits.aux))
}

// buildStringClass walks the trie from lexer state k.
func buildStringClass(v *Vocab, k classKey) *classEntry {
	spec := &lexer.String{Raw: k.raw, DFA: k.dfa, Max: unbounded}
	tr := &v.trie
	type state struct {
		sub   uint8
		q     int32
		chars uint32
	}
	var stack []state
	stack = append(stack, state{k.sub, k.q, 0})
	e := &classEntry{}
	var exitKeys []string
	var exitIDs []int32
	var exitAux []uint32
	withDFA := k.dfa != nil
	var subs []uint8
	var qs []int32
	for i := 1; i < tr.nodes(); {
		d := int(tr.dep[i])
		stack = stack[:d]
		ps := stack[d-1]
		nsub, nq, char, ok := spec.Lex(ps.sub, ps.q, tr.by[i])
		if !ok {
			i = int(tr.skip[i])
			continue
		}
		if nsub == lexer.SubClosed {
			if k.dfa == nil || k.dfa.Accept[ps.q] {
				for j := i; j < int(tr.skip[i]); j++ {
					lo, hi := tr.records(j)
					for _, id := range tr.ids[lo:hi] {
						exitKeys = append(exitKeys, v.tokens[id][d:])
						exitIDs = append(exitIDs, id)
						exitAux = append(exitAux, ps.chars)
					}
				}
			}
			i = int(tr.skip[i])
			continue
		}
		n := ps.chars
		if char {
			n++
		}
		stack = append(stack, state{nsub, nq, n})
		lo, hi := tr.records(i)
		for _, id := range tr.ids[lo:hi] {
			e.ids = append(e.ids, id)
			e.chars = append(e.chars, uint16(min(n, 0xFFFF)))
			if withDFA {
				subs = append(subs, nsub)
				qs = append(qs, nq)
			}
		}
		i++
	}
	if withDFA {
		e.groupRuns(subs, qs)
	} else {
		e.sortByChars()
	}
	e.mask = make([]uint64, maskWords(v.size))
	for _, id := range e.ids {
		e.mask[id>>6] |= 1 << (id & 63)
	}
	if len(exitKeys) > 0 {
		order := make([]int, len(exitKeys))
		for x := range order {
			order[x] = x
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case exitKeys[a] < exitKeys[b]:
				return -1
			case exitKeys[a] > exitKeys[b]:
				return 1
			}
			return 0
		})
		keys := make([]string, len(order))
		ids := make([]int32, len(order))
		aux := make([]uint32, len(order))
		for x, o := range order {
			keys[x], ids[x], aux[x] = exitKeys[o], exitIDs[o], exitAux[o]
		}
		e.exits = buildTrieFrom(keys, ids, aux)
	}
	return e
}

// classRun is a run of inside tokens, ids[from:to], that leave a string
// in the same state with the same number of characters.
type classRun struct {
	q        int32
	chars    uint16
	sub      uint8
	from, to int32
}

// sortByChars orders the inside tokens by characters (counting sort).
func (e *classEntry) sortByChars() {
	for _, c := range e.chars {
		e.maxChars = max(e.maxChars, int(c))
	}
	starts := make([]int, e.maxChars+2)
	for _, c := range e.chars {
		starts[int(c)+1]++
	}
	for c := 1; c < len(starts); c++ {
		starts[c] += starts[c-1]
	}
	n := len(e.ids)
	ids := make([]int32, n)
	chars := make([]uint16, n)
	for x := range n {
		c := e.chars[x]
		at := starts[c]
		starts[c]++
		ids[at], chars[at] = e.ids[x], c
	}
	e.ids, e.chars = ids, chars
}

// groupRuns orders the inside tokens of a dfa string into runs: sorted
// by a packed key (dfa state, sub-state, characters, position).
func (e *classEntry) groupRuns(subs []uint8, qs []int32) {
	keys := make([]uint64, len(e.ids))
	for x := range e.ids {
		keys[x] = uint64(qs[x])<<44 | uint64(subs[x])<<40 | uint64(e.chars[x])<<24 | uint64(x)
	}
	slices.Sort(keys)
	ids := make([]int32, len(keys))
	chars := make([]uint16, len(keys))
	for k, key := range keys {
		x := int(key & (1<<24 - 1))
		ids[k], chars[k] = e.ids[x], e.chars[x]
		e.maxChars = max(e.maxChars, int(chars[k]))
		if k == 0 || key>>24 != keys[k-1]>>24 {
			e.runs = append(e.runs, classRun{q: qs[x], chars: chars[k], sub: subs[x], from: int32(k)})
		}
		e.runs[len(e.runs)-1].to = int32(k + 1)
	}
	e.ids, e.chars = ids, chars
}

// lexemeEntry holds the tokens a lexeme's dfa reads whole from one state.
type lexemeEntry struct {
	mask []uint64
}

type lexemeKey struct {
	dfa *automaton.DFA
	q   int32
}

func buildLexemeClass(v *Vocab, d *automaton.DFA, q int32) *lexemeEntry {
	tr := &v.trie
	e := &lexemeEntry{mask: make([]uint64, maskWords(v.size))}
	stack := []int32{q}
	for i := 1; i < tr.nodes(); {
		dep := int(tr.dep[i])
		stack = stack[:dep]
		nq := d.Next(stack[dep-1], tr.by[i])
		if nq < 0 {
			i = int(tr.skip[i])
			continue
		}
		stack = append(stack, nq)
		lo, hi := tr.records(i)
		for _, id := range tr.ids[lo:hi] {
			e.mask[id>>6] |= 1 << (id & 63)
		}
		i++
	}
	return e
}
