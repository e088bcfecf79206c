package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
)

// ConstraintFlags are the flags that constrain what k3 run and k3
// generate produce, token by token (package grammar):
//
//   - --json-schema FILE: the JSON values valid under a JSON Schema, strict
//     as the API's json_schema response format is by default (a keyword
//     that cannot be enforced is an error naming it and its JSON pointer);
//     --schema-lenient enforces it as far as possible, as "strict": false
//     does;
//   - --json-object: any JSON object, the API's json_object response
//     format (the commands' --json is their own machine-readable output,
//     unrelated);
//   - --regex PATTERN: the texts a regular expression (Go's regexp/syntax)
//     matches as a whole.
//
// Check reads and compiles them before any model is loaded, so a bad
// schema or pattern is a usage error at once.
type ConstraintFlags struct {
	SchemaFile string // --json-schema
	Lenient    bool   // --schema-lenient
	Object     bool   // --json-object
	Regex      string // --regex
	regexSet   bool

	schema  []byte           // the schema file's contents
	ignored []string         // what a lenient schema leaves unenforced
	g       *grammar.Grammar // the whole output's grammar, once checked
	content grammar.Expr     // --regex's expression (a chat's response)
}

// Register defines the flags on fs.
func (c *ConstraintFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.SchemaFile, "json-schema", "", "constrain the output to a JSON value valid under the JSON Schema in `file`; strict: a keyword that cannot be enforced is an error (see --schema-lenient)")
	InputFiles(fs, "json-schema")
	fs.BoolVar(&c.Lenient, "schema-lenient", false, "with --json-schema: enforce the schema as far as possible and leave out the keywords that cannot be enforced (the API's \"strict\": false)")
	fs.BoolVar(&c.Object, "json-object", false, "constrain the output to one JSON object (the API's response_format json_object; --json is unrelated: it prints the command's result as JSON)")
	fs.Func("regex", "constrain the output to text the regular expression `pattern` (Go's regexp/syntax) matches as a whole", func(s string) error {
		c.Regex, c.regexSet = s, true
		return nil
	})
}

// Set reports whether a constraint was given.
func (c *ConstraintFlags) Set() bool { return c.SchemaFile != "" || c.Object || c.regexSet }

// Check validates the flags: at most one constraint, --schema-lenient only
// with --json-schema, a schema file that is a schema the grammar can
// enforce (all of it unless lenient), a regular expression that compiles.
// Errors are usage errors; an unreadable file is an I/O error.
func (c *ConstraintFlags) Check() error {
	n := 0
	for _, set := range []bool{c.SchemaFile != "", c.Object, c.regexSet} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return Usagef("give one of --json-schema, --json-object and --regex")
	case c.Lenient && c.SchemaFile == "":
		return Usagef("--schema-lenient needs --json-schema")
	case c.regexSet && c.Regex == "":
		return Usagef("empty --regex")
	}
	var err error
	switch {
	case c.SchemaFile != "":
		if c.schema, err = os.ReadFile(c.SchemaFile); err != nil {
			return fmt.Errorf("--json-schema: %w", err)
		}
		opts := grammar.Options{Lenient: c.Lenient}
		s, err := grammar.ParseSchema(c.schema, opts)
		if err == nil {
			c.ignored = s.Ignored()
			c.g, err = grammar.CompileJSONSchema(c.schema, opts)
		}
		if err != nil {
			return c.schemaError(err)
		}
	case c.Object:
		c.g = grammar.JSONObject(grammar.Options{})
	case c.regexSet:
		c.content = grammar.Regexp(c.Regex)
		if c.g, err = grammar.Compile(c.content, grammar.Options{}); err != nil {
			return Usagef("--regex %q: %v", c.Regex, strings.TrimPrefix(err.Error(), "grammar: "))
		}
	}
	return nil
}

// schemaError is the usage error of a schema the grammar refuses.
func (c *ConstraintFlags) schemaError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "grammar: ")
	var se *grammar.SchemaError
	if errors.As(err, &se) && errors.Is(se.Err, grammar.ErrUnsupported) {
		msg += " (--schema-lenient enforces the schema's other keywords and leaves this one out)"
	}
	return Usagef("--json-schema %s: %s", c.SchemaFile, msg)
}

// Ignored lists the keywords of a --schema-lenient schema that are not
// enforced, as "pointer: keyword: why"; Check fills it.
func (c *ConstraintFlags) Ignored() []string { return c.ignored }

// ResponseFormat is the chat's response format of --json-schema or
// --json-object (the schema's name is the file's base name, its strict
// flag !--schema-lenient), nil for no constraint or --regex. Call it after
// Check.
func (c *ConstraintFlags) ResponseFormat() *chat.ResponseFormat {
	switch {
	case c.Object:
		return &chat.ResponseFormat{Type: "json_object"}
	case c.SchemaFile != "":
		name := strings.TrimSuffix(filepath.Base(c.SchemaFile), filepath.Ext(c.SchemaFile))
		js, err := json.Marshal(struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict bool            `json:"strict"`
		}{name, json.RawMessage(c.schema), !c.Lenient})
		if err != nil { // the schema was parsed as JSON by Check
			panic(err)
		}
		return &chat.ResponseFormat{Type: "json_schema", JSONSchema: js}
	}
	return nil
}

// Regexp reports whether the constraint is --regex, and its expression
// (the content of a chat's response, which a response format cannot
// express).
func (c *ConstraintFlags) Regexp() (grammar.Expr, bool) { return c.content, c.regexSet }

// Constraint binds the constraint on the whole output (a continuation's
// text, a generation's tokens) to m's vocabulary; nil when no flag was
// given. Call it after Check.
func (c *ConstraintFlags) Constraint(m *k3.Model) (grammar.Constraint, error) {
	if c.g == nil {
		return nil, nil
	}
	return Bind(m, c.g)
}

// Bind binds g to m's vocabulary: a model without a tokenizer cannot be
// constrained.
func Bind(m *k3.Model, g *grammar.Grammar) (grammar.Constraint, error) {
	v, err := m.GrammarVocab()
	if err != nil {
		return nil, fmt.Errorf("a constraint (--json-schema, --json-object, --regex) needs the model's tokenizer: %w", err)
	}
	gc, err := g.Constraint(v)
	if err != nil {
		return nil, fmt.Errorf("binding the constraint to the vocabulary: %w", err)
	}
	return gc, nil
}
