package grammar_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// FuzzSchema compiles arbitrary schemas: it must never panic or hang, and
// what compiles must generate values that the independent validator
// accepts.
func FuzzSchema(f *testing.F) {
	for _, sc := range schemaCases {
		f.Add(sc.schema, uint64(1))
	}
	for _, sc := range boundedSchemas {
		f.Add(sc.schema, uint64(2))
	}
	v := byteVocab(f)
	f.Fuzz(func(t *testing.T, schema string, seed uint64) {
		if len(schema) > 2000 {
			return
		}
		opts := grammar.Options{MaxDepth: 4, Style: grammar.Style{Whitespace: int(seed % 3)}}
		g, err := grammar.CompileJSONSchema([]byte(schema), opts)
		if err != nil {
			return
		}
		val := compileValidator(schema)
		if val == nil {
			return // a schema the validator refuses (other drafts' forms, say)
		}
		c := bind(t, g, v)
		rng := rand.New(rand.NewPCG(seed, 1))
		for range 3 {
			run := grammartest.Generate(t, c.NewMatcher(), v.MaskWords(), grammartest.Uniform(nil), rng, 300, nil)
			if !run.Finished {
				continue // unbounded schemas need not finish
			}
			text := make([]byte, len(run.IDs))
			for k, id := range run.IDs {
				text[k] = byte(id)
			}
			if err := val.Validate(text); err != nil {
				t.Fatalf("schema %s generated %q, which does not validate: %v", schema, text, err)
			}
		}
	})
}

func compileValidator(schema string) *grammartest.Validator {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if c.AddResource("schema.json", doc) != nil {
		return nil
	}
	if _, err := c.Compile("schema.json"); err != nil {
		return nil
	}
	var tb fakeTB
	return grammartest.NewValidator(&tb, schema)
}

// fakeTB lets NewValidator run outside a test's failure path: the schema
// is known to compile.
type fakeTB struct{ testing.TB }

func (fakeTB) Helper() {}

// FuzzMatcherBytes feeds arbitrary bytes to a grammar: the mask must say
// exactly which bytes Accept takes, and what the grammar takes whole must
// validate.
func FuzzMatcherBytes(f *testing.F) {
	const schema = `{"type":"object","properties":{"a":{"type":"integer","minimum":-3,"maximum":300},"b":{"type":"array","items":{"type":"string","maxLength":3,"pattern":"^[a-c]*$"}},"c":{"anyOf":[{"type":"number"},{"type":"null"},{"enum":["x","y"]}]}},"required":["a"],"additionalProperties":{"type":"boolean"}}`
	for _, s := range []string{`{"a":1}`, `{"a":-3,"b":["abc",""],"c":1.5e3,"z":true}`, `{"a":30`, `{"b":[]}`, "{\"a\":1,\"\xc3\xa9\":false}"} {
		f.Add([]byte(s))
	}
	v := byteVocab(f)
	g, err := grammar.CompileJSONSchema([]byte(schema), grammar.Options{Style: grammar.Style{Whitespace: 1}})
	if err != nil {
		f.Fatal(err)
	}
	c, err := g.Constraint(v)
	if err != nil {
		f.Fatal(err)
	}
	val := grammartest.NewValidator(f, schema)
	f.Fuzz(func(t *testing.T, in []byte) {
		m := c.NewMatcher()
		mask := make([]uint64, v.MaskWords())
		for k, b := range in {
			if err := m.FillMask(mask); err != nil {
				t.Fatal(err)
			}
			allowed := mask[b/64]>>(b%64)&1 != 0
			if err := m.Accept(int(b)); (err == nil) != allowed {
				t.Fatalf("byte %d (%q) of %q: mask says %v, Accept says %v", k, b, in, allowed, err)
			}
			if !allowed {
				return
			}
		}
		if m.CanEnd() {
			if !json.Valid(in) {
				t.Fatalf("%q taken whole but not JSON", in)
			}
			if err := val.Validate(in); err != nil {
				t.Fatalf("%q taken whole but does not validate: %v", in, err)
			}
		}
	})
}
