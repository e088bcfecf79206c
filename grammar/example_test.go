package grammar_test

import (
	"fmt"

	"github.com/k3go/k3/grammar"
)

// A sampler constrained to a schema: here the "model" takes the first
// allowed token each time, over a vocabulary of a few tokens.
func ExampleCompileJSONSchema() {
	tokens := [][]byte{[]byte(`{"`), []byte(`n":`), []byte(`ok`), []byte(`}`), []byte(`1`), []byte(`12`), []byte(`"`), []byte(` `), []byte(`n`), []byte(`":`)}
	v, err := grammar.NewVocab(tokens, []grammar.SpecialToken{{ID: 10, Name: "<eos>"}})
	if err != nil {
		panic(err)
	}
	g, err := grammar.CompileJSONSchema([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":10}},"required":["n"],"additionalProperties":false}`), grammar.Options{})
	if err != nil {
		panic(err)
	}
	c, err := g.Constraint(v) // once per request
	if err != nil {
		panic(err)
	}
	m := c.NewMatcher() // once per sequence
	mask := make([]uint64, v.MaskWords())
	var out []byte
	for !m.Done() {
		if err := m.FillMask(mask); err != nil {
			panic(err)
		}
		for id := range v.Size() {
			if mask[id/64]>>(id%64)&1 != 0 {
				b, _ := v.TokenBytes(id)
				out = append(out, b...)
				if err := m.Accept(id); err != nil {
					panic(err)
				}
				break
			}
		}
	}
	// After "1" the mask leaves out "}", since 1 is below the minimum.
	fmt.Println(string(out))
	// Output: {"n":11}
}
