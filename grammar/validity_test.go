package grammar_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// boundedSchemas have every string, array and recursion bounded, so that
// any output the mask allows finishes. Between them they cover what the
// issue lists: nested objects, arrays with minItems and maxItems, enums,
// integers with ranges, anyOf, recursive $ref, and strings with
// maxLength and pattern (and the formats).
var boundedSchemas = []struct {
	name   string
	schema string
	opts   grammar.Options
}{
	{"nested", `{"type":"object","properties":{
		"name":{"type":"string","maxLength":20},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"nickname":{"type":"string","maxLength":8},
		"address":{"type":"object","properties":{
			"street":{"type":"string","minLength":1,"maxLength":30},
			"zip":{"type":"string","pattern":"^[0-9]{5}$"},
			"geo":{"type":"object","properties":{"lat":{"type":"number","minimum":-90,"maximum":90},"lon":{"type":"number","minimum":-180,"maximum":180}},"required":["lat","lon"],"additionalProperties":false}},
			"required":["street","zip","geo"],"additionalProperties":false},
		"tags":{"type":"array","items":{"enum":["a","b","c"]},"minItems":1,"maxItems":3}},
		"required":["name","age","address","tags"],"additionalProperties":false}`, grammar.Options{Style: grammar.DefaultStyle}},
	{"arrays", `{"type":"array","minItems":2,"maxItems":4,"items":{"type":"object","properties":{
		"id":{"type":"integer","minimum":1,"maximum":1000,"multipleOf":7},
		"score":{"type":"number","exclusiveMinimum":0,"maximum":1},
		"pair":{"type":"array","prefixItems":[{"type":"boolean"},{"type":"null"}],"items":false,"minItems":2}},
		"required":["id","score","pair"],"additionalProperties":false}}`, grammar.Options{}},
	{"enums", `{"type":"object","properties":{
		"color":{"enum":["red","green","blue","dark \"blue\""]},
		"size":{"enum":[1,2,3,null,{"x":[1,2]}]},
		"flag":{"type":"boolean"},
		"kind":{"const":"fixed"}},
		"required":["color","size","flag","kind"],"additionalProperties":false}`, grammar.Options{Style: grammar.Style{Python: true}}},
	{"anyOf", `{"type":"object","properties":{"values":{"type":"array","maxItems":5,"items":{"anyOf":[
		{"type":"string","maxLength":5},
		{"type":"integer","minimum":-10,"maximum":10},
		{"type":"null"},
		{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"],"additionalProperties":false},
		{"type":"object","properties":{"y":{"type":"string","maxLength":3}},"required":["y"],"additionalProperties":false}]}}},
		"required":["values"],"additionalProperties":false}`, grammar.Options{Style: grammar.DefaultStyle}},
	{"recursive", `{"$defs":{"node":{"type":"object","properties":{
		"label":{"type":"string","maxLength":6},
		"children":{"type":"array","maxItems":2,"items":{"$ref":"#/$defs/node"}}},
		"required":["label","children"],"additionalProperties":false}},
		"$ref":"#/$defs/node"}`, grammar.Options{MaxDepth: 5}},
	{"strings", `{"type":"object","properties":{
		"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{3}$"},
		"slug":{"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","maxLength":12},
		"note":{"type":"string","minLength":2,"maxLength":10},
		"word":{"type":"string","pattern":"ab","maxLength":6},
		"email":{"type":"string","format":"email"},
		"when":{"type":"string","format":"date-time"},
		"day":{"type":"string","format":"date"},
		"at":{"type":"string","format":"time"},
		"id":{"type":"string","format":"uuid"}},
		"required":["code","slug","note","word","email","when","day","at","id"],"additionalProperties":false}`, grammar.Options{Style: grammar.DefaultStyle}},
}

// TestValidityReleaseVocab is the validity test at the grammar
// level: over the release vocabulary, sampling at temperature 1 from
// random logits restricted to the mask, every output under a bounded
// schema finishes and validates. Nothing but the mask makes it valid.
func TestValidityReleaseVocab(t *testing.T) {
	tok, v := grammartest.Release(t)
	seeds := 50
	if testing.Short() {
		seeds = 5
	}
	for _, sc := range boundedSchemas {
		t.Run(sc.name, func(t *testing.T) {
			g, err := grammar.CompileJSONSchema([]byte(sc.schema), sc.opts)
			if err != nil {
				t.Fatal(err)
			}
			c := bind(t, g, v)
			val := grammartest.NewValidator(t, sc.schema)
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
				run := grammartest.Generate(t, c.NewMatcher(), v.MaskWords(), grammartest.Uniform(nil), rng, 5000, nil)
				text := tok.DecodeLenient(run.IDs)
				if !run.Finished {
					t.Fatalf("seed %d: not finished after %d tokens: %q", seed, len(run.IDs), text)
				}
				if err := val.Validate([]byte(text)); err != nil {
					t.Fatalf("seed %d: %q does not validate: %v", seed, text, err)
				}
				if seed == 0 {
					t.Logf("%d tokens: %s", len(run.IDs), text)
				}
			}
		})
	}
}
