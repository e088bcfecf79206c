package grammar_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// byteVocab is a vocabulary of the 256 single bytes (token id = byte)
// and the given special tokens after them.
func byteVocab(tb testing.TB, specials ...string) *grammar.Vocab {
	tb.Helper()
	toks := make([][]byte, 256)
	for b := range toks {
		toks[b] = []byte{byte(b)}
	}
	var sp []grammar.SpecialToken
	for k, s := range specials {
		sp = append(sp, grammar.SpecialToken{ID: 256 + k, Name: s})
	}
	v, err := grammar.NewVocab(toks, sp)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// takes feeds text byte by byte (through a byte vocabulary) and reports
// whether the grammar takes it whole and may end after it; at is where
// it stopped.
func takes(tb testing.TB, c grammar.Constraint, text string) (ok bool, at int) {
	tb.Helper()
	m := c.NewMatcher()
	for i := 0; i < len(text); i++ {
		if err := m.Accept(int(text[i])); err != nil {
			if !errors.Is(err, grammar.ErrNotAllowed) {
				tb.Fatalf("Accept: %v", err)
			}
			return false, i
		}
	}
	return m.CanEnd(), len(text)
}

func bind(tb testing.TB, g *grammar.Grammar, v *grammar.Vocab) *grammar.GrammarConstraint {
	tb.Helper()
	c, err := g.Constraint(v)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

type schemaCase struct {
	name   string
	schema string
	opts   grammar.Options
	// accept: valid values the grammar generates (the validator must
	// agree they are valid).
	accept []string
	// reject: values the validator finds invalid, which the grammar must
	// refuse.
	reject []string
	// narrow: values the validator finds valid but the grammar does not
	// generate, by design (its documented subset).
	narrow []string
	// malformed: not JSON (invalid UTF-8, which Go's decoder, and so the
	// validator, would silently replace); the grammar must refuse them.
	malformed []string
}

var schemaCases = []schemaCase{
	{name: "string length", schema: `{"type":"string","minLength":2,"maxLength":3}`,
		accept: []string{`"ab"`, `"abc"`, `"é€"`, `"\n\u00e9"`, `"\\\""`, `"😀😀"`},
		reject: []string{`"a"`, `"abcd"`, `"é€😀x"`, `""`, `ab`, "\"a\tb\"", `12`}},
	{name: "string raw control and bad utf8", schema: `{"type":"string"}`,
		accept:    []string{`"a b"`, `"\u0001"`, `"\/"`},
		reject:    []string{"\"a\x01\"", `"\x"`, `"\u12"`, `"abc`},
		malformed: []string{"\"\xff\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xc0\x80\""},
		narrow:    []string{`"\ud83d\ude00"`}},
	{name: "pattern anchored", schema: `{"type":"string","pattern":"^[a-z]+$","maxLength":3}`,
		accept: []string{`"abc"`, `"a"`},
		reject: []string{`"ab1"`, `"abcd"`, `""`, `"A"`},
		narrow: []string{`"\u0061"`}},
	{name: "pattern search", schema: `{"type":"string","pattern":"ab"}`,
		accept: []string{`"xxabyy"`, `"ab"`, `"€ab€"`},
		reject: []string{`"a"`, `"ba"`, `""`}},
	{name: "pattern with escapes", schema: `{"type":"string","pattern":"^[a\"\\\\]{2}$"}`,
		accept: []string{`"a\""`, `"\\a"`},
		reject: []string{`"ab"`, `"aaa"`}},
	{name: "pattern and lengths", schema: `{"type":"string","pattern":"^(ab)+$","minLength":3,"maxLength":5}`,
		accept: []string{`"abab"`},
		reject: []string{`"ab"`, `"ababab"`, `"aba"`}},
	{name: "format date", schema: `{"type":"string","format":"date"}`,
		accept: []string{`"2024-02-29"`, `"2000-02-29"`, `"2023-12-31"`, `"1999-04-30"`},
		reject: []string{`"2023-02-29"`, `"1900-02-29"`, `"2023-13-01"`, `"2023-04-31"`, `"2023-1-01"`}},
	{name: "format date-time", schema: `{"type":"string","format":"date-time"}`,
		accept: []string{`"2024-01-31T23:59:59Z"`, `"2024-01-31T23:59:59.123+05:30"`, `"2024-01-31T00:00:00-23:59"`},
		reject: []string{`"2024-01-31T24:00:00Z"`, `"2024-01-31 23:59:59Z"`, `"2024-01-31T23:59:59"`},
		narrow: []string{`"2024-01-31t23:59:59z"`}},
	{name: "format time", schema: `{"type":"string","format":"time"}`,
		accept: []string{`"12:00:00Z"`, `"23:59:59.5-01:00"`},
		reject: []string{`"12:60:00Z"`, `"12:00Z"`}},
	{name: "format uuid", schema: `{"type":"string","format":"uuid"}`,
		accept: []string{`"123e4567-e89b-12d3-a456-426614174000"`, `"123E4567-E89B-12D3-A456-426614174000"`},
		reject: []string{`"123e4567-e89b-12d3-a456-42661417400"`, `"123e4567e89b12d3a456426614174000"`}},
	{name: "format email", schema: `{"type":"string","format":"email"}`,
		accept: []string{`"john.doe@example.com"`, `"a+b@x-y.co.uk"`},
		reject: []string{`"a@@b.com"`, `".a@b.com"`, `"a@-b.com"`, `"ab.com"`},
		narrow: []string{`"a@b"`}},
	{name: "integer range", schema: `{"type":"integer","minimum":-5,"maximum":12}`,
		accept: []string{`-5`, `0`, `12`, `-0`, `7`},
		reject: []string{`-6`, `13`, `120`, `01`, `-`, `1.5`},
		narrow: []string{`1.0`, `1e1`}},
	{name: "integer multipleOf", schema: `{"type":"integer","multipleOf":3,"minimum":10,"maximum":20}`,
		accept: []string{`12`, `15`, `18`},
		reject: []string{`10`, `21`, `9`, `3`}},
	{name: "integer exclusive", schema: `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10}`,
		accept: []string{`1`, `9`},
		reject: []string{`0`, `10`, `-1`}},
	{name: "integer negative range", schema: `{"type":"integer","minimum":-120,"maximum":-100}`,
		accept: []string{`-100`, `-120`, `-111`},
		reject: []string{`-99`, `-121`, `100`, `0`}},
	{name: "integer unbounded", schema: `{"type":"integer"}`,
		accept: []string{`123456789012345678`, `-999999999999999999`},
		narrow: []string{`1234567890123456789`}},
	{name: "integer fractional multipleOf", schema: `{"type":"integer","multipleOf":2.5}`,
		accept: []string{`5`, `10`, `-15`},
		reject: []string{`2`, `7`}},
	{name: "number", schema: `{"type":"number"}`,
		accept: []string{`1`, `-0.5`, `1.5e10`, `2E-3`, `0`},
		reject: []string{`.5`, `1.`, `+1`, `01`, `1e`, `--1`}},
	{name: "number range", schema: `{"type":"number","minimum":0.5,"maximum":2.25}`,
		accept: []string{`0.5`, `1`, `2.25`, `2.2`, `0.500001`},
		reject: []string{`0.49`, `2.26`, `2.251`, `3`, `-1`}},
	{name: "number multipleOf", schema: `{"type":"number","multipleOf":0.25}`,
		accept: []string{`0.75`, `2`, `-1.25`},
		reject: []string{`0.1`, `1.3`}},
	{name: "number exclusive", schema: `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1}`,
		accept: []string{`0.999999`, `0.5`, `0.000001`},
		reject: []string{`1`, `1.0`, `0`, `0.0`}},
	{name: "boolean and null", schema: `{"type":["boolean","null"]}`,
		accept: []string{`true`, `false`, `null`},
		reject: []string{`tru`, `nul`, `0`, `"true"`}},
	{name: "object required and order", schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":2},"c":{"type":"boolean"}},"required":["b"],"additionalProperties":false}`,
		accept: []string{`{"b":""}`, `{"a":1,"b":"x"}`, `{"b":"x","c":true}`, `{"a":1,"b":"x","c":false}`},
		reject: []string{`{}`, `{"a":1}`, `{"b":"xyz"}`, `{"b":"x","d":1}`, `{"b":"x",}`},
		narrow: []string{`{"b":"x","a":1}`, `{"b":"x","b":"y"}`}},
	{name: "object additional schema", schema: `{"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
		accept: []string{`{"a":1,"x":"y"}`, `{"x":"y","z":""}`, `{}`, `{"a":1}`},
		reject: []string{`{"x":1}`, `{"a":"s"}`},
		narrow: []string{`{"x":"y","a":1}`}},
	{name: "object additional any", schema: `{"type":"object","properties":{"a":{"type":"integer"}}}`,
		accept: []string{`{"a":1,"b":[true,null,{"c":"d"}]}`, `{"b":1.5}`},
		reject: []string{`{"a":"x"}`, `[]`}},
	{name: "required without properties", schema: `{"type":"object","required":["k"],"additionalProperties":{"type":"integer"}}`,
		accept: []string{`{"k":1}`, `{"k":1,"j":2}`},
		reject: []string{`{}`, `{"j":2}`, `{"k":"x"}`}},
	{name: "array bounds", schema: `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
		accept: []string{`[1]`, `[1,2,3]`},
		reject: []string{`[]`, `[1,2,3,4]`, `[1,"a"]`, `[1,]`}},
	{name: "prefixItems", schema: `{"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`,
		accept: []string{`["a",1]`, `["a"]`, `[]`},
		reject: []string{`["a",1,2]`, `[1]`}},
	{name: "prefixItems minItems", schema: `{"type":"array","prefixItems":[{"const":1},{"const":2}],"items":{"type":"boolean"},"minItems":3}`,
		accept: []string{`[1,2,true]`, `[1,2,false,true]`},
		reject: []string{`[1,2]`, `[1,2,3]`}},
	{name: "enum", schema: `{"enum":["red","green",1,null,{"a":[1,2]}]}`,
		accept: []string{`"red"`, `"green"`, `1`, `null`, `{"a":[1,2]}`},
		reject: []string{`"blue"`, `2`, `{"a":[1]}`, `"re"`},
		narrow: []string{`"gr\u0065en"`, `1.0`}},
	{name: "enum filtered by type", schema: `{"type":"string","enum":["a",1,"bb"],"maxLength":1}`,
		accept: []string{`"a"`},
		reject: []string{`1`, `"bb"`}},
	{name: "const", schema: `{"const":"x\"y"}`,
		accept: []string{`"x\"y"`},
		reject: []string{`"x"`, `"x\"yz"`}},
	{name: "anyOf", schema: `{"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":10}]}`,
		accept: []string{`"ab"`, `10`, `""`},
		reject: []string{`"abc"`, `9`}},
	{name: "anyOf objects", schema: `{"anyOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"],"additionalProperties":false}]}`,
		accept: []string{`{"kind":"a","x":1}`, `{"kind":"b","y":"s"}`},
		reject: []string{`{"kind":"a","y":"s"}`, `{"kind":"c","x":1}`}},
	{name: "oneOf of distinct types", schema: `{"oneOf":[{"type":"string"},{"type":"array","items":{"type":"null"}}]}`,
		accept: []string{`"s"`, `[null]`},
		reject: []string{`1`, `[1]`}},
	{name: "recursion", schema: `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
		opts:   grammar.Options{MaxDepth: 4},
		accept: []string{`{"v":1,"kids":[]}`, `{"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[]}]}`},
		reject: []string{`{"v":1}`, `{"v":1,"kids":[{"v":2}]}`},
		narrow: []string{`{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]}`}},
	{name: "root recursion", schema: `{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"],"additionalProperties":false}`,
		accept: []string{`{"next":null}`, `{"next":{"next":null}}`},
		reject: []string{`{}`, `{"next":{}}`}},
	{name: "allOf of one", schema: `{"allOf":[{"type":"integer","maximum":3}],"title":"t"}`,
		accept: []string{`3`},
		reject: []string{`4`}},
	{name: "no type, keywords imply", schema: `{"maxLength":2,"minimum":1}`,
		accept: []string{`"ab"`, `1`, `1.5`},
		reject: []string{`"abc"`, `0`},
		narrow: []string{`true`, `null`, `{}`}},
	{name: "true schema", schema: `true`,
		accept: []string{`{"a":[1,"b",null,true,{"c":-1.5e3}]}`, `"s"`, `1`, `null`, `[]`}},
	{name: "flexible whitespace", schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array"}},"additionalProperties":false}`,
		opts:   grammar.Options{Style: grammar.Style{Whitespace: 4}},
		accept: []string{" { \"a\" : 1 ,\n\t\"b\" : [ 1 , 2 ] } \n", `{"a":1}`},
		reject: []string{`{"a":1 1}`},
		narrow: []string{"\n\n\n\n\n{}", `{"a":1     }`}},
	{name: "python style", schema: `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"array"}},"additionalProperties":false}`,
		opts:   grammar.Options{Style: grammar.Style{Python: true}},
		accept: []string{`{"a": 1, "b": [1, 2, {"c": null}]}`, `{}`, `{"b": []}`},
		narrow: []string{`{"a":1}`, `{ "a": 1}`, `{"a": 1,  "b": []}`}},
	{name: "compact style", schema: `{"type":"array"}`,
		accept: []string{`[1,{"a":[]}]`},
		narrow: []string{`[1, 2]`, ` []`}},
}

func TestSchemas(t *testing.T) {
	v := byteVocab(t)
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := grammar.CompileJSONSchema([]byte(tc.schema), tc.opts)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			c := bind(t, g, v)
			val := grammartest.NewValidator(t, tc.schema)
			for _, s := range tc.accept {
				if err := val.Validate([]byte(s)); err != nil {
					t.Errorf("test case %s is not valid: %v", s, err)
				}
				if ok, at := takes(t, c, s); !ok {
					t.Errorf("grammar refuses valid %q at byte %d", s, at)
				}
			}
			for _, s := range tc.reject {
				if err := val.Validate([]byte(s)); err == nil {
					t.Errorf("test case %s is valid, not a rejection", s)
				}
				if ok, _ := takes(t, c, s); ok {
					t.Errorf("grammar takes invalid %q", s)
				}
			}
			for _, s := range tc.malformed {
				if utf8.ValidString(s) {
					t.Errorf("malformed case %q is valid UTF-8", s)
				}
				if ok, _ := takes(t, c, s); ok {
					t.Errorf("grammar takes malformed %q", s)
				}
			}
			for _, s := range tc.narrow {
				if err := val.Validate([]byte(s)); err != nil {
					t.Errorf("narrow case %s is not valid: %v", s, err)
				}
				if ok, _ := takes(t, c, s); ok {
					t.Errorf("grammar takes %q, outside its documented subset", s)
				}
			}
		})
	}
}

func TestJSONObject(t *testing.T) {
	v := byteVocab(t)
	c := bind(t, grammar.JSONObject(grammar.Options{MaxDepth: 4}), v)
	for _, s := range []string{`{}`, `{"a":{"b":[1,2,{"c":null}]}}`, `{"a":1,"a":2}`} {
		if ok, at := takes(t, c, s); !ok {
			t.Errorf("refuses %q at %d", s, at)
		}
	}
	for _, s := range []string{`[]`, `1`, `"s"`, `{"a":{"b":[{"c":[]}]}}`, `{`, `{"a"}`} {
		if ok, _ := takes(t, c, s); ok {
			t.Errorf("takes %q", s)
		}
	}
}

func TestRegexpGrammar(t *testing.T) {
	v := byteVocab(t)
	g, err := grammar.CompileRegexp(`[a-c]{2,3}x?|é+`, grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := bind(t, g, v)
	for _, s := range []string{"ab", "abcx", "abx", "é", "ééé"} {
		if ok, at := takes(t, c, s); !ok {
			t.Errorf("refuses %q at %d", s, at)
		}
	}
	for _, s := range []string{"a", "abcd", "", "ax", "e"} {
		if ok, _ := takes(t, c, s); ok {
			t.Errorf("takes %q", s)
		}
	}
	for _, bad := range []string{`(`, `\bword`, `(?m)^a$`, `a{1001}`} {
		if _, err := grammar.CompileRegexp(bad, grammar.Options{}); !errors.Is(err, grammar.ErrRegexp) {
			t.Errorf("CompileRegexp(%q) = %v, want ErrRegexp", bad, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		schema, pointer, keyword string
		err                      error
	}{
		{`{"type":"array","uniqueItems":true}`, "/uniqueItems", "uniqueItems", grammar.ErrUnsupported},
		{`{"properties":{"a":{"not":{"type":"string"}}}}`, "/properties/a/not", "not", grammar.ErrUnsupported},
		{`{"properties":{"a/b~":{"minProperties":1}}}`, "/properties/a~1b~0/minProperties", "minProperties", grammar.ErrUnsupported},
		{`{"type":"string","format":"hostname"}`, "/format", "format", grammar.ErrUnsupported},
		{`{"$ref":"http://example.com/s.json"}`, "/$ref", "$ref", grammar.ErrUnsupported},
		{`{"type":"string","pattern":"(?=a)"}`, "/pattern", "pattern", grammar.ErrUnsupported},
		{`{"type":"string","pattern":"\\bw"}`, "/pattern", "pattern", grammar.ErrUnsupported},
		{`{"allOf":[{"type":"string"},{"maxLength":3}]}`, "/allOf", "allOf", grammar.ErrUnsupported},
		{`{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}`, "/oneOf", "oneOf", grammar.ErrUnsupported},
		{`{"type":"number","multipleOf":0.0000001}`, "/multipleOf", "multipleOf", grammar.ErrUnsupported},
		{`{"if":{"type":"string"},"then":{"maxLength":2}}`, "/if", "if", grammar.ErrUnsupported},
		{`{"type":"object","anyOf":[{"required":["a"]}]}`, "/type", "type", grammar.ErrUnsupported},
		{`{"$defs":{"x":{"$id":"x","type":"string"}},"$ref":"#/$defs/x"}`, "/$defs/x/$id", "$id", grammar.ErrUnsupported},
		{`{"type":"strin"}`, "/type", "type", grammar.ErrInvalidSchema},
		{`{"type":"string","minLength":-1}`, "/minLength", "minLength", grammar.ErrInvalidSchema},
		{`{"type":"array","maxItems":1.5}`, "/maxItems", "maxItems", grammar.ErrInvalidSchema},
		{`{"$ref":"#/$defs/missing"}`, "/$ref", "$ref", grammar.ErrInvalidSchema},
		{`{"properties":{"a":5}}`, "/properties/a", "", grammar.ErrInvalidSchema},
		{`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "", "$ref", grammar.ErrInvalidSchema},
		{`{"type":"object","required":["a"],"additionalProperties":false}`, "", "", grammar.ErrInvalidSchema},
		{`{"type":"object","properties":{"n":{"type":"integer","minimum":5,"maximum":4}},"required":["n"]}`, "/properties/n", "", grammar.ErrInvalidSchema},
		{`{"type":"string","minLength":3,"maxLength":2}`, "", "", grammar.ErrInvalidSchema},
		{`{"type":"array","minItems":1,"maxItems":0}`, "", "", grammar.ErrInvalidSchema},
		{`{"enum":[]}`, "", "", grammar.ErrInvalidSchema},
		{`{"type":"string"`, "", "", grammar.ErrInvalidSchema},
	}
	for _, tc := range cases {
		_, err := grammar.CompileJSONSchema([]byte(tc.schema), grammar.Options{})
		var se *grammar.SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v, want a *SchemaError", tc.schema, err)
			continue
		}
		if !errors.Is(err, tc.err) || se.Keyword != tc.keyword || (tc.pointer != "" && se.Pointer != tc.pointer) {
			t.Errorf("%s: got %q (pointer %q, keyword %q), want %v at %q, keyword %q", tc.schema, err, se.Pointer, se.Keyword, tc.err, tc.pointer, tc.keyword)
		}
		if tc.keyword != "" && !strings.Contains(err.Error(), tc.keyword) {
			t.Errorf("%s: message %q does not name the keyword", tc.schema, err)
		}
		// Lenient: what cannot be enforced is left out and listed; what is
		// invalid stays refused.
		s, lerr := grammar.ParseSchema([]byte(tc.schema), grammar.Options{Lenient: true})
		if tc.err == grammar.ErrUnsupported {
			if lerr != nil {
				t.Errorf("%s lenient: %v", tc.schema, lerr)
			} else if ig := s.Ignored(); len(ig) == 0 || !strings.Contains(strings.Join(ig, "\n"), tc.keyword) {
				t.Errorf("%s lenient: ignored %q, want %s listed", tc.schema, ig, tc.keyword)
			}
		}
	}
}

func TestLenientKeepsOtherKeysOut(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{"^x":{"type":"string"}}}`
	g, err := grammar.CompileJSONSchema([]byte(schema), grammar.Options{Lenient: true})
	if err != nil {
		t.Fatal(err)
	}
	c := bind(t, g, byteVocab(t))
	if ok, _ := takes(t, c, `{"a":1}`); !ok {
		t.Error("refuses a declared property")
	}
	if ok, _ := takes(t, c, `{"a":1,"x":5}`); ok {
		t.Error("takes an other key that patternProperties could refuse")
	}
}
