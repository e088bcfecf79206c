package automaton

import (
	"fmt"
	"math"
	"regexp/syntax"
	"sync"
)

// OtherKeys is the content of keys that are none of names.
func OtherKeys(names []string) (*DFA, error) {
	if len(names) == 0 {
		return nil, nil
	}
	anyText, err := Compile(mustParse(`(?s:.*)`), false)
	if err != nil {
		return nil, err
	}
	lits, err := Literals(names)
	if err != nil {
		return nil, err
	}
	return Product(anyText, lits, true)
}

func mustParse(expr string) *syntax.Regexp {
	re, err := ParseRegexp(expr)
	if err != nil {
		panic(err)
	}
	return re
}

// Unbounded is the length bound of a string without one.
const Unbounded = math.MaxUint32

// Shared automata of fixed lexemes, built once.
var (
	Number = onceDFA(`-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,2})?`)
	Bool   = onceDFA(`true|false`)
)

func onceDFA(expr string) func() *DFA {
	return sync.OnceValue(func() *DFA {
		d, err := Compile(mustParse(expr), false)
		if err != nil {
			panic(err)
		}
		d.Shared = true
		return d
	})
}

// Formats, as regular expressions of their plainest valid form.
const (
	reDate = `(?:[0-9]{4}-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])` +
		`|[0-9]{4}-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)` +
		`|[0-9]{4}-02-(?:0[1-9]|1[0-9]|2[0-8])` +
		`|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)`
	reTime  = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	reUUID  = `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`
	atext   = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
	label   = `[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?`
	reEmail = atext + `+(?:\.` + atext + `+)*@` + label + `(?:\.` + label + `)+`
)

// A format is an automaton and, when its definition limits the length of
// its parts, a maximum length short enough to keep every part within
// them (an e-mail address of at most 64 characters has a local part of
// at most 64 and labels of at most 63): counting in the automaton itself
// would multiply its states.
type format struct {
	dfa    func() *DFA
	maxLen uint32
}

var formats = map[string]format{
	"date":      {onceDFA(reDate), Unbounded},
	"time":      {onceDFA(reTime), Unbounded},
	"date-time": {onceDFA(reDate + `T` + reTime), Unbounded},
	"uuid":      {onceDFA(reUUID), Unbounded},
	"email":     {onceDFA(reEmail), 64},
}

// Format returns the automaton of a supported format and the longest
// value it generates.
func Format(name string) (*DFA, uint32, error) {
	f, ok := formats[name]
	if !ok {
		return nil, 0, fmt.Errorf("format %q cannot be enforced (supported: date-time, date, time, uuid, email)", name)
	}
	return f.dfa(), f.maxLen, nil
}

// Pattern compiles a JSON Schema pattern (a search, unless anchored).
// A pattern that is one character class repeated between lo and hi times
// and anchored at both ends (^[a-z0-9_]{3,20}$, say) becomes the class
// starred, with lo and hi as length bounds: counting in the automaton
// would multiply its states, and its token classes with them.
func Pattern(expr string) (*DFA, uint32, uint32, error) {
	if raw, err := syntax.Parse(expr, syntax.Perl); err == nil {
		if class, lo, hi, ok := countedClass(raw); ok {
			d, err := Compile(&syntax.Regexp{Op: syntax.OpStar, Sub: []*syntax.Regexp{class}}, false)
			return d, lo, hi, err
		}
	}
	re, err := ParseRegexp(expr)
	if err != nil {
		return nil, 0, 0, err
	}
	d, err := Compile(re, true)
	return d, 0, Unbounded, err
}

// countedClass recognizes ^C{lo,hi}$ for one character class C.
func countedClass(re *syntax.Regexp) (*syntax.Regexp, uint32, uint32, bool) {
	if re.Op != syntax.OpConcat || len(re.Sub) != 3 || re.Sub[0].Op != syntax.OpBeginText || re.Sub[2].Op != syntax.OpEndText {
		return nil, 0, 0, false
	}
	rep := re.Sub[1]
	for rep.Op == syntax.OpCapture {
		rep = rep.Sub[0]
	}
	var lo, hi int
	switch rep.Op {
	case syntax.OpRepeat:
		lo, hi = rep.Min, rep.Max
	case syntax.OpStar:
		lo, hi = 0, -1
	case syntax.OpPlus:
		lo, hi = 1, -1
	default:
		return nil, 0, 0, false
	}
	c := rep.Sub[0]
	switch {
	case c.Op == syntax.OpCharClass, c.Op == syntax.OpAnyChar, c.Op == syntax.OpAnyCharNotNL,
		c.Op == syntax.OpLiteral && len(c.Rune) == 1:
	default:
		return nil, 0, 0, false
	}
	h := uint32(Unbounded)
	if hi >= 0 {
		h = uint32(hi)
	}
	return c, uint32(lo), h, true
}
