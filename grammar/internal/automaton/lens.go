package automaton

import (
	"fmt"
)

// lens tells, for each dfa state, how many more characters an accepted
// content can have from there: bit L of set[q] when some accepted
// continuation has L characters (L <= top), and beyond[q] when one has
// more than top.
type Lens struct {
	top    int
	words  int
	set    []uint64 // [q*words + L/64]
	beyond []bool
}

// ok reports whether from state q, with n characters so far, a
// continuation ends with between lo and hi characters in all.
func (l *Lens) OK(q int32, n, lo, hi uint32) bool {
	from := 0
	if lo > n {
		from = int(lo - n)
	}
	to := l.top
	if hi != Unbounded {
		if n > hi {
			return false
		}
		to = min(to, int(hi-n))
	}
	if hi == Unbounded && l.beyond[q] {
		return true
	}
	if from > to {
		return false
	}
	row := l.set[int(q)*l.words : int(q+1)*l.words]
	for w := from >> 6; w <= to>>6; w++ {
		x := row[w]
		if w == from>>6 {
			x &= ^uint64(0) << (from & 63)
		}
		if w == to>>6 && to&63 != 63 {
			x &= 1<<(to&63+1) - 1
		}
		if x != 0 {
			return true
		}
	}
	return false
}

// maxLensWork bounds the work of computing a lens table.
const maxLensWork = 1 << 24

// NewLens computes the lens table of d up to top characters, with the
// beyond flags when needed (hi Unbounded).
func NewLens(d *DFA, top int, needBeyond bool) (*Lens, error) {
	ns := d.States()
	if needBeyond {
		top = max(top, ns)
	}
	if work := (top + 1) * ns * d.nclass; work > maxLensWork || top > 1<<20 {
		return nil, fmt.Errorf("%w: length bounds of %d characters with a pattern or format of %d states", ErrUnsupported, top, ns)
	}
	words := (top + 64) / 64
	l := &Lens{top: top, words: words, set: make([]uint64, ns*words), beyond: make([]bool, ns)}
	// Reverse edges, split by weight: a byte that starts a character
	// weighs 1, a continuation byte 0.
	rev0 := make([][]int32, ns)
	rev1 := make([][]int32, ns)
	contClass := make([]bool, d.nclass)
	for b := 0x80; b < 0xC0; b++ {
		contClass[d.class[b]] = true
	}
	for q := range ns {
		for c := range d.nclass {
			t := d.trans[q*d.nclass+c]
			if t < 0 {
				continue
			}
			if contClass[c] {
				rev0[t] = append(rev0[t], int32(q))
			} else {
				rev1[t] = append(rev1[t], int32(q))
			}
		}
	}
	cur := make([]bool, ns)
	var stack []int32
	// close0 adds the states that reach a state of cur by continuation
	// bytes only.
	close0 := func() {
		stack = stack[:0]
		for q := range ns {
			if cur[q] {
				stack = append(stack, int32(q))
			}
		}
		for len(stack) > 0 {
			q := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, p := range rev0[q] {
				if !cur[p] {
					cur[p] = true
					stack = append(stack, p)
				}
			}
		}
	}
	for q := range ns {
		cur[q] = d.Accept[q]
	}
	next := make([]bool, ns)
	for L := 0; L <= top; L++ {
		close0()
		any := false
		for q := range ns {
			if cur[q] {
				l.set[q*words+L>>6] |= 1 << (L & 63)
				any = true
			}
		}
		if !any {
			break
		}
		clear(next)
		for q := range ns {
			if cur[q] {
				for _, p := range rev1[q] {
					next[p] = true
				}
			}
		}
		cur, next = next, cur
	}
	if needBeyond {
		// Every state can reach acceptance, and no cycle reads
		// continuation bytes only (the dfa accepts valid UTF-8 only), so
		// a continuation longer than ns characters exists exactly when a
		// cycle that reads a character is reachable; shorter ones are in
		// the table, whose top is at least ns.
		onCycle := weightedCycles(d, contClass)
		reach := make([]bool, ns)
		for q := range ns {
			reach[q] = onCycle[q]
		}
		for changed := true; changed; {
			changed = false
			for q := range ns {
				if reach[q] {
					continue
				}
				for c := range d.nclass {
					if t := d.trans[q*d.nclass+c]; t >= 0 && reach[t] {
						reach[q] = true
						changed = true
						break
					}
				}
			}
		}
		copy(l.beyond, reach)
	}
	return l, nil
}

// weightedCycles marks the states on a cycle that reads at least one
// byte starting a character.
func weightedCycles(d *DFA, contClass []bool) []bool {
	ns := d.States()
	// Tarjan's strongly connected components, iteratively.
	index := make([]int32, ns)
	low := make([]int32, ns)
	onStack := make([]bool, ns)
	comp := make([]int32, ns)
	for q := range index {
		index[q] = -1
	}
	var stack []int32
	next := int32(0)
	ncomp := int32(0)
	type item struct {
		q int32
		c int
	}
	for root := range ns {
		if index[root] >= 0 {
			continue
		}
		work := []item{{int32(root), 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, int32(root))
		onStack[root] = true
		for len(work) > 0 {
			it := &work[len(work)-1]
			q := it.q
			if it.c < d.nclass {
				t := d.trans[int(q)*d.nclass+it.c]
				it.c++
				if t < 0 {
					continue
				}
				if index[t] < 0 {
					index[t], low[t] = next, next
					next++
					stack = append(stack, t)
					onStack[t] = true
					work = append(work, item{t, 0})
				} else if onStack[t] {
					low[q] = min(low[q], index[t])
				}
				continue
			}
			if low[q] == index[q] {
				for {
					x := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[x] = false
					comp[x] = ncomp
					if x == q {
						break
					}
				}
				ncomp++
			}
			work = work[:len(work)-1]
			if len(work) > 0 {
				p := work[len(work)-1].q
				low[p] = min(low[p], low[q])
			}
		}
	}
	cyc := make([]bool, ncomp)
	for q := range ns {
		for c := range d.nclass {
			t := d.trans[q*d.nclass+c]
			if t >= 0 && comp[t] == comp[q] && !contClass[c] {
				cyc[comp[q]] = true
			}
		}
	}
	on := make([]bool, ns)
	for q := range ns {
		on[q] = cyc[comp[q]]
	}
	return on
}
