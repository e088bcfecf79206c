package grammar

import (
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/k3go/k3/grammar/internal/automaton"
)

// ErrUnsupported is wrapped by a *SchemaError for a keyword the package
// cannot enforce, in a strict schema.
var ErrUnsupported = automaton.ErrUnsupported

// ErrInvalidSchema is wrapped by a *SchemaError for a schema that is not
// valid JSON Schema (a keyword with a value of the wrong kind, a $ref
// that leads nowhere) or has no valid instance.
var ErrInvalidSchema = errors.New("invalid schema")

// SchemaError reports a schema the package refuses. A server turns it
// into a 400 that names the problem.
type SchemaError struct {
	// Pointer is the JSON pointer of the keyword in the schema document,
	// for example "/properties/tags/uniqueItems" ("" for the whole
	// document).
	Pointer string
	// Keyword is the keyword, for example "uniqueItems" ("" when the
	// problem is not one keyword's).
	Keyword string
	// Err is ErrUnsupported or ErrInvalidSchema.
	Err error
	// Msg says what is wrong.
	Msg string
}

func (e *SchemaError) Error() string {
	where := e.Pointer
	if where == "" {
		where = "/"
	}
	if e.Keyword != "" {
		return fmt.Sprintf("grammar: schema keyword %q at %s: %v: %s", e.Keyword, where, e.Err, e.Msg)
	}
	return fmt.Sprintf("grammar: schema at %s: %v: %s", where, e.Err, e.Msg)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Schema is a parsed JSON Schema, resolved and checked: the source of the
// grammars of its values.
//
// What is enforced (draft 2020-12 keywords):
//   - type, also as a list of types; without type, the types whose
//     keywords appear (or any JSON value when none does);
//   - enum, const;
//   - object: properties, required, additionalProperties (false, true or
//     a schema). Declared properties come in their declared order, each
//     at most once (required ones always); other keys, when allowed, come
//     after them;
//   - array: prefixItems, items, minItems, maxItems;
//   - string: minLength, maxLength (in code points), pattern (Go
//     regexp/syntax; a pattern matches anywhere unless anchored with ^
//     and $), format date-time, date, time, uuid and email;
//   - integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum,
//     multipleOf; number: the same, in steps of 0.000001;
//   - anyOf; oneOf whose branches have distinct types; allOf of one
//     schema; $ref to the same document (#, #/$defs/..., any JSON
//     pointer), recursion included;
//   - annotations (title, description, default, examples, $comment, ...)
//     and keywords JSON Schema does not define are ignored.
//
// Any other validation keyword (not, if/then/else, patternProperties,
// uniqueItems, minProperties, ...) is refused in a strict schema; a
// lenient one is generated as if the keyword were absent (except that
// patternProperties and propertyNames keep other keys out), and
// [Schema.Ignored] lists it.
//
// The generated values are a subset of the valid ones: declared
// properties in their declared order; integers of at most 18 digits;
// bounded numbers (with minimum, maximum or multipleOf) without exponent,
// with at most 12 integer and 6 fraction digits; free numbers with at
// most 16 integer and 16 fraction digits and a 2-digit exponent; no
// \u escape in strings with a pattern or format, and never one for a
// surrogate; formats in their plainest form (T and Z upper-case, a
// fraction of seconds of at most 9 digits, no leap second, e-mail
// addresses of dot-separated words and a dotted domain, at most 64
// characters); enum values of objects and arrays as compact JSON (or
// Python's layout); other keys (additionalProperties) after the declared
// ones (two of them may be equal: a validator keeps the last). Without
// type, only the types whose keywords appear are generated.
type Schema struct {
	doc *schemaDoc
	n   *snode
}

type schemaDoc struct {
	root    *jv
	opts    Options
	byPtr   map[string]*snode
	ignored []string
	err     *SchemaError
}

type skind uint8

const (
	skPending skind = iota // being parsed (a reference back to an ancestor)
	skAny
	skNone
	skUnion
	skRef
	skEnum
	skObject
	skArray
	skString
	skNumber
	skBool
	skNull
)

// snode is a schema, or one typed branch of one.
type snode struct {
	kind skind
	ptr  string
	// inferred: the schema has no type keyword, and its types were
	// inferred from its keywords. Its values are generated in those
	// types; a validator accepts any other type too.
	inferred bool
	alts     []*snode
	target   *snode
	vals     []*jv
	obj      *objIR
	arr      *arrIR
	str      *strIR
	num      *numIR
}

type objIR struct {
	props []propIR
	addl  *snode // nil: no other keys
}

type propIR struct {
	name     string
	s        *snode
	required bool
}

type arrIR struct {
	prefix   []*snode
	items    *snode // nil: none past the prefix
	min, max uint32
}

type strIR struct {
	min, max uint32
	dfa      *automaton.DFA // nil: any content
}

type numIR struct {
	integer        bool
	lo, hi         *big.Rat // nil: none
	loExcl, hiExcl bool
	mult           *big.Rat
}

// ParseSchema parses a JSON Schema document. opts.Lenient makes it
// strict: false; the other options do not matter here.
func ParseSchema(raw []byte, opts Options) (*Schema, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, &SchemaError{Err: ErrInvalidSchema, Msg: "not JSON: " + err.Error()}
	}
	d := &schemaDoc{root: v, opts: opts, byPtr: map[string]*snode{}}
	n := d.node("", v)
	if d.err == nil {
		d.checkRefCycles()
	}
	if d.err != nil {
		return nil, d.err
	}
	return &Schema{doc: d, n: n}, nil
}

// Ignored lists the keywords a lenient schema has that are not enforced,
// as "pointer: keyword: why".
func (s *Schema) Ignored() []string { return slices.Clone(s.doc.ignored) }

// JSON returns the expression of the schema's valid values as JSON laid
// out in style st.
func (s *Schema) JSON(st Style) Expr {
	return Expr{&expr{kind: eSchema, schema: s, style: st}}
}

// RawString returns the expression of the schema's string values written
// raw: their characters as they are, without quotes or escapes. It
// matches nothing if the schema has no string values.
func (s *Schema) RawString() Expr {
	return Expr{&expr{kind: eRawString, schema: s}}
}

func (d *schemaDoc) fail(ptr, kw string, err error, format string, args ...any) {
	if d.err == nil {
		d.err = &SchemaError{Pointer: ptr, Keyword: kw, Err: err, Msg: fmt.Sprintf(format, args...)}
	}
}

// unsupported refuses a keyword in a strict schema, or notes it in a
// lenient one.
func (d *schemaDoc) unsupported(ptr, kw, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if d.opts.Lenient {
		d.ignored = append(d.ignored, fmt.Sprintf("%s: %s: %s", pointerOf(ptr, kw), kw, msg))
		return
	}
	d.fail(pointerOf(ptr, kw), kw, ErrUnsupported, "%s", msg)
}

func (d *schemaDoc) invalid(ptr, kw, format string, args ...any) {
	d.fail(pointerOf(ptr, kw), kw, ErrInvalidSchema, format, args...)
}

func pointerOf(ptr, kw string) string {
	if kw == "" {
		return ptr
	}
	return ptr + "/" + escapePointer(kw)
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

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
func (d *schemaDoc) node(ptr string, v *jv) *snode {
	if n, ok := d.byPtr[ptr]; ok {
		return n
	}
	n := &snode{ptr: ptr, kind: skPending}
	d.byPtr[ptr] = n
	d.parse(n, v)
	return n
}

func (d *schemaDoc) child(ptr string, kws ...string) (string, *jv) {
	v := d.lookup(ptr)
	for _, k := range kws {
		ptr += "/" + escapePointer(k)
		if v == nil {
			break
		}
		switch v.kind {
		case 'o':
			v = v.get(k)
		case 'a':
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(v.vals) {
				v = nil
			} else {
				v = v.vals[i]
			}
		default:
			v = nil
		}
	}
	return ptr, v
}

// lookup resolves a JSON pointer in the document.
func (d *schemaDoc) lookup(ptr string) *jv {
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
		case v.kind == 'o':
			v = v.get(seg)
		case v.kind == 'a':
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v.vals) {
				return nil
			}
			v = v.vals[i]
		default:
			return nil
		}
	}
	return v
}

// parse fills n from the schema value v at n.ptr.
func (d *schemaDoc) parse(n *snode, v *jv) {
	ptr := n.ptr
	switch v.kind {
	case 'b':
		n.kind = skNone
		if v.str == "true" {
			n.kind = skAny
		}
		return
	case 'o':
	default:
		d.invalid(ptr, "", "a schema must be an object or a boolean, not a JSON %s", v.jsonType())
		n.kind = skNone
		return
	}
	var validation []string // validation keywords present, besides the combinators
	for _, k := range v.keys {
		switch {
		case annotations[k]:
			if k == "$id" && ptr != "" {
				d.unsupported(ptr, k, "a nested $id (it changes how references resolve)")
			}
		case objectKeywords[k], arrayKeywords[k], stringKeywords[k], numberKeywords[k], k == "type", k == "enum", k == "const":
			validation = append(validation, k)
		case otherKeywords[k]:
		case refused[k] != "":
			if k == "uniqueItems" && v.get(k).kind == 'b' && v.get(k).str == "false" {
				continue
			}
			d.unsupported(ptr, k, "%s cannot be enforced", refused[k])
		}
	}
	if r := v.get("$ref"); r != nil {
		if len(validation) > 0 {
			d.unsupported(ptr, validation[0], "$ref with other validation keywords beside it")
		}
		n.kind = skRef
		n.target = d.ref(ptr, r)
		return
	}
	if a := v.get("allOf"); a != nil {
		if a.kind != 'a' || len(a.vals) == 0 {
			d.invalid(ptr, "allOf", "must be a non-empty array of schemas")
			n.kind = skNone
			return
		}
		if len(a.vals) == 1 && len(validation) == 0 && v.get("anyOf") == nil && v.get("oneOf") == nil {
			p, sub := d.child(ptr, "allOf", "0")
			n.kind = skRef
			n.target = d.node(p, sub)
			return
		}
		d.unsupported(ptr, "allOf", "allOf of more than one schema, or beside other keywords")
	}
	for _, comb := range []string{"anyOf", "oneOf"} {
		a := v.get(comb)
		if a == nil {
			continue
		}
		if a.kind != 'a' || len(a.vals) == 0 {
			d.invalid(ptr, comb, "must be a non-empty array of schemas")
			n.kind = skNone
			return
		}
		if len(validation) > 0 {
			d.unsupported(ptr, validation[0], "%s with other validation keywords beside it", comb)
		}
		if comb == "anyOf" && v.get("oneOf") != nil {
			d.unsupported(ptr, "oneOf", "oneOf beside anyOf")
		}
		n.kind = skUnion
		for i := range a.vals {
			p, sub := d.child(ptr, comb, strconv.Itoa(i))
			n.alts = append(n.alts, d.node(p, sub))
		}
		if comb == "oneOf" && !disjointTypes(n.alts) {
			d.unsupported(ptr, "oneOf", "oneOf of branches that can have the same type (only one may match); use anyOf")
		}
		return
	}
	types := d.types(ptr, v)
	var branches []*snode
	for _, t := range types {
		if b := d.branch(ptr, v, t); b != nil {
			branches = append(branches, b)
		}
	}
	constraint := &snode{kind: skUnion, ptr: ptr, alts: branches}
	if len(branches) == 1 {
		constraint = branches[0]
	}
	enum, hasEnum := d.enumValues(ptr, v)
	if hasEnum {
		n.kind = skEnum
		for _, e := range enum {
			if d.accepts(constraint, e) {
				n.vals = append(n.vals, e)
			}
		}
		return
	}
	if len(types) == len(allTypes) && len(validation) == 0 {
		n.kind = skAny
		return
	}
	*n = *constraint
	n.ptr = ptr
	n.inferred = v.get("type") == nil
}

// ref resolves a $ref.
func (d *schemaDoc) ref(ptr string, r *jv) *snode {
	if r.kind != 's' {
		d.invalid(ptr, "$ref", "must be a string")
		return &snode{kind: skNone}
	}
	frag, ok := strings.CutPrefix(r.str, "#")
	if !ok {
		d.unsupported(ptr, "$ref", "reference %q outside the document", r.str)
		return &snode{kind: skNone}
	}
	p, err := url.PathUnescape(frag)
	if err != nil {
		d.invalid(ptr, "$ref", "bad reference %q", r.str)
		return &snode{kind: skNone}
	}
	if p != "" && !strings.HasPrefix(p, "/") {
		d.unsupported(ptr, "$ref", "reference to an anchor (%q)", r.str)
		return &snode{kind: skNone}
	}
	target := d.lookup(p)
	if target == nil {
		d.invalid(ptr, "$ref", "reference %q leads nowhere in the document", r.str)
		return &snode{kind: skNone}
	}
	return d.node(p, target)
}

// checkRefCycles refuses references that lead back to themselves without
// anything in between.
func (d *schemaDoc) checkRefCycles() {
	for _, n := range d.byPtr {
		seen := map[*snode]bool{}
		for m := n; m.kind == skRef; m = m.target {
			if seen[m] {
				d.invalid(n.ptr, "$ref", "references go round in a circle")
				return
			}
			seen[m] = true
		}
	}
}

// types returns the types a schema object allows: its type keyword, else
// those whose keywords appear, else all.
func (d *schemaDoc) types(ptr string, v *jv) []string {
	t := v.get("type")
	if t == nil {
		var ts []string
		has := func(kws map[string]bool) bool {
			for _, k := range v.keys {
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
	var names []*jv
	switch t.kind {
	case 's':
		names = []*jv{t}
	case 'a':
		names = t.vals
	default:
		d.invalid(ptr, "type", "must be a string or an array of strings")
		return nil
	}
	var ts []string
	for _, x := range names {
		if x.kind != 's' || !slices.Contains(allTypes, x.str) {
			d.invalid(ptr, "type", "unknown type %s", x.format(Style{}))
			return nil
		}
		if !slices.Contains(ts, x.str) {
			ts = append(ts, x.str)
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
func (d *schemaDoc) enumValues(ptr string, v *jv) ([]*jv, bool) {
	c, e := v.get("const"), v.get("enum")
	switch {
	case c != nil && e != nil:
		var out []*jv
		if e.kind == 'a' {
			for _, x := range e.vals {
				if x.equal(c) {
					out = append(out, c)
					break
				}
			}
		}
		return out, true
	case c != nil:
		return []*jv{c}, true
	case e != nil:
		if e.kind != 'a' {
			d.invalid(ptr, "enum", "must be an array")
			return nil, true
		}
		var out []*jv
	next:
		for _, x := range e.vals {
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
func (d *schemaDoc) branch(ptr string, v *jv, t string) *snode {
	b := &snode{ptr: ptr}
	switch t {
	case "object":
		b.kind = skObject
		b.obj = d.object(ptr, v)
	case "array":
		b.kind = skArray
		b.arr = d.array(ptr, v)
	case "string":
		b.kind = skString
		b.str = d.string(ptr, v)
	case "integer", "number":
		b.kind = skNumber
		b.num = d.number(ptr, v, t == "integer")
	case "boolean":
		b.kind = skBool
	case "null":
		b.kind = skNull
	}
	return b
}

func (d *schemaDoc) object(ptr string, v *jv) *objIR {
	o := &objIR{addl: &snode{kind: skAny}}
	if p := v.get("properties"); p != nil {
		if p.kind != 'o' {
			d.invalid(ptr, "properties", "must be an object of schemas")
		} else {
			for i, name := range p.keys {
				cp, _ := d.child(ptr, "properties", name)
				o.props = append(o.props, propIR{name: name, s: d.node(cp, p.vals[i])})
			}
		}
	}
	if a := v.get("additionalProperties"); a != nil {
		cp, _ := d.child(ptr, "additionalProperties")
		switch a.kind {
		case 'b':
			if a.str == "false" {
				o.addl = nil
			}
		case 'o':
			o.addl = d.node(cp, a)
		default:
			d.invalid(ptr, "additionalProperties", "must be a boolean or a schema")
		}
	}
	if v.get("patternProperties") != nil || v.get("propertyNames") != nil {
		// Lenient: other keys could break these; keep them out.
		o.addl = nil
	}
	if r := v.get("required"); r != nil {
		if r.kind != 'a' {
			d.invalid(ptr, "required", "must be an array of strings")
			return o
		}
		for _, x := range r.vals {
			if x.kind != 's' {
				d.invalid(ptr, "required", "must be an array of strings")
				return o
			}
			i := slices.IndexFunc(o.props, func(p propIR) bool { return p.name == x.str })
			if i < 0 {
				// A required key with no declared schema takes the
				// schema of other keys (none: no valid instance).
				s := o.addl
				if s == nil {
					s = &snode{kind: skNone, ptr: ptr}
				}
				o.props = append(o.props, propIR{name: x.str, s: s})
				i = len(o.props) - 1
			}
			o.props[i].required = true
		}
	}
	return o
}

func (d *schemaDoc) array(ptr string, v *jv) *arrIR {
	a := &arrIR{items: &snode{kind: skAny}, max: unbounded}
	if p := v.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			d.invalid(ptr, "prefixItems", "must be an array of schemas")
		} else {
			for i, x := range p.vals {
				cp, _ := d.child(ptr, "prefixItems", strconv.Itoa(i))
				a.prefix = append(a.prefix, d.node(cp, x))
			}
		}
	}
	if it := v.get("items"); it != nil {
		cp, _ := d.child(ptr, "items")
		switch it.kind {
		case 'b':
			if it.str == "false" {
				a.items = nil
			}
		case 'o':
			a.items = d.node(cp, it)
		case 'a':
			d.unsupported(ptr, "items", "items as an array (the tuple form of older drafts; use prefixItems)")
			if v.get("prefixItems") == nil {
				for i, x := range it.vals {
					p, _ := d.child(ptr, "items", strconv.Itoa(i))
					a.prefix = append(a.prefix, d.node(p, x))
				}
			}
		default:
			d.invalid(ptr, "items", "must be a schema")
		}
	}
	a.min = d.count(ptr, v, "minItems", 0)
	a.max = d.count(ptr, v, "maxItems", unbounded)
	return a
}

// count reads a non-negative integer keyword.
func (d *schemaDoc) count(ptr string, v *jv, kw string, def uint32) uint32 {
	x := v.get(kw)
	if x == nil {
		return def
	}
	r := (*big.Rat)(nil)
	if x.kind == 'n' {
		r = x.rat()
	}
	if r == nil || !r.IsInt() || r.Sign() < 0 {
		d.invalid(ptr, kw, "must be a non-negative integer")
		return def
	}
	if !r.Num().IsInt64() || r.Num().Int64() >= int64(unbounded) {
		return unbounded - 1
	}
	return uint32(r.Num().Int64())
}

func (d *schemaDoc) string(ptr string, v *jv) *strIR {
	s := &strIR{min: d.count(ptr, v, "minLength", 0), max: d.count(ptr, v, "maxLength", unbounded)}
	var dfas []*automaton.DFA
	if p := v.get("pattern"); p != nil {
		if p.kind != 's' {
			d.invalid(ptr, "pattern", "must be a string")
		} else if x, lo, hi, err := automaton.Pattern(p.str); err != nil {
			d.unsupported(ptr, "pattern", "%v", strings.TrimPrefix(err.Error(), "grammar: "))
		} else {
			dfas = append(dfas, x)
			s.min, s.max = max(s.min, lo), min(s.max, hi)
		}
	}
	if f := v.get("format"); f != nil {
		if f.kind != 's' {
			d.invalid(ptr, "format", "must be a string")
		} else if x, maxLen, err := automaton.Format(f.str); err != nil {
			d.unsupported(ptr, "format", "%v", err)
		} else {
			dfas = append(dfas, x)
			s.max = min(s.max, maxLen)
		}
	}
	for _, x := range dfas {
		if s.dfa == nil {
			s.dfa = x
			continue
		}
		y, err := automaton.Product(s.dfa, x, false)
		if err != nil {
			d.unsupported(ptr, "pattern", "pattern and format together: %v", err)
			break
		}
		s.dfa = y
	}
	return s
}

func (d *schemaDoc) number(ptr string, v *jv, integer bool) *numIR {
	n := &numIR{integer: integer}
	num := func(kw string) *big.Rat {
		x := v.get(kw)
		if x == nil {
			return nil
		}
		if x.kind != 'n' {
			if x.kind == 'b' && (kw == "exclusiveMinimum" || kw == "exclusiveMaximum") {
				return nil // draft 4's boolean form, read below
			}
			d.invalid(ptr, kw, "must be a number")
			return nil
		}
		return x.rat()
	}
	n.lo, n.hi = num("minimum"), num("maximum")
	if r := num("exclusiveMinimum"); r != nil && (n.lo == nil || r.Cmp(n.lo) >= 0) {
		n.lo, n.loExcl = r, true
	}
	if r := num("exclusiveMaximum"); r != nil && (n.hi == nil || r.Cmp(n.hi) <= 0) {
		n.hi, n.hiExcl = r, true
	}
	if x := v.get("exclusiveMinimum"); x != nil && x.kind == 'b' && x.str == "true" {
		n.loExcl = n.lo != nil
	}
	if x := v.get("exclusiveMaximum"); x != nil && x.kind == 'b' && x.str == "true" {
		n.hiExcl = n.hi != nil
	}
	if m := num("multipleOf"); m != nil {
		if m.Sign() <= 0 {
			d.invalid(ptr, "multipleOf", "must be greater than 0")
		} else {
			n.mult = m
		}
	}
	if !integer && n.mult != nil {
		if _, ok := unitsOf(n.mult); !ok {
			d.unsupported(ptr, "multipleOf", "multipleOf finer than 0.000001 on a number")
			n.mult = nil
		}
	}
	return n
}

// unitsOf returns r in millionths, if it is a whole number of them.
func unitsOf(r *big.Rat) (*big.Int, bool) {
	x := new(big.Rat).Mul(r, big.NewRat(1_000_000, 1))
	return x.Num(), x.IsInt()
}

// disjointTypes reports whether no two schemas can have a value of the
// same type (so anyOf and oneOf agree).
func disjointTypes(alts []*snode) bool {
	seen := map[string]bool{}
	for _, a := range alts {
		ts := typesOf(a, map[*snode]bool{}, true)
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
func typesOf(n *snode, seen map[*snode]bool, valid bool) []string {
	if seen[n] {
		return nil
	}
	seen[n] = true
	if valid && n.inferred {
		return slices.Clone(allTypes)
	}
	var ts []string
	add := func(t string) {
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	switch n.kind {
	case skAny:
		return slices.Clone(allTypes)
	case skRef:
		return typesOf(n.target, seen, valid)
	case skUnion:
		for _, a := range n.alts {
			for _, t := range typesOf(a, seen, valid) {
				add(t)
			}
		}
	case skEnum:
		for _, v := range n.vals {
			t := v.jsonType()
			if t == "integer" {
				t = "number"
			}
			add(t)
		}
	case skObject:
		add("object")
	case skArray:
		add("array")
	case skString:
		add("string")
	case skNumber:
		if n.num.integer {
			add("integer")
		} else {
			add("number")
		}
	case skBool:
		add("boolean")
	case skNull:
		add("null")
	}
	return ts
}

// accepts reports whether value v is valid under n (as a validator
// would, for the keywords the package enforces). It filters enum values
// by the keywords beside them.
func (d *schemaDoc) accepts(n *snode, v *jv) bool {
	switch n.kind {
	case skAny:
		return true
	case skNone:
		return false
	case skRef:
		return d.accepts(n.target, v)
	case skUnion:
		for _, a := range n.alts {
			if d.accepts(a, v) {
				return true
			}
		}
		return false
	case skEnum:
		for _, x := range n.vals {
			if x.equal(v) {
				return true
			}
		}
		return false
	case skObject:
		if v.kind != 'o' {
			return false
		}
		for _, p := range n.obj.props {
			x := v.get(p.name)
			if x == nil {
				if p.required {
					return false
				}
				continue
			}
			if !d.accepts(p.s, x) {
				return false
			}
		}
		for i, k := range v.keys {
			if slices.ContainsFunc(n.obj.props, func(p propIR) bool { return p.name == k }) {
				continue
			}
			if n.obj.addl == nil || !d.accepts(n.obj.addl, v.vals[i]) {
				return false
			}
		}
		return true
	case skArray:
		a := n.arr
		if v.kind != 'a' || uint32(len(v.vals)) < a.min || uint32(len(v.vals)) > a.max {
			return false
		}
		for i, x := range v.vals {
			s := a.items
			if i < len(a.prefix) {
				s = a.prefix[i]
			}
			if s == nil || !d.accepts(s, x) {
				return false
			}
		}
		return true
	case skString:
		if v.kind != 's' {
			return false
		}
		c := uint32(utf8.RuneCountInString(v.str))
		return c >= n.str.min && c <= n.str.max && (n.str.dfa == nil || n.str.dfa.Matches(v.str))
	case skNumber:
		if v.kind != 'n' {
			return false
		}
		r := v.rat()
		if r == nil || (n.num.integer && !r.IsInt()) {
			return false
		}
		if lo := n.num.lo; lo != nil && (r.Cmp(lo) < 0 || (n.num.loExcl && r.Cmp(lo) == 0)) {
			return false
		}
		if hi := n.num.hi; hi != nil && (r.Cmp(hi) > 0 || (n.num.hiExcl && r.Cmp(hi) == 0)) {
			return false
		}
		if m := n.num.mult; m != nil && !new(big.Rat).Quo(r, m).IsInt() {
			return false
		}
		return true
	case skBool:
		return v.kind == 'b'
	case skNull:
		return v.kind == 'z'
	}
	return false
}

// Types returns the JSON types the schema's values can have, among
// "object", "array", "string", "integer", "number", "boolean" and "null"
// ("number" covers the integers of enum and const).
func (s *Schema) Types() []string {
	ts := typesOf(s.n, map[*snode]bool{}, false)
	slices.SortFunc(ts, func(a, b string) int { return slices.Index(allTypes, a) - slices.Index(allTypes, b) })
	return ts
}

// OfType returns the part of the schema whose values have type t ("number"
// includes the integer part), or nil if there is none.
func (s *Schema) OfType(t string) *Schema {
	var leaves []*snode
	s.doc.leaves(s.n, map[*snode]bool{}, func(l *snode) {
		switch l.kind {
		case skAny:
			if slices.Contains(allTypes, t) {
				leaves = append(leaves, s.doc.branch(l.ptr, &jv{kind: 'o'}, t))
			}
		case skEnum:
			var vals []*jv
			for _, v := range l.vals {
				vt := v.jsonType()
				if vt == t || (t == "number" && vt == "integer") {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				leaves = append(leaves, &snode{kind: skEnum, ptr: l.ptr, vals: vals})
			}
		default:
			ts := typesOf(l, map[*snode]bool{}, false)
			if len(ts) == 1 && (ts[0] == t || (t == "number" && ts[0] == "integer")) {
				leaves = append(leaves, l)
			}
		}
	})
	switch len(leaves) {
	case 0:
		return nil
	case 1:
		return &Schema{doc: s.doc, n: leaves[0]}
	}
	return &Schema{doc: s.doc, n: &snode{kind: skUnion, ptr: s.n.ptr, alts: leaves}}
}

// leaves calls f with the typed branches, enums and any-schemas of n,
// through references and unions.
func (d *schemaDoc) leaves(n *snode, seen map[*snode]bool, f func(*snode)) {
	if seen[n] {
		return
	}
	seen[n] = true
	switch n.kind {
	case skRef:
		d.leaves(n.target, seen, f)
	case skUnion:
		for _, a := range n.alts {
			d.leaves(a, seen, f)
		}
	case skNone, skPending:
	default:
		f(n)
	}
}

// Property is a declared property of an object schema.
type Property struct {
	Name     string
	Required bool
	Schema   *Schema
}

// Properties returns the declared properties of an object schema, in
// their declared order, and the schema of other keys' values (nil when
// other keys are not allowed). ok is false when the schema is not exactly
// one object schema (a union, or not an object).
func (s *Schema) Properties() (props []Property, additional *Schema, ok bool) {
	var objs []*snode
	other := false
	s.doc.leaves(s.n, map[*snode]bool{}, func(l *snode) {
		if l.kind == skObject {
			objs = append(objs, l)
		} else {
			other = true
		}
	})
	if len(objs) != 1 || other {
		return nil, nil, false
	}
	o := objs[0].obj
	for _, p := range o.props {
		props = append(props, Property{Name: p.name, Required: p.required, Schema: &Schema{doc: s.doc, n: p.s}})
	}
	if o.addl != nil {
		additional = &Schema{doc: s.doc, n: o.addl}
	}
	return props, additional, true
}
