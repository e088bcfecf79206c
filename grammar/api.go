package grammar

import "errors"

// CompileJSONSchema compiles a JSON Schema into the grammar of its valid
// values, laid out in opts.Style (with the style's whitespace allowed
// before and after the value). A strict schema (opts.Lenient false) with
// a keyword the package cannot enforce, a schema that is not valid, and
// one with no valid value are refused with a *SchemaError.
func CompileJSONSchema(schema []byte, opts Options) (*Grammar, error) {
	s, err := ParseSchema(schema, opts)
	if err != nil {
		return nil, err
	}
	g, err := Compile(Seq(Whitespace(opts.Style), s.JSON(opts.Style), Whitespace(opts.Style)), opts)
	return g, schemaError(err)
}

// schemaError turns an error about a part of a schema that has no valid
// value into a *SchemaError.
func schemaError(err error) error {
	var nv *NoValueError
	if errors.As(err, &nv) && nv.IsSchema {
		return &SchemaError{Pointer: nv.Pointer, Err: ErrInvalidSchema, Msg: "no value is valid under this schema"}
	}
	return err
}

// JSONObject returns the grammar of any JSON object (OpenAI's
// response_format json_object), laid out in opts.Style and nested at
// most opts.MaxDepth deep.
func JSONObject(opts Options) *Grammar {
	s, err := ParseSchema([]byte(`{"type":"object"}`), Options{})
	if err != nil {
		panic(err) // a fixed, valid schema
	}
	g, err := Compile(Seq(Whitespace(opts.Style), s.JSON(opts.Style), Whitespace(opts.Style)), opts)
	if err != nil {
		panic(err)
	}
	return g
}

// CompileRegexp compiles a regular expression (Go's regexp/syntax, Perl
// flags) into the grammar of the texts it matches as a whole.
func CompileRegexp(expr string, opts Options) (*Grammar, error) {
	return Compile(Regexp(expr), opts)
}
