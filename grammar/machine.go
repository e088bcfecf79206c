package grammar

// The matcher runs a program as a set of threads, each a stack of frames.
// A thread's top frame is held by value; the frames below it live in an
// arena that only grows while a sequence advances, so a state is a small
// slice of threads plus the arena's length, and going back to an earlier
// state is truncating the arena. Where the grammar is ambiguous (an
// alternative whose branches start alike) a thread forks; threads that
// cannot take a symbol die.

// frame is one node being matched: its state is a, b and c, with a
// meaning per kind (see the kinds). depth is the nesting of objects and
// arrays at the frame: its own for an object or array, its enclosing
// one's for anything else.
type frame struct {
	node    int32
	depth   int32
	a, b, c uint32
}

// thread is a stack: its top frame, and the arena index of the thread
// entry below it (-1 at the bottom).
type thread struct {
	f      frame
	parent int32
}

// runner steps threads of a program; it owns the arena the threads'
// lower frames live in.
type runner struct {
	p     *program
	arena []thread
}

// feasible reports whether node n can be entered at nesting ctx: what it
// needs at least fits under the program's MaxDepth.
func (r *runner) feasible(n int32, ctx int32) bool {
	return ctx+r.p.minDepth[n] <= r.p.maxDepth
}

// enter returns the start frame of node n entered at nesting ctx.
func (r *runner) enter(n int32, ctx int32) frame {
	d := ctx
	if r.p.isContainer(n) {
		d++
	}
	return frame{node: n, depth: d}
}

// push saves the current top frame (updated to resume as f) and makes
// child the new top, entered from f's nesting.
func (r *runner) push(t thread, f frame, child int32) thread {
	r.arena = append(r.arena, thread{f: f, parent: t.parent})
	return thread{f: r.enter(child, f.depth), parent: int32(len(r.arena) - 1)}
}

// pop drops the top frame; it reports false at the bottom of the stack.
func (r *runner) pop(t *thread) bool {
	if t.parent < 0 {
		return false
	}
	*t = r.arena[t.parent]
	return true
}

// advance feeds symbol s to thread t and appends the threads that
// consumed it to out.
func (r *runner) advance(t thread, s sym, out []thread) []thread {
	p := r.p
	for {
		n := &p.nodes[t.f.node]
		switch n.kind {
		case kFail:
			return out

		case kLit:
			pos := t.f.a
			if int(pos) < len(n.lit) {
				if n.lit[pos] != s {
					return out
				}
				t.f.a++
				return append(out, t)
			}
			if !r.pop(&t) {
				return out
			}

		case kSeq:
			// Skip the kids that would end at once without taking s; a
			// kid that can end and can take s decides between the two
			// itself.
			i := int(t.f.a)
			for i < len(n.kids) && !p.firstHas(n.kids[i], s) {
				if !p.nullable[n.kids[i]] {
					return out
				}
				i++
			}
			if i >= len(n.kids) {
				if !r.pop(&t) {
					return out
				}
				continue
			}
			k := n.kids[i]
			if !r.feasible(k, t.f.depth) {
				return out
			}
			if i == len(n.kids)-1 {
				// The last kid replaces the sequence.
				t.f = r.enter(k, t.f.depth)
			} else {
				f := t.f
				f.a = uint32(i + 1)
				t = r.push(t, f, k)
			}

		case kAlt:
			for _, k := range n.kids {
				if !p.canStart(k, s) || !r.feasible(k, t.f.depth) {
					continue
				}
				u := t
				u.f = r.enter(k, t.f.depth)
				out = r.advance(u, s, out)
			}
			return out

		case kRepeat:
			cnt := t.f.a
			body := n.kids[0]
			more := cnt < n.hi && p.canStart(body, s) && r.feasible(body, t.f.depth)
			if cnt >= n.lo {
				if !more {
					if !r.pop(&t) {
						return out
					}
					continue
				}
				// Both ending here and another round are possible.
				u := t
				if r.pop(&u) {
					out = r.advance(u, s, out)
				}
			}
			if !more {
				return out
			}
			f := t.f
			f.a = cnt + 1
			t = r.push(t, f, body)

		case kText:
			if s >= symSpecial0 {
				if !r.pop(&t) {
					return out
				}
				continue
			}
			t.f.a = 1
			return append(out, t)

		case kDFA:
			d := p.dfas[n.aux]
			q := d.Start
			if t.f.a > 0 {
				q = int32(t.f.a - 1)
			}
			if q < 0 {
				return out
			}
			nx := int32(-1)
			if s < symSpecial0 {
				nx = d.Next(q, byte(s))
			}
			if d.Accept[q] {
				if nx < 0 {
					if !r.pop(&t) {
						return out
					}
					continue
				}
				// The lexeme may end here or go on.
				u := t
				if r.pop(&u) {
					out = r.advance(u, s, out)
				}
			}
			if nx < 0 {
				return out
			}
			t.f.a = uint32(nx + 1)
			return append(out, t)

		case kString:
			sp := &p.strs[n.aux]
			st, ok, done := stepString(sp, t.f, s)
			if done {
				if !r.pop(&t) {
					return out
				}
				continue
			}
			if !ok {
				return out
			}
			t.f = st
			return append(out, t)

		case kNum:
			sp := &p.nums[n.aux]
			st, ok, done := stepNumber(sp, t.f, s)
			if done {
				if !r.pop(&t) {
					return out
				}
				continue
			}
			if !ok {
				return out
			}
			t.f = st
			return append(out, t)

		case kObject, kArray:
			var how int
			if n.kind == kObject {
				out, t, how = r.object(t, s, out)
			} else {
				out, t, how = r.array(t, s, out)
			}
			switch how {
			case stepDone:
				return out
			case stepPop:
				if !r.pop(&t) {
					return out
				}
			}

		default:
			return out
		}
	}
}

// What object and array steps tell advance to do next.
const (
	stepDone = iota // the step is over: out holds what consumed s
	stepPop         // the frame is complete: pop it and feed s below
	stepGo          // go on with the returned thread (a child was entered)
)

// firstHas reports whether s is among the first symbols of n.
func (p *program) firstHas(n int32, s sym) bool {
	k := int(s)
	if s == symOther {
		k = int(symSpecial0) + len(p.specials)
	}
	return p.first[int(n)*p.fwords+k>>6]&(1<<(k&63)) != 0
}

// canEnd reports whether thread t may end here: every frame of its stack
// may.
func (r *runner) canEnd(t thread) bool {
	for {
		if !r.frameCanEnd(t.f) {
			return false
		}
		if t.parent < 0 {
			return true
		}
		t = r.arena[t.parent]
	}
}

func (r *runner) frameCanEnd(f frame) bool {
	p := r.p
	n := &p.nodes[f.node]
	switch n.kind {
	case kLit:
		return int(f.a) == len(n.lit)
	case kSeq:
		return p.seqNull[f.node][min(int(f.a), len(n.kids))]
	case kAlt:
		return p.nullable[f.node]
	case kRepeat:
		return f.a >= n.lo
	case kText:
		return true
	case kDFA:
		d := p.dfas[n.aux]
		q := d.Start
		if f.a > 0 {
			q = int32(f.a - 1)
		}
		return d.Accept[q]
	case kString:
		return stringCanEnd(&p.strs[n.aux], f)
	case kNum:
		return numberCanEnd(&p.nums[n.aux], f)
	case kObject, kArray:
		return f.a&0xff == phDone
	}
	return false
}
