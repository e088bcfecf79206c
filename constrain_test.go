package k3_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/k3go/k3"
	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
)

// releaseModel writes a synthetic checkpoint with random weights and the
// release's own tokenizer (163,840 tokens) and opens it: nothing but a
// constraint makes such a model's output valid.
func releaseModel(t *testing.T, opts k3.Options) *k3.Model {
	t.Helper()
	m, err := k3.Open(grammartest.ReleaseModelDir(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// constrainedSchemas are bounded schemas, each with several of the
// features the issue names.
var constrainedSchemas = []string{
	// Nested objects, an enum, integers with ranges, a bounded string with
	// a pattern, an array with minItems and maxItems.
	`{"type":"object","properties":{
	  "name":{"type":"string","maxLength":6,"pattern":"^[a-z]+$"},
	  "age":{"type":"integer","minimum":0,"maximum":120},
	  "role":{"enum":["admin","user","guest"]},
	  "tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":2},
	  "address":{"type":"object","properties":{"zip":{"type":"integer","minimum":10000,"maximum":99999},"city":{"type":"string","maxLength":6}},
	             "required":["zip","city"],"additionalProperties":false}},
	 "required":["name","age","role","tags","address"],"additionalProperties":false}`,
	// anyOf and recursion through $ref ($defs), bounded by the depth.
	`{"$defs":{"node":{"type":"object","properties":{
	    "value":{"anyOf":[{"type":"integer","minimum":-5,"maximum":5},{"type":"string","maxLength":3},{"type":"boolean"}]},
	    "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},
	  "required":["value","children"],"additionalProperties":false}},
	 "$ref":"#/$defs/node"}`,
}

// generateConstrained generates with c from the model at temperature 1 and
// the seed, and returns the text and whether the generation ended on its
// own (not at MaxTokens).
func generateConstrained(t *testing.T, m *k3.Model, c grammar.Constraint, seed uint64, speculate int) (string, bool) {
	t.Helper()
	const maxTokens = 600
	var b strings.Builder
	n := 0
	opts := k3.GenerateOptions{MaxTokens: maxTokens, Constraint: c, StopTokens: m.StopTokens(), Speculate: speculate,
		Sampling: k3.SamplingOptions{Temperature: 1, Seed: seed}}
	for tok, err := range m.Generate(context.Background(), m.Tokenizer().Encode("JSON:"), opts) {
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(tok.Text)
		n++
	}
	return b.String(), n < maxTokens
}

// TestConstrainedOutputValidates generates, on random weights with the
// release vocabulary, at temperature 1 and 50 seeds per schema (sessions
// in parallel, sharing passes), and checks that every output ends on its
// own and validates against its schema with an independent validator.
func TestConstrainedOutputValidates(t *testing.T) {
	m := releaseModel(t, k3.Options{MaxContext: 1024, Sessions: 16})
	v, err := m.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	for si, schema := range constrainedSchemas {
		// The recursive schema is bounded by the nesting the grammar
		// allows (MaxDepth): random weights nest as deep as allowed.
		g, err := grammar.CompileJSONSchema([]byte(schema), grammar.Options{MaxDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		c, err := g.Constraint(v)
		if err != nil {
			t.Fatal(err)
		}
		val := grammartest.NewValidator(t, schema)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for seed := range uint64(50) {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				text, ended := generateConstrained(t, m, c, seed, 0)
				if !ended {
					t.Errorf("schema %d seed %d: ran out of tokens: %q", si, seed, text)
					return
				}
				if err := val.Validate([]byte(text)); err != nil {
					t.Errorf("schema %d seed %d: %q does not validate: %v", si, seed, text, err)
				}
			})
		}
		wg.Wait()
	}
	if st := m.Stats(); st.ConstrainedGenerations != 100 || st.MaskedTokens == 0 || st.MaskTime <= 0 {
		t.Fatalf("stats: %d constrained generations, %d masked tokens, %v", st.ConstrainedGenerations, st.MaskedTokens, st.MaskTime)
	}
}

// TestConstrainedSpeculationExact checks that speculative decoding under a
// constraint gives the tokens of constrained decoding without drafts.
func TestConstrainedSpeculationExact(t *testing.T) {
	m := releaseModel(t, k3.Options{MaxContext: 1024})
	v, err := m.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.CompileJSONSchema([]byte(constrainedSchemas[0]), grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := g.Constraint(v)
	for seed := range uint64(4) {
		plain, _ := generateConstrained(t, m, c, seed, 0)
		spec, _ := generateConstrained(t, m, c, seed, 4)
		if plain != spec {
			t.Fatalf("seed %d: speculative %q, plain %q", seed, spec, plain)
		}
	}
}

// TestForcedToolCall chats with a strict tool and tool_choice required
// (and named) on random weights, thinking off (random weights would think
// until they run out of tokens: the think channel is free): every reply
// parses into a call of the tool whose arguments validate against its
// parameters, streamed (the deltas' calls) and whole (Reply).
func TestForcedToolCall(t *testing.T) {
	m := releaseModel(t, k3.Options{MaxContext: 2048})
	params := `{"type":"object","properties":{"path":{"type":"string","maxLength":12},"lines":{"type":"integer","minimum":1,"maximum":50}},"required":["path","lines"],"additionalProperties":false}`
	tools := json.RawMessage(`[{"type":"function","function":{"name":"read_file","strict":true,"parameters":` + params + `}},
	  {"type":"function","function":{"name":"list","strict":true,"parameters":{"type":"object","properties":{"dir":{"enum":[".","src"]}},"required":["dir"],"additionalProperties":false}}}]`)
	val := grammartest.NewValidator(t, params)
	for _, choice := range []struct{ choice, fn string }{{chat.ToolChoiceRequired, ""}, {"", "read_file"}} {
		for seed := range uint64(4) {
			c, err := m.NewChat(k3.ChatOptions{System: "You are a coding agent.", Options: chat.Options{Tools: tools, ToolChoice: choice.choice, ToolChoiceFunction: choice.fn, NoThinking: true}})
			if err != nil {
				t.Fatal(err)
			}
			var streamed []chat.ToolCall
			for d, err := range c.Stream(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "Read main.go."}},
				k3.GenerateOptions{MaxTokens: 400, Sampling: k3.SamplingOptions{Temperature: 1, Seed: seed}}) {
				if err != nil {
					t.Fatal(err)
				}
				if d.ToolCall != nil {
					streamed = append(streamed, *d.ToolCall)
				}
			}
			reply := c.Reply()
			c.Close()
			if len(reply.ToolCalls) == 0 || len(streamed) != len(reply.ToolCalls) {
				t.Fatalf("%+v seed %d: %d calls in the reply, %d streamed: %+v", choice, seed, len(reply.ToolCalls), len(streamed), reply)
			}
			for _, call := range reply.ToolCalls {
				if choice.fn != "" && call.Function.Name != choice.fn {
					t.Fatalf("%+v seed %d: called %q", choice, seed, call.Function.Name)
				}
				if call.Function.Name == "read_file" {
					if err := val.Validate([]byte(call.Function.Arguments)); err != nil {
						t.Fatalf("%+v seed %d: arguments %s: %v", choice, seed, call.Function.Arguments, err)
					}
				}
			}
		}
	}
}

// TestConstraintRefusals checks that a chat whose options cannot be
// enforced fails with ErrBadOptions naming the problem: a strict schema
// with a keyword the grammar cannot enforce (with its JSON pointer), a
// tool choice naming an undeclared tool.
func TestConstraintRefusals(t *testing.T) {
	m := releaseModel(t, k3.Options{MaxContext: 1024})
	for _, c := range []struct {
		opts chat.Options
		want string
	}{
		{chat.Options{ResponseFormat: &chat.ResponseFormat{Type: "json_schema", JSONSchema: json.RawMessage(`{"name":"x","strict":true,
			"schema":{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"},"uniqueItems":true}},"required":["a"],"additionalProperties":false}}`)}},
			"/properties/a/uniqueItems"},
		{chat.Options{ToolChoiceFunction: "nope", Tools: json.RawMessage(`[{"type":"function","function":{"name":"list"}}]`)}, `"nope"`},
	} {
		conv, err := m.NewChat(k3.ChatOptions{Options: c.opts})
		if err != nil {
			t.Fatal(err)
		}
		var got error
		for _, err := range conv.Stream(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "hi"}}, k3.GenerateOptions{MaxTokens: 4}) {
			got = err
		}
		if !errors.Is(got, k3.ErrBadOptions) || !strings.Contains(got.Error(), c.want) {
			t.Fatalf("%+v: got %v, want ErrBadOptions naming %q", c.opts, got, c.want)
		}
	}
}
