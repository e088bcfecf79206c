package jsonschema

import (
	"math/big"
	"slices"
	"unicode/utf8"
)

// disjointTypes reports whether no two schemas can have a value of the
// same type (so anyOf and oneOf agree).
func disjointTypes(alts []*Node) bool {
	seen := map[string]bool{}
	for _, a := range alts {
		ts := typesOf(a, map[*Node]bool{}, true)
		for _, t := range ts {
			if t == "integer" {
				t = "number" // an integer is a number too
			}
			if seen[t] {
				return false
			}
		}
		for _, t := range ts {
			if t == "integer" {
				t = "number"
			}
			seen[t] = true
		}
	}
	return true
}

// typesOf lists the types a schema's generated values can have; with
// valid, the types of the values a validator accepts (any type for a
// schema whose types were inferred).
func typesOf(n *Node, seen map[*Node]bool, valid bool) []string {
	if seen[n] {
		return nil
	}
	seen[n] = true
	if valid && n.Inferred {
		return slices.Clone(allTypes)
	}
	var ts []string
	add := func(t string) {
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	switch n.Kind {
	case KindAny:
		return slices.Clone(allTypes)
	case KindRef:
		return typesOf(n.Target, seen, valid)
	case KindUnion:
		for _, a := range n.Alts {
			for _, t := range typesOf(a, seen, valid) {
				add(t)
			}
		}
	case KindEnum:
		for _, v := range n.Vals {
			t := v.jsonType()
			if t == "integer" {
				t = "number"
			}
			add(t)
		}
	case KindObject:
		add("object")
	case KindArray:
		add("array")
	case KindString:
		add("string")
	case KindNumber:
		if n.Num.Integer {
			add("integer")
		} else {
			add("number")
		}
	case KindBool:
		add("boolean")
	case KindNull:
		add("null")
	}
	return ts
}

// accepts reports whether value v is valid under n (as a validator
// would, for the keywords the package enforces). It filters enum values
// by the keywords beside them.
func (d *Doc) accepts(n *Node, v *Value) bool {
	switch n.Kind {
	case KindAny:
		return true
	case KindNone:
		return false
	case KindRef:
		return d.accepts(n.Target, v)
	case KindUnion:
		for _, a := range n.Alts {
			if d.accepts(a, v) {
				return true
			}
		}
		return false
	case KindEnum:
		for _, x := range n.Vals {
			if x.equal(v) {
				return true
			}
		}
		return false
	case KindObject:
		if v.Kind != 'o' {
			return false
		}
		for _, p := range n.Obj.Props {
			x := v.get(p.Name)
			if x == nil {
				if p.Required {
					return false
				}
				continue
			}
			if !d.accepts(p.Schema, x) {
				return false
			}
		}
		for i, k := range v.Keys {
			if slices.ContainsFunc(n.Obj.Props, func(p Prop) bool { return p.Name == k }) {
				continue
			}
			if n.Obj.Addl == nil || !d.accepts(n.Obj.Addl, v.Vals[i]) {
				return false
			}
		}
		return true
	case KindArray:
		a := n.Arr
		if v.Kind != 'a' || uint32(len(v.Vals)) < a.Min || uint32(len(v.Vals)) > a.Max {
			return false
		}
		for i, x := range v.Vals {
			s := a.Items
			if i < len(a.Prefix) {
				s = a.Prefix[i]
			}
			if s == nil || !d.accepts(s, x) {
				return false
			}
		}
		return true
	case KindString:
		if v.Kind != 's' {
			return false
		}
		c := uint32(utf8.RuneCountInString(v.Str))
		return c >= n.Str.Min && c <= n.Str.Max && (n.Str.DFA == nil || n.Str.DFA.Matches(v.Str))
	case KindNumber:
		if v.Kind != 'n' {
			return false
		}
		r := v.rat()
		if r == nil || (n.Num.Integer && !r.IsInt()) {
			return false
		}
		if lo := n.Num.Lo; lo != nil && (r.Cmp(lo) < 0 || (n.Num.LoExcl && r.Cmp(lo) == 0)) {
			return false
		}
		if hi := n.Num.Hi; hi != nil && (r.Cmp(hi) > 0 || (n.Num.HiExcl && r.Cmp(hi) == 0)) {
			return false
		}
		if m := n.Num.Mult; m != nil && !new(big.Rat).Quo(r, m).IsInt() {
			return false
		}
		return true
	case KindBool:
		return v.Kind == 'b'
	case KindNull:
		return v.Kind == 'z'
	}
	return false
}

// leaves calls f with the typed branches, enums and any-schemas of n,
// through references and unions.
func (d *Doc) leaves(n *Node, seen map[*Node]bool, f func(*Node)) {
	if seen[n] {
		return
	}
	seen[n] = true
	switch n.Kind {
	case KindRef:
		d.leaves(n.Target, seen, f)
	case KindUnion:
		for _, a := range n.Alts {
			d.leaves(a, seen, f)
		}
	case KindNone, KindPending:
	default:
		f(n)
	}
}

// Types returns the JSON types n's values can have, in a fixed order.
func Types(n *Node) []string {
	ts := typesOf(n, map[*Node]bool{}, false)
	slices.SortFunc(ts, func(a, b string) int { return slices.Index(allTypes, a) - slices.Index(allTypes, b) })
	return ts
}

// OfType returns the part of n whose values have type t ("number"
// includes the integer part), or nil if there is none.
func (d *Doc) OfType(n *Node, t string) *Node {
	var leaves []*Node
	d.leaves(n, map[*Node]bool{}, func(l *Node) {
		switch l.Kind {
		case KindAny:
			if slices.Contains(allTypes, t) {
				leaves = append(leaves, d.branch(l.Ptr, &Value{Kind: 'o'}, t))
			}
		case KindEnum:
			var vals []*Value
			for _, v := range l.Vals {
				vt := v.jsonType()
				if vt == t || (t == "number" && vt == "integer") {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				leaves = append(leaves, &Node{Kind: KindEnum, Ptr: l.Ptr, Vals: vals})
			}
		default:
			ts := typesOf(l, map[*Node]bool{}, false)
			if len(ts) == 1 && (ts[0] == t || (t == "number" && ts[0] == "integer")) {
				leaves = append(leaves, l)
			}
		}
	})
	switch len(leaves) {
	case 0:
		return nil
	case 1:
		return leaves[0]
	}
	return &Node{Kind: KindUnion, Ptr: n.Ptr, Alts: leaves}
}

// ObjectOf returns the object branch of n when n is exactly one object
// schema (not a union, not another type).
func (d *Doc) ObjectOf(n *Node) (*Object, bool) {
	var objs []*Node
	other := false
	d.leaves(n, map[*Node]bool{}, func(l *Node) {
		if l.Kind == KindObject {
			objs = append(objs, l)
		} else {
			other = true
		}
	})
	if len(objs) != 1 || other {
		return nil, false
	}
	return objs[0].Obj, true
}
