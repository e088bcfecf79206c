package grammar

import "math"

// Style says where insignificant whitespace may go in JSON, and how much.
// The zero Style is compact JSON: no whitespace at all.
type Style struct {
	// Whitespace is the most bytes of whitespace (space, tab, newline,
	// carriage return) allowed at each place JSON allows it: after { [
	// , and :, before } ] , and :, and around a whole value. Zero allows
	// none; at most MaxWhitespace.
	Whitespace int
	// Python lays JSON out as Python's json.dumps does by default: ", "
	// between items, ": " between a key and its value, and no other
	// whitespace. Whitespace is then ignored.
	Python bool
}

// DefaultStyle allows a little whitespace everywhere JSON allows it:
// enough for a model to space or indent JSON a few levels deep, not
// enough to stall in whitespace.
var DefaultStyle = Style{Whitespace: 16}

// MaxWhitespace bounds Style.Whitespace.
const MaxWhitespace = 1 << 12

// Places of whitespace in objects and arrays.
const (
	slotInner      = iota // after { and [, around :, before , } ]
	slotAfterComma        // after ,
	slotAfterColon        // after :
	slotOuter             // around a whole value
)

type slot struct {
	min, max  uint32
	spaceOnly bool
}

func (st Style) slot(k int) slot {
	if st.Python {
		if k == slotAfterComma || k == slotAfterColon {
			return slot{1, 1, true}
		}
		return slot{}
	}
	return slot{0, uint32(min(max(st.Whitespace, 0), MaxWhitespace)), false}
}

func (sl slot) allows(s sym) bool {
	if sl.spaceOnly {
		return s == ' '
	}
	return s == ' ' || s == '\t' || s == '\n' || s == '\r'
}

// Phases of an object or array frame, kept in the low byte of a; the
// whitespace read at the current place is in a>>8.
const (
	phOpen       = iota // before { or [
	phAfterOpen         // after { or [
	phKey               // inside a declared key (c is the key trie state)
	phAfterKey          // after a key (c is the property, or addlMarker)
	phAfterColon        // after :, before the value
	phAfterValue        // after a value or item
	phAfterComma        // after ,
	phDone              // after } or ]
)

// addlMarker in c marks a key that is not a declared property.
const addlMarker = math.MaxUint32

func slotOf(ph uint32) int {
	switch ph {
	case phAfterComma:
		return slotAfterComma
	case phAfterColon:
		return slotAfterColon
	}
	return slotInner
}

// objProp is a declared property of an object.
type objProp struct {
	name     string
	key      string // as JSON, quotes included
	value    int32
	required bool
}

// objSpec is a JSON object whose declared properties come in their
// declared order, each at most once (the required ones always), and then,
// if addl >= 0, any number of other keys with values of addl. A frame's b
// is the index of the next declared property that may come.
type objSpec struct {
	props   []objProp
	addl    int32 // value of other keys, -1 for none
	addlKey int32 // the string of other keys: not a declared name
	style   Style

	reqFrom []int32 // first required property at or after i, or len(props)
	keys    keyTrie
}

// keyTrie matches declared keys byte by byte; state 0 is before the
// opening quote.
type keyTrie struct {
	edges [][]keyEdge
	cand  [][]int32 // properties whose key goes through the state, ascending
	term  []int32   // property whose key ends at the state, or -1
}

type keyEdge struct {
	b  byte
	to int32
}

func (k *keyTrie) step(q int32, s sym) int32 {
	if s >= symSpecial0 {
		return -1
	}
	for _, e := range k.edges[q] {
		if e.b == byte(s) {
			return e.to
		}
	}
	return -1
}

func (o *objSpec) finish(p *program) {
	n := len(o.props)
	o.reqFrom = make([]int32, n+1)
	o.reqFrom[n] = int32(n)
	for i := n - 1; i >= 0; i-- {
		o.reqFrom[i] = o.reqFrom[i+1]
		if o.props[i].required {
			o.reqFrom[i] = int32(i)
		}
	}
	k := keyTrie{edges: [][]keyEdge{nil}, cand: [][]int32{nil}, term: []int32{-1}}
	for j, pr := range o.props {
		q := int32(0)
		k.cand[0] = append(k.cand[0], int32(j))
		for x := 0; x < len(pr.key); x++ {
			nx := k.step(q, sym(pr.key[x]))
			if nx < 0 {
				nx = int32(len(k.term))
				k.edges = append(k.edges, nil)
				k.cand = append(k.cand, nil)
				k.term = append(k.term, -1)
				k.edges[q] = append(k.edges[q], keyEdge{pr.key[x], nx})
			}
			q = nx
			k.cand[q] = append(k.cand[q], int32(j))
		}
		k.term[q] = int32(j)
	}
	o.keys = k
}

// last returns the last declared property that may come from i on: the
// first required one, or the last of all.
func (o *objSpec) last(i uint32) int32 {
	if int(i) >= len(o.props) {
		return -1
	}
	if r := o.reqFrom[i]; int(r) < len(o.props) {
		return r
	}
	return int32(len(o.props) - 1)
}

// keyAllowed reports whether key trie state q leads to a property that
// may come from i on and whose value fits at nesting ctx.
func (o *objSpec) keyAllowed(r *runner, q int32, i uint32, ctx int32) bool {
	last := o.last(i)
	for _, j := range o.keys.cand[q] {
		if j < int32(i) {
			continue
		}
		if j > last {
			break
		}
		if r.feasible(o.props[j].value, ctx) {
			return true
		}
	}
	return false
}

func (o *objSpec) addlAllowed(r *runner, i uint32, ctx int32) bool {
	return o.addl >= 0 && o.closeAllowed(i) && r.feasible(o.addl, ctx)
}

func (o *objSpec) closeAllowed(i uint32) bool {
	return int(i) >= len(o.props) || int(o.reqFrom[i]) == len(o.props)
}

// object feeds s to an object frame (see stepDone and its kin).
func (r *runner) object(t thread, s sym, out []thread) ([]thread, thread, int) {
	o := &r.p.objs[r.p.nodes[t.f.node].aux]
	ph, ws := t.f.a&0xff, t.f.a>>8
	switch ph {
	case phOpen:
		if s != '{' {
			return out, t, stepDone
		}
		t.f.a = phAfterOpen
		return append(out, t), t, stepDone
	case phDone:
		return out, t, stepPop
	case phKey:
		q := o.keys.step(int32(t.f.c), s)
		if q < 0 || !o.keyAllowed(r, q, t.f.b, t.f.depth) {
			return out, t, stepDone
		}
		if j := o.keys.term[q]; j >= 0 {
			t.f.a, t.f.b, t.f.c = phAfterKey, uint32(j+1), uint32(j)
		} else {
			t.f.c = uint32(q)
		}
		return append(out, t), t, stepDone
	}
	sl := o.style.slot(slotOf(ph))
	if ws < sl.max && sl.allows(s) {
		t.f.a = ph | (ws+1)<<8
		return append(out, t), t, stepDone
	}
	if ws < sl.min {
		return out, t, stepDone
	}
	i := t.f.b
	switch ph {
	case phAfterOpen, phAfterComma:
		if s == '}' && ph == phAfterOpen && o.closeAllowed(i) {
			t.f.a = phDone
			return append(out, t), t, stepDone
		}
		if s != '"' {
			return out, t, stepDone
		}
		// A key: a declared one, or another.
		if q := o.keys.step(0, s); q >= 0 && o.keyAllowed(r, q, i, t.f.depth) {
			u := t
			u.f.a, u.f.c = phKey, uint32(q)
			out = append(out, u)
		}
		if o.addlAllowed(r, i, t.f.depth) {
			f := t.f
			f.a, f.b, f.c = phAfterKey, uint32(len(o.props)), addlMarker
			out = r.advance(r.push(t, f, o.addlKey), s, out)
		}
		return out, t, stepDone
	case phAfterKey:
		if s != ':' {
			return out, t, stepDone
		}
		t.f.a = phAfterColon
		return append(out, t), t, stepDone
	case phAfterColon:
		v := o.addl
		if t.f.c != addlMarker {
			v = o.props[t.f.c].value
		}
		f := t.f
		f.a = phAfterValue
		return out, r.push(t, f, v), stepGo
	case phAfterValue:
		switch s {
		case ',':
			if o.keyAllowed(r, 0, i, t.f.depth) || o.addlAllowed(r, i, t.f.depth) {
				t.f.a = phAfterComma
				return append(out, t), t, stepDone
			}
		case '}':
			if o.closeAllowed(i) {
				t.f.a = phDone
				return append(out, t), t, stepDone
			}
		}
	}
	return out, t, stepDone
}

// arrSpec is a JSON array of at least min and at most max items: item k
// is prefix[k], or items past the prefix (-1: none). A frame's b is the
// number of items so far.
type arrSpec struct {
	prefix   []int32
	items    int32
	min, max uint32
	style    Style
}

func (a *arrSpec) item(k uint32) int32 {
	if int(k) < len(a.prefix) {
		return a.prefix[k]
	}
	return a.items
}

// itemAllowed reports whether item k may come, at nesting ctx.
func (a *arrSpec) itemAllowed(r *runner, k uint32, ctx int32) bool {
	it := a.item(k)
	return k < a.max && it >= 0 && r.feasible(it, ctx)
}

// array feeds s to an array frame.
func (r *runner) array(t thread, s sym, out []thread) ([]thread, thread, int) {
	a := &r.p.arrs[r.p.nodes[t.f.node].aux]
	ph, ws := t.f.a&0xff, t.f.a>>8
	switch ph {
	case phOpen:
		if s != '[' {
			return out, t, stepDone
		}
		t.f.a = phAfterOpen
		return append(out, t), t, stepDone
	case phDone:
		return out, t, stepPop
	}
	sl := a.style.slot(slotOf(ph))
	if ws < sl.max && sl.allows(s) {
		t.f.a = ph | (ws+1)<<8
		return append(out, t), t, stepDone
	}
	if ws < sl.min {
		return out, t, stepDone
	}
	n := t.f.b
	switch ph {
	case phAfterOpen, phAfterComma:
		if s == ']' && ph == phAfterOpen {
			if a.min == 0 {
				t.f.a = phDone
				return append(out, t), t, stepDone
			}
			return out, t, stepDone
		}
		if !a.itemAllowed(r, n, t.f.depth) {
			return out, t, stepDone
		}
		f := t.f
		f.a, f.b = phAfterValue, n+1
		return out, r.push(t, f, a.item(n)), stepGo
	case phAfterValue:
		switch s {
		case ',':
			if a.itemAllowed(r, n, t.f.depth) {
				t.f.a = phAfterComma
				return append(out, t), t, stepDone
			}
		case ']':
			if n >= a.min {
				t.f.a = phDone
				return append(out, t), t, stepDone
			}
		}
	}
	return out, t, stepDone
}
