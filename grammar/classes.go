package grammar

import (
	"slices"
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
	dfa *dfa
	q   int32
	sub uint8
	raw bool
}

// classEntry holds the tokens of one lexer state.
type classEntry struct {
	// Tokens that stay inside the string, by characters ascending: ids,
	// their characters, and (with a dfa) the sub-state and dfa state
	// after them.
	mask     []uint64
	ids      []int32
	chars    []uint16
	subs     []uint8
	qs       []int32
	maxChars int
	// exits holds the tokens that close the string, keyed by the bytes
	// after the closing quote, with the characters before it in aux.
	exits trie
}

// buildStringClass walks the trie from lexer state k.
func buildStringClass(v *Vocab, k classKey) *classEntry {
	spec := &strSpec{raw: k.raw, dfa: k.dfa, max: unbounded}
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
	for i := 1; i < tr.nodes(); {
		d := int(tr.dep[i])
		stack = stack[:d]
		ps := stack[d-1]
		nsub, nq, char, ok := spec.lex(ps.sub, ps.q, tr.by[i])
		if !ok {
			i = int(tr.skip[i])
			continue
		}
		if nsub == sqClosed {
			if k.dfa == nil || k.dfa.accept[ps.q] {
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
				e.subs = append(e.subs, nsub)
				e.qs = append(e.qs, nq)
			}
		}
		i++
	}
	e.sortByChars(withDFA)
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

// sortByChars orders the inside tokens by characters (counting sort).
func (e *classEntry) sortByChars(withDFA bool) {
	count := map[uint16]int{}
	for _, c := range e.chars {
		count[c]++
		e.maxChars = max(e.maxChars, int(c))
	}
	starts := make([]int, e.maxChars+2)
	for c, n := range count {
		starts[int(c)+1] += n
	}
	for c := 1; c < len(starts); c++ {
		starts[c] += starts[c-1]
	}
	n := len(e.ids)
	ids := make([]int32, n)
	chars := make([]uint16, n)
	var subs []uint8
	var qs []int32
	if withDFA {
		subs = make([]uint8, n)
		qs = make([]int32, n)
	}
	for x := range n {
		c := e.chars[x]
		at := starts[c]
		starts[c]++
		ids[at], chars[at] = e.ids[x], c
		if withDFA {
			subs[at], qs[at] = e.subs[x], e.qs[x]
		}
	}
	e.ids, e.chars, e.subs, e.qs = ids, chars, subs, qs
}

// lexemeEntry holds the tokens a lexeme's dfa reads whole from one state.
type lexemeEntry struct {
	mask []uint64
}

type lexemeKey struct {
	dfa *dfa
	q   int32
}

func buildLexemeClass(v *Vocab, d *dfa, q int32) *lexemeEntry {
	tr := &v.trie
	e := &lexemeEntry{mask: make([]uint64, maskWords(v.size))}
	stack := []int32{q}
	for i := 1; i < tr.nodes(); {
		dep := int(tr.dep[i])
		stack = stack[:dep]
		nq := d.next(stack[dep-1], tr.by[i])
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
