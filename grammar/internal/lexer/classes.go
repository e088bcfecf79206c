package lexer

import (
	"slices"

	"github.com/k3go/k3/grammar/internal/automaton"
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

// ClassKey names the lexer state of a string class.
type ClassKey struct {
	DFA *automaton.DFA
	Q   int32
	Sub uint8
	Raw bool
}

// ClassEntry holds the tokens of one lexer state.
type ClassEntry struct {
	// Tokens that stay inside the string: ids and their characters, by
	// characters ascending; with a dfa, grouped in runs of the same
	// sub-state, dfa state and characters after them (whose bounds are
	// checked once per run).
	Mask     []uint64
	IDs      []int32
	Chars    []uint16
	Runs     []ClassRun
	MaxChars int
	// exits holds the tokens that close the string, keyed by the bytes
	// after the closing quote, with the characters before it in aux.
	Exits Trie
}

// Bytes returns the memory the entry takes, roughly.
func (e *ClassEntry) Bytes() int {
	return 8*len(e.Mask) + 4*len(e.IDs) + 2*len(e.Chars) + 12*len(e.Runs) +
		len(e.Exits.By) + 2*len(e.Exits.Dep) + 4*(len(e.Exits.Skip)+len(e.Exits.Rec)+len(e.Exits.IDs)+len(e.Exits.Aux))
}

// BuildStringClass walks the trie from lexer state k.
func BuildStringClass(tr *Trie, tokens []string, size int, k ClassKey) *ClassEntry {
	spec := &String{Raw: k.Raw, DFA: k.DFA, Max: automaton.Unbounded}
	type state struct {
		sub   uint8
		q     int32
		chars uint32
	}
	var stack []state
	stack = append(stack, state{k.Sub, k.Q, 0})
	e := &ClassEntry{}
	var exitKeys []string
	var exitIDs []int32
	var exitAux []uint32
	withDFA := k.DFA != nil
	var subs []uint8
	var qs []int32
	for i := 1; i < tr.Nodes(); {
		d := int(tr.Dep[i])
		stack = stack[:d]
		ps := stack[d-1]
		nsub, nq, char, ok := spec.Lex(ps.sub, ps.q, tr.By[i])
		if !ok {
			i = int(tr.Skip[i])
			continue
		}
		if nsub == SubClosed {
			if k.DFA == nil || k.DFA.Accept[ps.q] {
				for j := i; j < int(tr.Skip[i]); j++ {
					lo, hi := tr.Records(j)
					for _, id := range tr.IDs[lo:hi] {
						exitKeys = append(exitKeys, tokens[id][d:])
						exitIDs = append(exitIDs, id)
						exitAux = append(exitAux, ps.chars)
					}
				}
			}
			i = int(tr.Skip[i])
			continue
		}
		n := ps.chars
		if char {
			n++
		}
		stack = append(stack, state{nsub, nq, n})
		lo, hi := tr.Records(i)
		for _, id := range tr.IDs[lo:hi] {
			e.IDs = append(e.IDs, id)
			e.Chars = append(e.Chars, uint16(min(n, 0xFFFF)))
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
	e.Mask = make([]uint64, (size+63)/64)
	for _, id := range e.IDs {
		e.Mask[id>>6] |= 1 << (id & 63)
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
		e.Exits = buildTrieFrom(keys, ids, aux)
	}
	return e
}

// ClassRun is a run of inside tokens, ids[from:to], that leave a string
// in the same state with the same number of characters.
type ClassRun struct {
	Q        int32
	Chars    uint16
	Sub      uint8
	From, To int32
}

// sortByChars orders the inside tokens by characters (counting sort).
func (e *ClassEntry) sortByChars() {
	for _, c := range e.Chars {
		e.MaxChars = max(e.MaxChars, int(c))
	}
	starts := make([]int, e.MaxChars+2)
	for _, c := range e.Chars {
		starts[int(c)+1]++
	}
	for c := 1; c < len(starts); c++ {
		starts[c] += starts[c-1]
	}
	n := len(e.IDs)
	ids := make([]int32, n)
	chars := make([]uint16, n)
	for x := range n {
		c := e.Chars[x]
		at := starts[c]
		starts[c]++
		ids[at], chars[at] = e.IDs[x], c
	}
	e.IDs, e.Chars = ids, chars
}

// groupRuns orders the inside tokens of a dfa string into runs: sorted
// by a packed key (dfa state, sub-state, characters, position).
func (e *ClassEntry) groupRuns(subs []uint8, qs []int32) {
	keys := make([]uint64, len(e.IDs))
	for x := range e.IDs {
		keys[x] = uint64(qs[x])<<44 | uint64(subs[x])<<40 | uint64(e.Chars[x])<<24 | uint64(x)
	}
	slices.Sort(keys)
	ids := make([]int32, len(keys))
	chars := make([]uint16, len(keys))
	for k, key := range keys {
		x := int(key & (1<<24 - 1))
		ids[k], chars[k] = e.IDs[x], e.Chars[x]
		e.MaxChars = max(e.MaxChars, int(chars[k]))
		if k == 0 || key>>24 != keys[k-1]>>24 {
			e.Runs = append(e.Runs, ClassRun{Q: qs[x], Chars: chars[k], Sub: subs[x], From: int32(k)})
		}
		e.Runs[len(e.Runs)-1].To = int32(k + 1)
	}
	e.IDs, e.Chars = ids, chars
}

// LexemeEntry holds the tokens a lexeme's dfa reads whole from one state.
type LexemeEntry struct {
	Mask []uint64
}

// BuildLexemeClass walks the trie from state q of a lexeme's automaton d:
// the tokens d reads whole from there.
func BuildLexemeClass(tr *Trie, size int, d *automaton.DFA, q int32) *LexemeEntry {
	e := &LexemeEntry{Mask: make([]uint64, (size+63)/64)}
	stack := []int32{q}
	for i := 1; i < tr.Nodes(); {
		dep := int(tr.Dep[i])
		stack = stack[:dep]
		nq := d.Next(stack[dep-1], tr.By[i])
		if nq < 0 {
			i = int(tr.Skip[i])
			continue
		}
		stack = append(stack, nq)
		lo, hi := tr.Records(i)
		for _, id := range tr.IDs[lo:hi] {
			e.Mask[id>>6] |= 1 << (id & 63)
		}
		i++
	}
	return e
}
