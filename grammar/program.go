package grammar

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/k3go/k3/grammar/internal/automaton"
	"github.com/k3go/k3/grammar/internal/lexer"
)

// sym is one input symbol of a grammar: a byte (0..255) or a special
// token the grammar names (symSpecial0 + its index among the grammar's
// specials). symOther is any special token the grammar does not name.
type sym = uint16

const (
	symSpecial0 sym = 256
	symOther    sym = math.MaxUint16
)

// kind is the kind of a program node.
type kind uint8

const (
	kFail   kind = iota // matches nothing
	kLit                // a fixed sequence of symbols: lit; frame a = position
	kSeq                // kids in order; frame a = index of the next kid
	kAlt                // one of kids; never stays on a stack
	kRepeat             // kids[0] between lo and hi times; frame a = count
	kText               // any bytes; ends at a special symbol
	kDFA                // a byte DFA (dfas[aux]); frame a = state+1, 0 = start
	kString             // a JSON or raw string (strs[aux])
	kNum                // a JSON number with bounds (nums[aux])
	kObject             // a JSON object (objs[aux])
	kArray              // a JSON array (arrs[aux])
)

var kindNames = [...]string{"fail", "lit", "seq", "alt", "repeat", "text", "dfa", "string", "number", "object", "array"}

func (k kind) String() string { return kindNames[k] }

// node is one node of a program.
type node struct {
	kind  kind
	aux   int32 // index into the table of its kind
	lit   []sym
	kids  []int32
	lo    uint32 // kRepeat bounds; hi == unbounded means no bound
	hi    uint32
	debug string // what it came from, for errors and tests
}

const unbounded = math.MaxUint32

// program is a compiled grammar: nodes over symbols, with the analysis
// the matcher relies on.
type program struct {
	nodes    []node
	specials []string // names of the special symbols, in symbol order
	dfas     []*automaton.DFA
	strs     []lexer.String
	nums     []lexer.Number
	objs     []objSpec
	arrs     []arrSpec
	root     int32
	maxDepth int32

	nullable []bool
	minDepth []int32 // nesting of objects and arrays a node needs at least
	first    []uint64
	fwords   int      // words of first per node
	seqNull  [][]bool // kSeq: seqNull[i][k] = kids[k:] are all nullable
}

const inf32 = math.MaxInt32 / 4

// ErrGrammar is wrapped by the errors of compiling a grammar that cannot
// work: one with no valid output, left recursion, or a repeat of
// something that can be empty.
var ErrGrammar = errors.New("grammar: bad grammar")

func (p *program) add(n node) int32 {
	p.nodes = append(p.nodes, n)
	return int32(len(p.nodes) - 1)
}

func (p *program) isContainer(n int32) bool {
	k := p.nodes[n].kind
	return k == kObject || k == kArray
}

// specialSym returns the symbol of a special token name, adding it.
func (p *program) specialSym(name string) sym {
	for k, s := range p.specials {
		if s == name {
			return symSpecial0 + sym(k)
		}
	}
	p.specials = append(p.specials, name)
	return symSpecial0 + sym(len(p.specials)-1)
}

// finish runs the analysis: which nodes can produce a finite output, the
// depth each needs, which can be empty, and what each can start with. It
// prunes the alternatives that cannot produce anything and refuses
// grammars whose root cannot, or that recurse without consuming.
func (p *program) finish() error {
	if len(p.specials) > int(symOther-symSpecial0)-1 {
		return fmt.Errorf("%w: %d special tokens", ErrGrammar, len(p.specials))
	}
	prod := p.productive()
	if !prod[p.root] {
		return p.culprit(p.root, prod)
	}
	p.prune(prod)
	p.computeMinDepth()
	if p.minDepth[p.root] > p.maxDepth {
		return fmt.Errorf("%w: %s needs nesting %d, more than MaxDepth %d", ErrGrammar, p.describe(p.root), p.minDepth[p.root], p.maxDepth)
	}
	p.computeNullable()
	if err := p.checkLoops(); err != nil {
		return err
	}
	p.computeFirst()
	p.seqNull = make([][]bool, len(p.nodes))
	for i, n := range p.nodes {
		if n.kind != kSeq {
			continue
		}
		s := make([]bool, len(n.kids)+1)
		s[len(n.kids)] = true
		for k := len(n.kids) - 1; k >= 0; k-- {
			s[k] = s[k+1] && p.nullable[n.kids[k]]
		}
		p.seqNull[i] = s
	}
	for i := range p.objs {
		p.objs[i].finish(p)
	}
	return nil
}

func (p *program) describe(n int32) string {
	d := p.nodes[n].debug
	switch {
	case d == schemaTag:
		return "the schema"
	case strings.HasPrefix(d, schemaTag):
		return "the schema at " + d[len(schemaTag):]
	case d != "":
		return d
	}
	return "the grammar"
}

// NoValueError reports a grammar, or a part of it that it cannot do
// without, that has no valid output.
type NoValueError struct {
	// What names the part: "the schema at /properties/a", for one.
	What string
	// Pointer is the JSON pointer of the part when it comes from a
	// schema.
	Pointer  string
	IsSchema bool
}

func (e *NoValueError) Error() string {
	return fmt.Sprintf("%v: %s has no valid value", ErrGrammar, e.What)
}

func (e *NoValueError) Unwrap() error { return ErrGrammar }

// culprit follows, from an unproductive node, what it cannot do without
// to the deepest part that has no valid output.
func (p *program) culprit(n int32, prod []bool) error {
	seen := map[int32]bool{}
	for !seen[n] {
		seen[n] = true
		nd := &p.nodes[n]
		next := int32(-1)
		switch nd.kind {
		case kSeq:
			for _, k := range nd.kids {
				if !prod[k] {
					next = k
					break
				}
			}
		case kAlt:
			if len(nd.kids) == 1 {
				next = nd.kids[0]
			}
		case kRepeat:
			next = nd.kids[0]
		case kObject:
			for _, pr := range p.objs[nd.aux].props {
				if pr.required && !prod[pr.value] {
					next = pr.value
					break
				}
			}
		case kArray:
			a := &p.arrs[nd.aux]
			for k := uint32(0); k < a.min; k++ {
				if it := a.item(k); it >= 0 && !prod[it] {
					next = it
					break
				}
			}
		}
		if next < 0 || (p.nodes[next].debug == "" && nd.debug != "") {
			break
		}
		n = next
	}
	e := &NoValueError{What: p.describe(n)}
	if d := p.nodes[n].debug; strings.HasPrefix(d, schemaTag) {
		e.Pointer, e.IsSchema = d[len(schemaTag):], true
	}
	return e
}

// productive finds the nodes that can produce a finite output (least
// fixed point).
func (p *program) productive() []bool {
	prod := make([]bool, len(p.nodes))
	for changed := true; changed; {
		changed = false
		for i := range p.nodes {
			if prod[i] {
				continue
			}
			if p.nodeProductive(int32(i), prod) {
				prod[i] = true
				changed = true
			}
		}
	}
	return prod
}

func (p *program) nodeProductive(i int32, prod []bool) bool {
	n := &p.nodes[i]
	switch n.kind {
	case kFail:
		return false
	case kLit, kText, kString, kNum:
		return true // strings and numbers with no valid value are lowered to kFail
	case kDFA:
		return p.dfas[n.aux].Start >= 0
	case kSeq:
		for _, k := range n.kids {
			if !prod[k] {
				return false
			}
		}
		return true
	case kAlt:
		for _, k := range n.kids {
			if prod[k] {
				return true
			}
		}
		return false
	case kRepeat:
		return n.lo == 0 || prod[n.kids[0]]
	case kObject:
		o := &p.objs[n.aux]
		for _, pr := range o.props {
			if pr.required && !prod[pr.value] {
				return false
			}
		}
		return true
	case kArray:
		a := &p.arrs[n.aux]
		if a.min > a.max {
			return false // minItems above maxItems: no array is valid
		}
		for k := uint32(0); k < a.min; k++ {
			it := a.item(k)
			if it < 0 || !prod[it] {
				return false
			}
		}
		return true
	}
	return false
}

// prune drops what cannot produce an output: alternatives, optional
// properties, array items past the first that cannot.
func (p *program) prune(prod []bool) {
	for i := range p.nodes {
		n := &p.nodes[i]
		switch n.kind {
		case kAlt:
			kids := n.kids[:0:0]
			for _, k := range n.kids {
				if prod[k] {
					kids = append(kids, k)
				}
			}
			n.kids = kids
		case kRepeat:
			if !prod[n.kids[0]] {
				n.hi = 0
			}
		case kObject:
			o := &p.objs[n.aux]
			props := o.props[:0:0]
			for _, pr := range o.props {
				if prod[pr.value] {
					props = append(props, pr)
				}
			}
			o.props = props
			if o.addl >= 0 && !prod[o.addl] {
				o.addl = -1
			}
		case kArray:
			a := &p.arrs[n.aux]
			for k, it := range a.prefix {
				if !prod[it] {
					a.prefix = a.prefix[:k]
					a.items = -1
					break
				}
			}
			if a.items >= 0 && !prod[a.items] {
				a.items = -1
			}
			if a.items < 0 {
				a.max = min(a.max, uint32(len(a.prefix)))
			}
		}
	}
}

// computeMinDepth finds the nesting of objects and arrays each node needs
// at least (greatest fixed point from infinity, going down).
func (p *program) computeMinDepth() {
	md := make([]int32, len(p.nodes))
	for i := range md {
		md[i] = inf32
	}
	for changed := true; changed; {
		changed = false
		for i := range p.nodes {
			d := p.nodeMinDepth(int32(i), md)
			if d < md[i] {
				md[i] = d
				changed = true
			}
		}
	}
	p.minDepth = md
}

func (p *program) nodeMinDepth(i int32, md []int32) int32 {
	n := &p.nodes[i]
	switch n.kind {
	case kFail:
		return inf32
	case kLit, kText, kString, kNum, kDFA:
		return 0
	case kSeq:
		d := int32(0)
		for _, k := range n.kids {
			d = max(d, md[k])
		}
		return d
	case kAlt:
		d := int32(inf32)
		for _, k := range n.kids {
			d = min(d, md[k])
		}
		return d
	case kRepeat:
		if n.lo == 0 {
			return 0
		}
		return md[n.kids[0]]
	case kObject:
		d := int32(0)
		for _, pr := range p.objs[n.aux].props {
			if pr.required {
				d = max(d, md[pr.value])
			}
		}
		return min(d+1, inf32)
	case kArray:
		a := &p.arrs[n.aux]
		d := int32(0)
		for k := uint32(0); k < a.min; k++ {
			d = max(d, md[a.item(k)])
		}
		return min(d+1, inf32)
	}
	return inf32
}

// computeNullable finds the nodes that can end without consuming a
// symbol.
func (p *program) computeNullable() {
	nl := make([]bool, len(p.nodes))
	for changed := true; changed; {
		changed = false
		for i := range p.nodes {
			if nl[i] {
				continue
			}
			if p.nodeNullable(int32(i), nl) {
				nl[i] = true
				changed = true
			}
		}
	}
	p.nullable = nl
}

func (p *program) nodeNullable(i int32, nl []bool) bool {
	n := &p.nodes[i]
	switch n.kind {
	case kLit:
		return len(n.lit) == 0
	case kText:
		return true
	case kDFA:
		d := p.dfas[n.aux]
		return d.Start >= 0 && d.Accept[d.Start]
	case kString:
		return p.strs[n.aux].Nullable()
	case kSeq:
		for _, k := range n.kids {
			if !nl[k] {
				return false
			}
		}
		return true
	case kAlt:
		for _, k := range n.kids {
			if nl[k] {
				return true
			}
		}
		return false
	case kRepeat:
		return n.lo == 0 || n.hi == 0 || nl[n.kids[0]]
	}
	return false
}

// entered lists the nodes that n can enter before consuming a symbol.
func (p *program) entered(n int32, dst []int32) []int32 {
	nd := &p.nodes[n]
	switch nd.kind {
	case kSeq:
		for _, k := range nd.kids {
			dst = append(dst, k)
			if !p.nullable[k] {
				break
			}
		}
	case kAlt:
		dst = append(dst, nd.kids...)
	case kRepeat:
		if nd.hi > 0 {
			dst = append(dst, nd.kids[0])
		}
	}
	return dst
}

// checkLoops refuses repeats of something that can be empty, and
// recursion that can come back to a node without consuming a symbol:
// either would let the matcher loop forever.
func (p *program) checkLoops() error {
	for i, n := range p.nodes {
		if n.kind == kRepeat && n.hi > 1 && p.nullable[n.kids[0]] {
			return fmt.Errorf("%w: a repeat of something that can be empty (%s)", ErrGrammar, p.describe(int32(i)))
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(p.nodes))
	var buf []int32
	var visit func(n int32) error
	visit = func(n int32) error {
		color[n] = grey
		start := len(buf)
		buf = p.entered(n, buf)
		kids := append([]int32(nil), buf[start:]...)
		buf = buf[:start]
		for _, k := range kids {
			switch color[k] {
			case grey:
				return fmt.Errorf("%w: left recursion through %s", ErrGrammar, p.describe(k))
			case white:
				if err := visit(k); err != nil {
					return err
				}
			}
		}
		color[n] = black
		return nil
	}
	for i := range p.nodes {
		if color[i] == white {
			if err := visit(int32(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeFirst finds the symbols each node can consume first.
func (p *program) computeFirst() {
	nsym := int(symSpecial0) + len(p.specials) + 1 // the last bit is symOther
	p.fwords = (nsym + 63) / 64
	p.first = make([]uint64, len(p.nodes)*p.fwords)
	for i := range p.nodes {
		p.ownFirst(int32(i), p.firstOf(int32(i)))
	}
	for changed := true; changed; {
		changed = false
		for i := range p.nodes {
			dst := p.firstOf(int32(i))
			var buf [8]int32
			for _, k := range p.entered(int32(i), buf[:0]) {
				for w, x := range p.firstOf(k) {
					if dst[w]|x != dst[w] {
						dst[w] |= x
						changed = true
					}
				}
			}
		}
	}
}

func (p *program) firstOf(n int32) []uint64 {
	return p.first[int(n)*p.fwords : int(n+1)*p.fwords]
}

func setBit(s []uint64, k int) { s[k>>6] |= 1 << (k & 63) }

// ownFirst sets the first symbols of the nodes that consume by
// themselves (not through kids).
func (p *program) ownFirst(i int32, dst []uint64) {
	n := &p.nodes[i]
	switch n.kind {
	case kLit:
		if len(n.lit) > 0 {
			s := int(n.lit[0])
			if n.lit[0] == symOther {
				s = int(symSpecial0) + len(p.specials)
			}
			setBit(dst, s)
		}
	case kText:
		for b := range 256 {
			setBit(dst, b)
		}
	case kDFA:
		d := p.dfas[n.aux]
		for b := range 256 {
			if d.Start >= 0 && d.Next(d.Start, byte(b)) >= 0 {
				setBit(dst, b)
			}
		}
	case kString:
		p.strs[n.aux].First(dst)
	case kNum:
		setBit(dst, '-')
		for b := '0'; b <= '9'; b++ {
			setBit(dst, int(b))
		}
	case kObject:
		setBit(dst, '{')
	case kArray:
		setBit(dst, '[')
	}
}

// canStart reports whether entering n could consume s: s is among its
// first symbols, or n can be empty (and leave s to what follows).
func (p *program) canStart(n int32, s sym) bool {
	if p.nullable[n] {
		return true
	}
	k := int(s)
	if s == symOther {
		k = int(symSpecial0) + len(p.specials)
	}
	return p.first[int(n)*p.fwords+k>>6]&(1<<(k&63)) != 0
}
