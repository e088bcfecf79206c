package grammar

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/k3go/k3/grammar/internal/automaton"
	"github.com/k3go/k3/grammar/internal/jsonschema"
	"github.com/k3go/k3/grammar/internal/lexer"
)

// lowerKey memoizes the nodes of a schema: one per layout (and per raw
// string mode), so recursion shares them.
type lowerKey struct {
	n     *jsonschema.Node
	style Style
	raw   bool
}

// lowerSchema returns the node of the values of n, as JSON in style st,
// or as raw strings.
func (l *lowerer) lowerSchema(n *jsonschema.Node, st Style, raw bool) (int32, error) {
	if raw {
		st = Style{}
	}
	for n.Kind == jsonschema.KindRef {
		n = n.Target
	}
	k := lowerKey{n, st, raw}
	if id, ok := l.smemo[k]; ok {
		return id, nil
	}
	p := l.p
	fail := func() int32 { return p.add(node{kind: kFail, debug: describeSchema(n)}) }
	switch n.Kind {
	case jsonschema.KindNone, jsonschema.KindPending:
		id := fail()
		l.smemo[k] = id
		return id, nil
	case jsonschema.KindAny:
		if raw {
			return l.stringNode(n, &jsonschema.String{Max: unbounded}, true, k)
		}
		id := l.anyValue(st)
		l.smemo[k] = id
		return id, nil
	case jsonschema.KindUnion:
		id := p.add(node{kind: kAlt, debug: describeSchema(n)})
		l.smemo[k] = id
		var kids []int32
		for _, a := range n.Alts {
			c, err := l.lowerSchema(a, st, raw)
			if err != nil {
				return 0, err
			}
			kids = append(kids, c)
		}
		p.nodes[id].kids = kids
		return id, nil
	case jsonschema.KindEnum:
		return l.enumNode(n, st, raw, k)
	case jsonschema.KindString:
		return l.stringNode(n, n.Str, raw, k)
	}
	if raw {
		id := fail()
		l.smemo[k] = id
		return id, nil
	}
	switch n.Kind {
	case jsonschema.KindObject:
		idx := int32(len(p.objs))
		p.objs = append(p.objs, objSpec{})
		id := p.add(node{kind: kObject, aux: idx, debug: describeSchema(n)})
		l.smemo[k] = id
		o := objSpec{addl: -1, addlKey: -1, style: st}
		var names []string
		for _, pr := range n.Obj.Props {
			v, err := l.lowerSchema(pr.Schema, st, false)
			if err != nil {
				return 0, err
			}
			o.props = append(o.props, objProp{name: pr.Name, key: jsonschema.QuoteJSON(pr.Name), value: v, required: pr.Required})
			names = append(names, pr.Name)
		}
		if n.Obj.Addl != nil {
			v, err := l.lowerSchema(n.Obj.Addl, st, false)
			if err != nil {
				return 0, err
			}
			o.addl = v
			keyDFA, err := automaton.OtherKeys(names)
			if err != nil {
				return 0, l.schemaErr(n, "properties", err)
			}
			o.addlKey = l.addString(lexer.String{DFA: keyDFA, Max: unbounded}, "a key")
		}
		p.objs[idx] = o
		return id, nil
	case jsonschema.KindArray:
		idx := int32(len(p.arrs))
		p.arrs = append(p.arrs, arrSpec{})
		id := p.add(node{kind: kArray, aux: idx, debug: describeSchema(n)})
		l.smemo[k] = id
		a := arrSpec{items: -1, min: n.Arr.Min, max: n.Arr.Max, style: st}
		for _, x := range n.Arr.Prefix {
			v, err := l.lowerSchema(x, st, false)
			if err != nil {
				return 0, err
			}
			a.prefix = append(a.prefix, v)
		}
		if n.Arr.Items != nil {
			v, err := l.lowerSchema(n.Arr.Items, st, false)
			if err != nil {
				return 0, err
			}
			a.items = v
		}
		p.arrs[idx] = a
		return id, nil
	case jsonschema.KindNumber:
		id, err := l.numberNode(n)
		if err != nil {
			return 0, err
		}
		l.smemo[k] = id
		return id, nil
	case jsonschema.KindBool:
		id := p.add(node{kind: kDFA, aux: l.addDFA(automaton.Bool()), debug: "a boolean"})
		l.smemo[k] = id
		return id, nil
	case jsonschema.KindNull:
		id := p.add(node{kind: kLit, lit: []sym{'n', 'u', 'l', 'l'}, debug: "null"})
		l.smemo[k] = id
		return id, nil
	}
	return 0, fmt.Errorf("%w: schema kind %d", ErrGrammar, n.Kind)
}

func (l *lowerer) schemaErr(n *jsonschema.Node, kw string, err error) error {
	return &SchemaError{Pointer: jsonschema.PointerOf(n.Ptr, kw), Keyword: kw, Err: ErrUnsupported, Msg: strings.TrimPrefix(err.Error(), "grammar: ")}
}

// describeSchema is the debug text of a schema's node: it names the
// schema's JSON pointer, which errors report.
func describeSchema(n *jsonschema.Node) string { return schemaTag + n.Ptr }

// schemaTag starts the debug text of a node that comes from a schema.
const schemaTag = "schema:"

func (l *lowerer) addDFA(d *automaton.DFA) int32 {
	l.p.dfas = append(l.p.dfas, d)
	return int32(len(l.p.dfas) - 1)
}

func (l *lowerer) addString(s lexer.String, debug string) int32 {
	l.p.strs = append(l.p.strs, s)
	return l.p.add(node{kind: kString, aux: int32(len(l.p.strs) - 1), debug: debug})
}

// stringNode lowers a string schema: its length table is computed here,
// where the bounds and the content automaton meet.
func (l *lowerer) stringNode(n *jsonschema.Node, s *jsonschema.String, raw bool, k lowerKey) (int32, error) {
	spec := lexer.String{Raw: raw, DFA: s.DFA, Min: s.Min, Max: s.Max}
	if spec.DFA != nil && (spec.Min > 0 || spec.Max != unbounded) {
		top := int(spec.Max)
		if spec.Max == unbounded {
			top = int(spec.Min)
		}
		ls, err := automaton.NewLens(spec.DFA, top, spec.Max == unbounded)
		if err != nil {
			return 0, l.schemaErr(n, "maxLength", err)
		}
		spec.Lens = ls
	}
	var id int32
	if spec.Feasible() {
		id = l.addString(spec, describeSchema(n))
	} else {
		id = l.p.add(node{kind: kFail, debug: describeSchema(n)})
	}
	l.smemo[k] = id
	return id, nil
}

// enumNode lowers literal values: strings as strings whose content is one
// of the literals (so any spelling of their escapes is fine), the others
// as their JSON text.
func (l *lowerer) enumNode(n *jsonschema.Node, st Style, raw bool, k lowerKey) (int32, error) {
	var strs, others []string
	for _, v := range n.Vals {
		if v.Kind == 's' {
			strs = append(strs, v.Str)
		} else if !raw {
			others = append(others, v.Format(st.Python))
		}
	}
	var kids []int32
	if len(strs) > 0 {
		d, err := automaton.Literals(strs)
		if err != nil {
			return 0, l.schemaErr(n, "enum", err)
		}
		kids = append(kids, l.addString(lexer.String{Raw: raw, DFA: d, Max: unbounded}, describeSchema(n)))
	}
	if len(others) > 0 {
		d, err := automaton.Literals(others)
		if err != nil {
			return 0, l.schemaErr(n, "enum", err)
		}
		kids = append(kids, l.p.add(node{kind: kDFA, aux: l.addDFA(d), debug: describeSchema(n)}))
	}
	var id int32
	switch len(kids) {
	case 0:
		id = l.p.add(node{kind: kFail, debug: describeSchema(n)})
	case 1:
		id = kids[0]
	default:
		id = l.p.add(node{kind: kAlt, kids: kids, debug: describeSchema(n)})
	}
	l.smemo[k] = id
	return id, nil
}

// numberNode lowers a number: a number with bounds or multipleOf (and any
// integer) is checked digit by digit; a free number is a lexeme.
func (l *lowerer) numberNode(n *jsonschema.Node) (int32, error) {
	ni := n.Num
	if !ni.Integer && ni.Lo == nil && ni.Hi == nil && ni.Mult == nil {
		return l.p.add(node{kind: kDFA, aux: l.addDFA(automaton.Number()), debug: "a number"}), nil
	}
	spec := lexer.Number{Lo: -lexer.MaxUnits, Hi: lexer.MaxUnits, Mult: 1}
	scale := big.NewRat(1, 1)
	if !ni.Integer {
		spec.Frac = 6
		scale = big.NewRat(1_000_000, 1)
	}
	clamp := func(x *big.Int) int64 {
		switch {
		case x.Cmp(big.NewInt(lexer.MaxUnits)) > 0:
			return lexer.MaxUnits
		case x.Cmp(big.NewInt(-lexer.MaxUnits)) < 0:
			return -lexer.MaxUnits
		}
		return x.Int64()
	}
	if ni.Lo != nil {
		x := new(big.Rat).Mul(ni.Lo, scale)
		c := ceilRat(x)
		if ni.LoExcl && x.IsInt() {
			c.Add(c, big.NewInt(1))
		}
		spec.Lo = max(spec.Lo, clamp(c))
	}
	if ni.Hi != nil {
		x := new(big.Rat).Mul(ni.Hi, scale)
		f := floorRat(x)
		if ni.HiExcl && x.IsInt() {
			f.Sub(f, big.NewInt(1))
		}
		spec.Hi = min(spec.Hi, clamp(f))
	}
	if ni.Mult != nil {
		var m *big.Int
		if ni.Integer {
			// An integer is a multiple of p/q (lowest terms) exactly when
			// it is a multiple of p.
			m = new(big.Int).Set(ni.Mult.Num())
		} else {
			m, _ = jsonschema.UnitsOf(ni.Mult)
		}
		if m.Cmp(big.NewInt(lexer.MaxUnits)) > 0 {
			m = big.NewInt(lexer.MaxUnits + 1) // only 0 is a multiple in range
		}
		spec.Mult = m.Int64()
	}
	if !spec.Feasible() {
		return l.p.add(node{kind: kFail, debug: describeSchema(n)}), nil
	}
	l.p.nums = append(l.p.nums, spec)
	return l.p.add(node{kind: kNum, aux: int32(len(l.p.nums) - 1), debug: describeSchema(n)}), nil
}

// floorRat rounds down (DivMod is Euclidean, and a Rat's denominator is
// positive).
func floorRat(x *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(x.Num(), x.Denom(), new(big.Int))
	return q
}

func ceilRat(x *big.Rat) *big.Int {
	q := floorRat(x)
	if !x.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// anyValue returns the node of any JSON value in style st.
func (l *lowerer) anyValue(st Style) int32 {
	if id, ok := l.anyV[st]; ok {
		return id
	}
	p := l.p
	id := p.add(node{kind: kAlt, debug: "a JSON value"})
	l.anyV[st] = id
	str := l.anyString()
	objIdx := int32(len(p.objs))
	p.objs = append(p.objs, objSpec{props: nil, addl: id, addlKey: str, style: st})
	obj := p.add(node{kind: kObject, aux: objIdx, debug: "a JSON object"})
	arrIdx := int32(len(p.arrs))
	p.arrs = append(p.arrs, arrSpec{items: id, max: unbounded, style: st})
	arr := p.add(node{kind: kArray, aux: arrIdx, debug: "a JSON array"})
	num := p.add(node{kind: kDFA, aux: l.addDFA(automaton.Number()), debug: "a number"})
	b := p.add(node{kind: kDFA, aux: l.addDFA(automaton.Bool()), debug: "a boolean"})
	null := p.add(node{kind: kLit, lit: []sym{'n', 'u', 'l', 'l'}, debug: "null"})
	p.nodes[id].kids = []int32{obj, arr, str, num, b, null}
	return id
}

func (l *lowerer) anyString() int32 {
	if l.anyS < 0 {
		l.anyS = l.addString(lexer.String{Max: unbounded}, "a string")
	}
	return l.anyS
}
