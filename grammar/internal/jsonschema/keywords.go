package jsonschema

import (
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/k3go/k3/grammar/internal/automaton"
)

func (d *Doc) object(ptr string, v *Value) *Object {
	o := &Object{Addl: &Node{Kind: KindAny}}
	if p := v.get("properties"); p != nil {
		if p.Kind != 'o' {
			d.invalid(ptr, "properties", "must be an object of schemas")
		} else {
			for i, name := range p.Keys {
				cp, _ := d.child(ptr, "properties", name)
				o.Props = append(o.Props, Prop{Name: name, Schema: d.node(cp, p.Vals[i])})
			}
		}
	}
	if a := v.get("additionalProperties"); a != nil {
		cp, _ := d.child(ptr, "additionalProperties")
		switch a.Kind {
		case 'b':
			if a.Str == "false" {
				o.Addl = nil
			}
		case 'o':
			o.Addl = d.node(cp, a)
		default:
			d.invalid(ptr, "additionalProperties", "must be a boolean or a schema")
		}
	}
	if v.get("patternProperties") != nil || v.get("propertyNames") != nil {
		// Lenient: other keys could break these; keep them out.
		o.Addl = nil
	}
	if r := v.get("required"); r != nil {
		if r.Kind != 'a' {
			d.invalid(ptr, "required", "must be an array of strings")
			return o
		}
		for _, x := range r.Vals {
			if x.Kind != 's' {
				d.invalid(ptr, "required", "must be an array of strings")
				return o
			}
			i := slices.IndexFunc(o.Props, func(p Prop) bool { return p.Name == x.Str })
			if i < 0 {
				// A required key with no declared schema takes the
				// schema of other keys (none: no valid instance).
				s := o.Addl
				if s == nil {
					s = &Node{Kind: KindNone, Ptr: ptr}
				}
				o.Props = append(o.Props, Prop{Name: x.Str, Schema: s})
				i = len(o.Props) - 1
			}
			o.Props[i].Required = true
		}
	}
	return o
}

func (d *Doc) array(ptr string, v *Value) *Array {
	a := &Array{Items: &Node{Kind: KindAny}, Max: automaton.Unbounded}
	if p := v.get("prefixItems"); p != nil {
		if p.Kind != 'a' {
			d.invalid(ptr, "prefixItems", "must be an array of schemas")
		} else {
			for i, x := range p.Vals {
				cp, _ := d.child(ptr, "prefixItems", strconv.Itoa(i))
				a.Prefix = append(a.Prefix, d.node(cp, x))
			}
		}
	}
	if it := v.get("items"); it != nil {
		cp, _ := d.child(ptr, "items")
		switch it.Kind {
		case 'b':
			if it.Str == "false" {
				a.Items = nil
			}
		case 'o':
			a.Items = d.node(cp, it)
		case 'a':
			d.unsupported(ptr, "items", "items as an array (the tuple form of older drafts; use prefixItems)")
			if v.get("prefixItems") == nil {
				for i, x := range it.Vals {
					p, _ := d.child(ptr, "items", strconv.Itoa(i))
					a.Prefix = append(a.Prefix, d.node(p, x))
				}
			}
		default:
			d.invalid(ptr, "items", "must be a schema")
		}
	}
	a.Min = d.count(ptr, v, "minItems", 0)
	a.Max = d.count(ptr, v, "maxItems", automaton.Unbounded)
	return a
}

// count reads a non-negative integer keyword.
func (d *Doc) count(ptr string, v *Value, kw string, def uint32) uint32 {
	x := v.get(kw)
	if x == nil {
		return def
	}
	r := (*big.Rat)(nil)
	if x.Kind == 'n' {
		r = x.rat()
	}
	if r == nil || !r.IsInt() || r.Sign() < 0 {
		d.invalid(ptr, kw, "must be a non-negative integer")
		return def
	}
	if !r.Num().IsInt64() || r.Num().Int64() >= int64(automaton.Unbounded) {
		return automaton.Unbounded - 1
	}
	return uint32(r.Num().Int64())
}

func (d *Doc) string(ptr string, v *Value) *String {
	s := &String{Min: d.count(ptr, v, "minLength", 0), Max: d.count(ptr, v, "maxLength", automaton.Unbounded)}
	var dfas []*automaton.DFA
	if p := v.get("pattern"); p != nil {
		if p.Kind != 's' {
			d.invalid(ptr, "pattern", "must be a string")
		} else if x, lo, hi, err := automaton.Pattern(p.Str); err != nil {
			d.unsupported(ptr, "pattern", "%v", strings.TrimPrefix(err.Error(), "grammar: "))
		} else {
			dfas = append(dfas, x)
			s.Min, s.Max = max(s.Min, lo), min(s.Max, hi)
		}
	}
	if f := v.get("format"); f != nil {
		if f.Kind != 's' {
			d.invalid(ptr, "format", "must be a string")
		} else if x, maxLen, err := automaton.Format(f.Str); err != nil {
			d.unsupported(ptr, "format", "%v", err)
		} else {
			dfas = append(dfas, x)
			s.Max = min(s.Max, maxLen)
		}
	}
	for _, x := range dfas {
		if s.DFA == nil {
			s.DFA = x
			continue
		}
		y, err := automaton.Product(s.DFA, x, false)
		if err != nil {
			d.unsupported(ptr, "pattern", "pattern and format together: %v", err)
			break
		}
		s.DFA = y
	}
	return s
}

func (d *Doc) number(ptr string, v *Value, integer bool) *Number {
	n := &Number{Integer: integer}
	num := func(kw string) *big.Rat {
		x := v.get(kw)
		if x == nil {
			return nil
		}
		if x.Kind != 'n' {
			if x.Kind == 'b' && (kw == "exclusiveMinimum" || kw == "exclusiveMaximum") {
				return nil // draft 4's boolean form, read below
			}
			d.invalid(ptr, kw, "must be a number")
			return nil
		}
		return x.rat()
	}
	n.Lo, n.Hi = num("minimum"), num("maximum")
	if r := num("exclusiveMinimum"); r != nil && (n.Lo == nil || r.Cmp(n.Lo) >= 0) {
		n.Lo, n.LoExcl = r, true
	}
	if r := num("exclusiveMaximum"); r != nil && (n.Hi == nil || r.Cmp(n.Hi) <= 0) {
		n.Hi, n.HiExcl = r, true
	}
	if x := v.get("exclusiveMinimum"); x != nil && x.Kind == 'b' && x.Str == "true" {
		n.LoExcl = n.Lo != nil
	}
	if x := v.get("exclusiveMaximum"); x != nil && x.Kind == 'b' && x.Str == "true" {
		n.HiExcl = n.Hi != nil
	}
	if m := num("multipleOf"); m != nil {
		if m.Sign() <= 0 {
			d.invalid(ptr, "multipleOf", "must be greater than 0")
		} else {
			n.Mult = m
		}
	}
	if !integer && n.Mult != nil {
		if _, ok := UnitsOf(n.Mult); !ok {
			d.unsupported(ptr, "multipleOf", "multipleOf finer than 0.000001 on a number")
			n.Mult = nil
		}
	}
	return n
}

// UnitsOf returns r in millionths, if it is a whole number of them.
func UnitsOf(r *big.Rat) (*big.Int, bool) {
	x := new(big.Rat).Mul(r, big.NewRat(1_000_000, 1))
	return x.Num(), x.IsInt()
}
