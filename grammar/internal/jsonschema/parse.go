package jsonschema

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Keywords by what the package does with them.
var (
	annotations = set("$schema", "$id", "$comment", "$defs", "definitions", "title", "description",
		"default", "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding",
		"contentMediaType", "contentSchema", "$anchor", "$dynamicAnchor", "$vocabulary")
	objectKeywords = set("properties", "required", "additionalProperties")
	arrayKeywords  = set("items", "prefixItems", "minItems", "maxItems")
	stringKeywords = set("minLength", "maxLength", "pattern", "format")
	numberKeywords = set("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
	otherKeywords  = set("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref")
	refused        = map[string]string{
		"not":                   "negation",
		"if":                    "conditional schemas",
		"then":                  "conditional schemas",
		"else":                  "conditional schemas",
		"patternProperties":     "properties by pattern",
		"propertyNames":         "constraints on property names",
		"minProperties":         "a minimum number of properties",
		"maxProperties":         "a maximum number of properties",
		"dependentRequired":     "dependent properties",
		"dependentSchemas":      "dependent schemas",
		"dependencies":          "dependent properties",
		"unevaluatedProperties": "unevaluated properties",
		"unevaluatedItems":      "unevaluated items",
		"additionalItems":       "additional items (use prefixItems and items)",
		"contains":              "contains",
		"minContains":           "contains",
		"maxContains":           "contains",
		"uniqueItems":           "unique items",
		"$dynamicRef":           "dynamic references",
		"$recursiveRef":         "recursive references",
		"$recursiveAnchor":      "recursive references",
	}
	allTypes = []string{"object", "array", "string", "integer", "number", "boolean", "null"}
)

func set(ks ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range ks {
		m[k] = true
	}
	return m
}

// node returns the schema at ptr, whose value is v: parsed once, so that
// references to it (recursion included) share it.
func (d *Doc) node(ptr string, v *Value) *Node {
	if n, ok := d.byPtr[ptr]; ok {
		return n
	}
	n := &Node{Ptr: ptr, Kind: KindPending}
	d.byPtr[ptr] = n
	d.parse(n, v)
	return n
}

func (d *Doc) child(ptr string, kws ...string) (string, *Value) {
	v := d.lookup(ptr)
	for _, k := range kws {
		ptr += "/" + escapePointer(k)
		if v == nil {
			break
		}
		switch v.Kind {
		case 'o':
			v = v.get(k)
		case 'a':
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(v.Vals) {
				v = nil
			} else {
				v = v.Vals[i]
			}
		default:
			v = nil
		}
	}
	return ptr, v
}

// lookup resolves a JSON pointer in the document.
func (d *Doc) lookup(ptr string) *Value {
	v := d.root
	if ptr == "" {
		return v
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil
	}
	for _, seg := range strings.Split(ptr[1:], "/") {
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		switch {
		case v == nil:
			return nil
		case v.Kind == 'o':
			v = v.get(seg)
		case v.Kind == 'a':
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v.Vals) {
				return nil
			}
			v = v.Vals[i]
		default:
			return nil
		}
	}
	return v
}

// parse fills n from the schema value v at n.Ptr.
func (d *Doc) parse(n *Node, v *Value) {
	ptr := n.Ptr
	switch v.Kind {
	case 'b':
		n.Kind = KindNone
		if v.Str == "true" {
			n.Kind = KindAny
		}
		return
	case 'o':
	default:
		d.invalid(ptr, "", "a schema must be an object or a boolean, not a JSON %s", v.jsonType())
		n.Kind = KindNone
		return
	}
	var validation []string // validation keywords present, besides the combinators
	for _, k := range v.Keys {
		switch {
		case annotations[k]:
			if k == "$id" && ptr != "" {
				d.unsupported(ptr, k, "a nested $id (it changes how references resolve)")
			}
		case objectKeywords[k], arrayKeywords[k], stringKeywords[k], numberKeywords[k], k == "type", k == "enum", k == "const":
			validation = append(validation, k)
		case otherKeywords[k]:
		case refused[k] != "":
			if k == "uniqueItems" && v.get(k).Kind == 'b' && v.get(k).Str == "false" {
				continue
			}
			d.unsupported(ptr, k, "%s cannot be enforced", refused[k])
		}
	}
	if r := v.get("$ref"); r != nil {
		if len(validation) > 0 {
			d.unsupported(ptr, validation[0], "$ref with other validation keywords beside it")
		}
		n.Kind = KindRef
		n.Target = d.ref(ptr, r)
		return
	}
	if a := v.get("allOf"); a != nil {
		if a.Kind != 'a' || len(a.Vals) == 0 {
			d.invalid(ptr, "allOf", "must be a non-empty array of schemas")
			n.Kind = KindNone
			return
		}
		if len(a.Vals) == 1 && len(validation) == 0 && v.get("anyOf") == nil && v.get("oneOf") == nil {
			p, sub := d.child(ptr, "allOf", "0")
			n.Kind = KindRef
			n.Target = d.node(p, sub)
			return
		}
		d.unsupported(ptr, "allOf", "allOf of more than one schema, or beside other keywords")
	}
	for _, comb := range []string{"anyOf", "oneOf"} {
		a := v.get(comb)
		if a == nil {
			continue
		}
		if a.Kind != 'a' || len(a.Vals) == 0 {
			d.invalid(ptr, comb, "must be a non-empty array of schemas")
			n.Kind = KindNone
			return
		}
		if len(validation) > 0 {
			d.unsupported(ptr, validation[0], "%s with other validation keywords beside it", comb)
		}
		if comb == "anyOf" && v.get("oneOf") != nil {
			d.unsupported(ptr, "oneOf", "oneOf beside anyOf")
		}
		n.Kind = KindUnion
		for i := range a.Vals {
			p, sub := d.child(ptr, comb, strconv.Itoa(i))
			n.Alts = append(n.Alts, d.node(p, sub))
		}
		if comb == "oneOf" && !disjointTypes(n.Alts) {
			d.unsupported(ptr, "oneOf", "oneOf of branches that can have the same type (only one may match); use anyOf")
		}
		return
	}
	types := d.types(ptr, v)
	var branches []*Node
	for _, t := range types {
		if b := d.branch(ptr, v, t); b != nil {
			branches = append(branches, b)
		}
	}
	constraint := &Node{Kind: KindUnion, Ptr: ptr, Alts: branches}
	if len(branches) == 1 {
		constraint = branches[0]
	}
	enum, hasEnum := d.enumValues(ptr, v)
	if hasEnum {
		n.Kind = KindEnum
		for _, e := range enum {
			if d.accepts(constraint, e) {
				n.Vals = append(n.Vals, e)
			}
		}
		return
	}
	if len(types) == len(allTypes) && len(validation) == 0 {
		n.Kind = KindAny
		return
	}
	*n = *constraint
	n.Ptr = ptr
	n.Inferred = v.get("type") == nil
}

// ref resolves a $ref.
func (d *Doc) ref(ptr string, r *Value) *Node {
	if r.Kind != 's' {
		d.invalid(ptr, "$ref", "must be a string")
		return &Node{Kind: KindNone}
	}
	frag, ok := strings.CutPrefix(r.Str, "#")
	if !ok {
		d.unsupported(ptr, "$ref", "reference %q outside the document", r.Str)
		return &Node{Kind: KindNone}
	}
	p, err := url.PathUnescape(frag)
	if err != nil {
		d.invalid(ptr, "$ref", "bad reference %q", r.Str)
		return &Node{Kind: KindNone}
	}
	if p != "" && !strings.HasPrefix(p, "/") {
		d.unsupported(ptr, "$ref", "reference to an anchor (%q)", r.Str)
		return &Node{Kind: KindNone}
	}
	target := d.lookup(p)
	if target == nil {
		d.invalid(ptr, "$ref", "reference %q leads nowhere in the document", r.Str)
		return &Node{Kind: KindNone}
	}
	return d.node(p, target)
}

// checkRefCycles refuses references that lead back to themselves without
// anything in between.
func (d *Doc) checkRefCycles() {
	for _, n := range d.byPtr {
		seen := map[*Node]bool{}
		for m := n; m.Kind == KindRef; m = m.Target {
			if seen[m] {
				d.invalid(n.Ptr, "$ref", "references go round in a circle")
				return
			}
			seen[m] = true
		}
	}
}

// types returns the types a schema object allows: its type keyword, else
// those whose keywords appear, else all.
func (d *Doc) types(ptr string, v *Value) []string {
	t := v.get("type")
	if t == nil {
		var ts []string
		has := func(kws map[string]bool) bool {
			for _, k := range v.Keys {
				if kws[k] {
					return true
				}
			}
			return false
		}
		if has(objectKeywords) {
			ts = append(ts, "object")
		}
		if has(arrayKeywords) {
			ts = append(ts, "array")
		}
		if has(stringKeywords) {
			ts = append(ts, "string")
		}
		if has(numberKeywords) {
			ts = append(ts, "number")
		}
		if len(ts) == 0 {
			return allTypes
		}
		return ts
	}
	var names []*Value
	switch t.Kind {
	case 's':
		names = []*Value{t}
	case 'a':
		names = t.Vals
	default:
		d.invalid(ptr, "type", "must be a string or an array of strings")
		return nil
	}
	var ts []string
	for _, x := range names {
		if x.Kind != 's' || !slices.Contains(allTypes, x.Str) {
			d.invalid(ptr, "type", "unknown type %s", x.Format(false))
			return nil
		}
		if !slices.Contains(ts, x.Str) {
			ts = append(ts, x.Str)
		}
	}
	if len(ts) == 0 {
		d.invalid(ptr, "type", "an empty list of types")
	}
	// An integer is a number: with both, number alone covers it.
	if slices.Contains(ts, "number") && slices.Contains(ts, "integer") {
		ts = slices.DeleteFunc(ts, func(s string) bool { return s == "integer" })
	}
	return ts
}

// enumValues returns the values of enum or const.
func (d *Doc) enumValues(ptr string, v *Value) ([]*Value, bool) {
	c, e := v.get("const"), v.get("enum")
	switch {
	case c != nil && e != nil:
		var out []*Value
		if e.Kind == 'a' {
			for _, x := range e.Vals {
				if x.equal(c) {
					out = append(out, c)
					break
				}
			}
		}
		return out, true
	case c != nil:
		return []*Value{c}, true
	case e != nil:
		if e.Kind != 'a' {
			d.invalid(ptr, "enum", "must be an array")
			return nil, true
		}
		var out []*Value
	next:
		for _, x := range e.Vals {
			for _, y := range out {
				if x.equal(y) {
					continue next
				}
			}
			out = append(out, x)
		}
		return out, true
	}
	return nil, false
}

// branch builds the branch of type t of a schema object.
func (d *Doc) branch(ptr string, v *Value, t string) *Node {
	b := &Node{Ptr: ptr}
	switch t {
	case "object":
		b.Kind = KindObject
		b.Obj = d.object(ptr, v)
	case "array":
		b.Kind = KindArray
		b.Arr = d.array(ptr, v)
	case "string":
		b.Kind = KindString
		b.Str = d.string(ptr, v)
	case "integer", "number":
		b.Kind = KindNumber
		b.Num = d.number(ptr, v, t == "integer")
	case "boolean":
		b.Kind = KindBool
	case "null":
		b.Kind = KindNull
	}
	return b
}
