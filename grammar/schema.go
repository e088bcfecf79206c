package grammar

import (
	"errors"
	"fmt"

	"github.com/k3go/k3/grammar/internal/automaton"
	"github.com/k3go/k3/grammar/internal/jsonschema"
)

// ErrUnsupported is wrapped by a *SchemaError for a keyword the package
// cannot enforce, in a strict schema.
var ErrUnsupported = errors.New("not supported")

// ErrInvalidSchema is wrapped by a *SchemaError for a schema that is not
// valid JSON Schema (a keyword with a value of the wrong kind, a $ref
// that leads nowhere) or has no valid instance.
var ErrInvalidSchema = errors.New("invalid schema")

// exported maps the internal packages' sentinel errors onto this
// package's, so that callers test errors with the names they can see.
// The error's text is the internal error's (the sentinels' texts are the
// same); errors.Is finds both sentinels.
func exported(err error) error {
	if err == nil {
		return nil
	}
	var se *SchemaError
	if errors.As(err, &se) {
		se.Err = exportedSentinel(se.Err)
		return err
	}
	if pub := exportedSentinel(err); pub != err {
		return &exportedError{err: err, pub: pub}
	}
	return err
}

// exportedSentinel returns the exported sentinel that err wraps, or err.
func exportedSentinel(err error) error {
	for _, m := range [...][2]error{
		{automaton.ErrRegexp, ErrRegexp},
		{automaton.ErrUnsupported, ErrUnsupported},
		{jsonschema.ErrInvalidSchema, ErrInvalidSchema},
	} {
		if errors.Is(err, m[0]) {
			return m[1]
		}
	}
	return err
}

type exportedError struct{ err, pub error }

func (e *exportedError) Error() string   { return e.err.Error() }
func (e *exportedError) Unwrap() []error { return []error{e.pub, e.err} }

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
	doc *jsonschema.Doc
	n   *jsonschema.Node
}

// ParseSchema parses a JSON Schema document. opts.Lenient makes it
// strict: false; the other options do not matter here.
func ParseSchema(raw []byte, opts Options) (*Schema, error) {
	d, n, e := jsonschema.Parse(raw, opts.Lenient)
	if e != nil {
		return nil, &SchemaError{Pointer: e.Pointer, Keyword: e.Keyword, Err: exportedSentinel(e.Err), Msg: e.Msg}
	}
	return &Schema{doc: d, n: n}, nil
}

// Ignored lists the keywords a lenient schema has that are not enforced,
// as "pointer: keyword: why".
func (s *Schema) Ignored() []string { return s.doc.Ignored() }

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

// Types returns the JSON types the schema's values can have, among
// "object", "array", "string", "integer", "number", "boolean" and "null"
// ("number" covers the integers of enum and const).
func (s *Schema) Types() []string { return jsonschema.Types(s.n) }

// OfType returns the part of the schema whose values have type t ("number"
// includes the integer part), or nil if there is none.
func (s *Schema) OfType(t string) *Schema {
	n := s.doc.OfType(s.n, t)
	if n == nil {
		return nil
	}
	return &Schema{doc: s.doc, n: n}
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
	o, ok := s.doc.ObjectOf(s.n)
	if !ok {
		return nil, nil, false
	}
	for _, p := range o.Props {
		props = append(props, Property{Name: p.Name, Required: p.Required, Schema: &Schema{doc: s.doc, n: p.Schema}})
	}
	if o.Addl != nil {
		additional = &Schema{doc: s.doc, n: o.Addl}
	}
	return props, additional, true
}
