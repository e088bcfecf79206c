package grammar

import (
	"errors"
	"fmt"
	"math"

	"github.com/k3go/k3/grammar/internal/automaton"
)

// Grammar is a compiled grammar over bytes and special tokens,
// independent of any vocabulary. It is immutable and safe for concurrent
// use; bind it to a vocabulary with [Grammar.Constraint].
type Grammar struct {
	p *program
}

// Options configure compiling.
type Options struct {
	// Style lays out JSON (the zero Style is compact JSON).
	Style Style
	// MaxDepth bounds the nesting of JSON objects and arrays (0 means
	// DefaultMaxDepth). It keeps recursive schemas and json_object
	// finite.
	MaxDepth int
	// Lenient is JSON Schema's strict: false. A strict schema (the
	// default) with a keyword the package cannot enforce is refused with
	// a *SchemaError; a lenient one is enforced as far as the package
	// can, and the keywords it leaves out are listed by
	// [Schema.Ignored].
	Lenient bool
}

// DefaultMaxDepth is the nesting of objects and arrays allowed when
// Options.MaxDepth is zero.
const DefaultMaxDepth = 32

func (o Options) maxDepth() int32 {
	if o.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return int32(min(o.MaxDepth, math.MaxInt32/8))
}

// Expr is an expression of a grammar, built with the functions of this
// package and compiled with [Compile]. The zero Expr matches only the
// empty sequence.
type Expr struct {
	e *expr
}

type exprKind uint8

const (
	eSeq exprKind = iota
	eBytes
	eSpecial
	eAlt
	eRepeat
	eText
	eDFA
	eSchema
	eRawString
	eErr
)

type expr struct {
	kind   exprKind
	text   string
	kids   []*expr
	lo, hi int
	dfa    *automaton.DFA
	schema *Schema
	style  Style
	err    error
}

func (e Expr) node() *expr {
	if e.e == nil {
		return &expr{kind: eSeq}
	}
	return e.e
}

// Bytes matches the bytes of s exactly.
func Bytes(s string) Expr { return Expr{&expr{kind: eBytes, text: s}} }

// Special matches the special token named name (as the vocabulary names
// it, for example "<|end_of_msg|>").
func Special(name string) Expr { return Expr{&expr{kind: eSpecial, text: name}} }

// Seq matches its expressions one after the other.
func Seq(es ...Expr) Expr {
	x := &expr{kind: eSeq}
	for _, e := range es {
		x.kids = append(x.kids, e.node())
	}
	return Expr{x}
}

// Alt matches any one of its expressions. With none it matches nothing.
func Alt(es ...Expr) Expr {
	x := &expr{kind: eAlt}
	for _, e := range es {
		x.kids = append(x.kids, e.node())
	}
	return Expr{x}
}

// Optional matches e or nothing.
func Optional(e Expr) Expr { return Repeat(e, 0, 1) }

// Repeat matches e at least min and at most max times; max < 0 means no
// bound. e must not match the empty sequence when max > 1.
func Repeat(e Expr, min, max int) Expr {
	return Expr{&expr{kind: eRepeat, kids: []*expr{e.node()}, lo: min, hi: max}}
}

// Text matches any bytes, up to the next special token: free text, such
// as a model's reasoning.
func Text() Expr { return Expr{&expr{kind: eText}} }

// Regexp matches text that the regular expression matches as a whole
// (as if it were ^(?:expr)$), in Go's regexp/syntax with Perl flags. Not
// supported: multi-line anchors and word boundaries; ^ and $ anchor at
// the start and end of the text. An expression that fails to parse makes
// Compile fail.
func Regexp(expr string) Expr {
	re, err := automaton.ParseRegexp(expr)
	if err != nil {
		return Expr{errExpr(err)}
	}
	d, err := automaton.Compile(re, false)
	if err != nil {
		return Expr{errExpr(err)}
	}
	return Expr{dfaExpr(d)}
}

// ErrRegexp is wrapped by the errors of regular expressions the package
// cannot turn into an automaton.
var ErrRegexp = errors.New("grammar: unsupported regular expression")

func errExpr(err error) *expr { return &expr{kind: eErr, err: err} }

func dfaExpr(d *automaton.DFA) *expr { return &expr{kind: eDFA, dfa: d} }

// Whitespace matches up to st.Whitespace bytes of whitespace, the
// whitespace allowed around a whole JSON value in style st (none in
// Python style).
func Whitespace(st Style) Expr { return Expr{wsExpr(st.slot(slotOuter))} }

func wsExpr(sl slot) *expr {
	if sl.max == 0 {
		return &expr{kind: eSeq}
	}
	chars := " \t\n\r"
	if sl.spaceOnly {
		chars = " "
	}
	var lits []string
	for _, c := range chars {
		lits = append(lits, string(c))
	}
	d, err := automaton.Literals(lits)
	if err != nil {
		return errExpr(err)
	}
	return &expr{kind: eRepeat, kids: []*expr{dfaExpr(d)}, lo: int(sl.min), hi: int(sl.max)}
}

// Compile compiles an expression into a grammar. It fails on an
// expression that cannot work: one with no valid output, left recursion,
// a repeat of something that can be empty, or a bad regular expression
// or schema inside it.
func Compile(e Expr, opts Options) (*Grammar, error) {
	l := newLowerer(opts)
	root, err := l.lower(e.node())
	if err != nil {
		return nil, exported(err)
	}
	l.p.root = root
	if err := l.p.finish(); err != nil {
		return nil, exported(err)
	}
	return &Grammar{p: l.p}, nil
}

// lowerer turns expressions and schemas into program nodes.
type lowerer struct {
	p     *program
	opts  Options
	memo  map[*expr]int32
	smemo map[lowerKey]int32
	anyV  map[Style]int32
	anyS  int32
}

func newLowerer(opts Options) *lowerer {
	return &lowerer{
		p:     &program{maxDepth: opts.maxDepth()},
		opts:  opts,
		memo:  map[*expr]int32{},
		smemo: map[lowerKey]int32{},
		anyV:  map[Style]int32{},
		anyS:  -1,
	}
}

func (l *lowerer) lower(e *expr) (int32, error) {
	if n, ok := l.memo[e]; ok {
		return n, nil
	}
	n, err := l.lowerNew(e)
	if err != nil {
		return 0, err
	}
	l.memo[e] = n
	return n, nil
}

func (l *lowerer) lowerNew(e *expr) (int32, error) {
	p := l.p
	switch e.kind {
	case eErr:
		return 0, e.err
	case eBytes:
		lit := make([]sym, len(e.text))
		for k := range len(e.text) {
			lit[k] = sym(e.text[k])
		}
		return p.add(node{kind: kLit, lit: lit}), nil
	case eSpecial:
		if e.text == "" {
			return 0, fmt.Errorf("%w: a special token without a name", ErrGrammar)
		}
		return p.add(node{kind: kLit, lit: []sym{p.specialSym(e.text)}}), nil
	case eSeq, eAlt:
		var kids []int32
		for _, k := range e.kids {
			// Flatten nested sequences.
			if e.kind == eSeq && k.kind == eSeq {
				n, err := l.lower(k)
				if err != nil {
					return 0, err
				}
				if p.nodes[n].kind == kSeq {
					kids = append(kids, p.nodes[n].kids...)
					continue
				}
				kids = append(kids, n)
				continue
			}
			n, err := l.lower(k)
			if err != nil {
				return 0, err
			}
			kids = append(kids, n)
		}
		if e.kind == eAlt {
			return p.add(node{kind: kAlt, kids: kids}), nil
		}
		switch len(kids) {
		case 0:
			return p.add(node{kind: kLit}), nil
		case 1:
			return kids[0], nil
		}
		return p.add(node{kind: kSeq, kids: kids}), nil
	case eRepeat:
		if e.lo < 0 || (e.hi >= 0 && e.hi < e.lo) {
			return 0, fmt.Errorf("%w: repeat between %d and %d times", ErrGrammar, e.lo, e.hi)
		}
		body, err := l.lower(e.kids[0])
		if err != nil {
			return 0, err
		}
		hi := uint32(unbounded)
		if e.hi >= 0 {
			hi = uint32(min(e.hi, math.MaxInt32))
		}
		return p.add(node{kind: kRepeat, kids: []int32{body}, lo: uint32(min(e.lo, math.MaxInt32)), hi: hi}), nil
	case eText:
		return p.add(node{kind: kText}), nil
	case eDFA:
		p.dfas = append(p.dfas, e.dfa)
		return p.add(node{kind: kDFA, aux: int32(len(p.dfas) - 1)}), nil
	case eSchema:
		return l.lowerSchema(e.schema.n, e.style, false)
	case eRawString:
		return l.lowerSchema(e.schema.n, Style{}, true)
	}
	return 0, fmt.Errorf("%w: unknown expression", ErrGrammar)
}
