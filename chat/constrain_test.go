package chat_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/grammar"
	"github.com/k3go/k3/internal/testkit/grammartest"
	"github.com/k3go/k3/tokenizer"
)

const weatherParams = `{"type":"object","properties":{
	"city":{"type":"string","maxLength":12},
	"days":{"type":"integer","minimum":1,"maximum":7},
	"units":{"enum":["c","f"]},
	"opts":{"type":"object","properties":{"x":{"type":"boolean"},"w":{"type":"array","items":{"type":"number"},"maxItems":2}},"required":["x"],"additionalProperties":false},
	"note":{"type":["string","null"],"maxLength":5}},
	"required":["city","days","units","opts"],"additionalProperties":false}`

const searchParams = `{"type":"object","properties":{"q":{"type":"string","maxLength":10}},"required":["q"],"additionalProperties":false}`

func weatherTools(strict bool) json.RawMessage {
	s := "false"
	if strict {
		s = "true"
	}
	return json.RawMessage(`[{"type":"function","function":{"name":"get_weather","strict":` + s + `,"parameters":` + weatherParams + `}},
		{"type":"function","function":{"name":"search","strict":` + s + `,"parameters":` + searchParams + `}}]`)
}

const answerSchema = `{"type":"object","properties":{"answer":{"type":"string","maxLength":15},"confidence":{"type":"number","minimum":0,"maximum":1},"sources":{"type":"array","items":{"type":"string","format":"uuid"},"maxItems":2}},"required":["answer","confidence","sources"],"additionalProperties":false}`

func schemaFormat(schema string) *chat.ResponseFormat {
	return &chat.ResponseFormat{Type: "json_schema", JSONSchema: json.RawMessage(`{"name":"a","strict":true,"schema":` + schema + `}`)}
}

// answerIDs renders an answer as the release does and encodes it.
func answerIDs(t *testing.T, tok *tokenizer.Tokenizer, m chat.Message, opts chat.Options) []int {
	t.Helper()
	segs, err := chat.RenderAnswer(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := chat.Encode(tok, segs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// follows feeds ids to a matcher: it reports whether all are taken and
// the answer may end after them.
func follows(t *testing.T, c grammar.Constraint, ids []int) (bool, int) {
	t.Helper()
	m := c.NewMatcher()
	for k, id := range ids {
		if err := m.Accept(id); err != nil {
			return false, k
		}
	}
	return m.Done(), len(ids)
}

func constraint(t *testing.T, tok *tokenizer.Tokenizer, opts chat.Options, co chat.ConstrainOptions) grammar.Constraint {
	t.Helper()
	g, err := chat.AnswerGrammar(nil, opts, co)
	if err != nil {
		t.Fatal(err)
	}
	if g == nil {
		t.Fatal("no grammar")
	}
	v, err := chat.GrammarVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.Constraint(v)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func call(name, args string) chat.ToolCall {
	return chat.ToolCall{Function: chat.FunctionCall{Name: name, Arguments: args}}
}

// TestAnswerGrammarAgainstRenderer checks the grammar against answers
// rendered by the release's encoding: those that meet the constraints are
// taken whole, those that do not are refused.
func TestAnswerGrammarAgainstRenderer(t *testing.T) {
	tok := byteTokenizer()
	goodArgs := `{"city": "Paris", "days": 3, "units": "c", "opts": {"x": true, "w": [1.5, -2]}, "note": null}`
	cases := []struct {
		name string
		opts chat.Options
		ok   []chat.Message
		bad  []chat.Message
	}{
		{name: "json_schema, thinking",
			opts: chat.Options{ResponseFormat: schemaFormat(answerSchema)},
			ok: []chat.Message{
				{ReasoningContent: "Let me think.", Content: `{"answer":"yes","confidence":0.5,"sources":[]}`},
				{Content: `{"answer":"","confidence":1,"sources":["123e4567-e89b-12d3-a456-426614174000"]}`},
			},
			bad: []chat.Message{
				{Content: `{"answer":"yes","confidence":2,"sources":[]}`},
				{Content: `{"answer":"yes"}`},
				{Content: `Sure: {"answer":"yes","confidence":0.5,"sources":[]}`},
				{Content: `{"answer":"yes","confidence":0.5,"sources":[]}`, ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`)}},
			}},
		{name: "json_object, no thinking",
			opts: chat.Options{NoThinking: true, ResponseFormat: &chat.ResponseFormat{Type: "json_object"}},
			ok:   []chat.Message{{Content: `{"a":[1,{"b":null}]}`}, {Content: `{}`}},
			bad:  []chat.Message{{Content: `[1]`}, {Content: `{"a":1} trailing`}, {Content: ``}}},
		{name: "required, strict",
			opts: chat.Options{Tools: weatherTools(true), ToolChoice: chat.ToolChoiceRequired},
			ok: []chat.Message{
				{ReasoningContent: "hm", ToolCalls: []chat.ToolCall{call("get_weather", goodArgs)}},
				{ToolCalls: []chat.ToolCall{call("search", `{"q": "a \"b\" & <c"}`), call("get_weather", `{"city": "", "days": 7, "units": "f", "opts": {"x": false}}`)}},
			},
			bad: []chat.Message{
				{Content: "No tools."},
				{Content: "Calling.", ToolCalls: []chat.ToolCall{call("get_weather", goodArgs)}}, // a forced call has no content
				{ToolCalls: []chat.ToolCall{call("get_time", `{}`)}},
				{ToolCalls: []chat.ToolCall{call("get_weather", `{"city": "Paris", "days": 8, "units": "c", "opts": {"x": true}}`)}},
				{ToolCalls: []chat.ToolCall{call("get_weather", `{"days": 3, "city": "Paris", "units": "c", "opts": {"x": true}}`)}},
				{ToolCalls: []chat.ToolCall{call("get_weather", `{"city": "Paris", "days": 3, "units": "k", "opts": {"x": true}}`)}},
				{ToolCalls: []chat.ToolCall{call("get_weather", `{"city": "Paris", "days": 3, "units": "c", "opts": {"x": true}, "extra": 1}`)}},
				{ToolCalls: []chat.ToolCall{call("get_weather", `{"city": "Paris", "days": "3", "units": "c", "opts": {"x": true}}`)}},
				{ToolCalls: []chat.ToolCall{call("search", `{"q": "far too long a query"}`)}},
			}},
		{name: "named function",
			opts: chat.Options{Tools: weatherTools(true), ToolChoice: chat.ToolChoiceRequired, ToolChoiceFunction: "search"},
			ok:   []chat.Message{{ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`)}}},
			bad: []chat.Message{
				{ToolCalls: []chat.ToolCall{call("get_weather", goodArgs)}},
				{ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`), call("search", `{"q": "y"}`)}},
			}},
		{name: "none",
			opts: chat.Options{Tools: weatherTools(false), ToolChoice: chat.ToolChoiceNone},
			ok:   []chat.Message{{ReasoningContent: "x", Content: "Just text."}, {}},
			bad:  []chat.Message{{ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`)}}}},
		{name: "auto with strict tools",
			opts: chat.Options{Tools: weatherTools(true)},
			ok: []chat.Message{{Content: "text"},
				{Content: "text", ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`)}}},
			bad: []chat.Message{{ToolCalls: []chat.ToolCall{call("search", `{"q": 5}`)}}}},
		{name: "required, lenient tools",
			opts: chat.Options{Tools: weatherTools(false), ToolChoice: chat.ToolChoiceRequired},
			ok:   []chat.Message{{ToolCalls: []chat.ToolCall{call("get_weather", goodArgs)}}},
			bad:  []chat.Message{{ToolCalls: []chat.ToolCall{call("get_weather", `{"city": "Paris"}`)}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := constraint(t, tok, tc.opts, chat.ConstrainOptions{})
			for k, m := range tc.ok {
				if ok, at := follows(t, c, answerIDs(t, tok, m, tc.opts)); !ok {
					t.Errorf("ok[%d] refused at id %d", k, at)
				}
			}
			for k, m := range tc.bad {
				if ok, _ := follows(t, c, answerIDs(t, tok, m, tc.opts)); ok {
					t.Errorf("bad[%d] taken", k)
				}
			}
		})
	}
}

func TestAnswerGrammarNone(t *testing.T) {
	for _, opts := range []chat.Options{
		{},
		{Tools: weatherTools(false)},
		{Tools: weatherTools(false), ToolChoice: chat.ToolChoiceAuto},
		{ResponseFormat: &chat.ResponseFormat{Type: "text"}},
	} {
		g, err := chat.AnswerGrammar(nil, opts, chat.ConstrainOptions{})
		if err != nil || g != nil {
			t.Errorf("%+v: grammar %v, error %v; want neither", opts, g, err)
		}
	}
}

func TestAnswerGrammarErrors(t *testing.T) {
	cases := []struct {
		name   string
		opts   chat.Options
		schema bool // the error also carries a *grammar.SchemaError
	}{
		{"undeclared function", chat.Options{Tools: weatherTools(true), ToolChoice: chat.ToolChoiceRequired, ToolChoiceFunction: "nope"}, false},
		{"required without tools", chat.Options{ToolChoice: chat.ToolChoiceRequired}, false},
		{"no generation prompt", chat.Options{NoGenerationPrompt: true, ToolChoice: chat.ToolChoiceRequired, Tools: weatherTools(true)}, false},
		{"strict tool with unsupported keyword", chat.Options{ToolChoice: chat.ToolChoiceRequired,
			Tools: json.RawMessage(`[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}}}}]`)}, true},
		{"strict response schema with unsupported keyword", chat.Options{ResponseFormat: schemaFormat(`{"type":"object","minProperties":1}`)}, true},
		{"bad response schema", chat.Options{ResponseFormat: schemaFormat(`{"type":"objekt"}`)}, true},
	}
	for _, tc := range cases {
		_, err := chat.AnswerGrammar(nil, tc.opts, chat.ConstrainOptions{})
		if !errors.Is(err, chat.ErrConstraint) {
			t.Errorf("%s: error %v, want ErrConstraint", tc.name, err)
			continue
		}
		var se *grammar.SchemaError
		if errors.As(err, &se) != tc.schema {
			t.Errorf("%s: error %v: *grammar.SchemaError %v, want %v", tc.name, err, !tc.schema, tc.schema)
		}
	}
	// A lenient response schema keeps what it can.
	rf := &chat.ResponseFormat{Type: "json_schema", JSONSchema: json.RawMessage(`{"name":"a","strict":false,"schema":{"type":"object","minProperties":1}}`)}
	if g, err := chat.AnswerGrammar(nil, chat.Options{ResponseFormat: rf}, chat.ConstrainOptions{}); err != nil || g == nil {
		t.Errorf("lenient schema: %v", err)
	}
}

// TestAnswerGrammarContent: a content grammar constrains the response
// channel as a response format's JSON would, thinking or not, and cannot
// come with a response format.
func TestAnswerGrammarContent(t *testing.T) {
	tok := byteTokenizer()
	re := grammar.Regexp(`[a-c]{1,3}`)
	co := chat.ConstrainOptions{Content: &re}
	for _, opts := range []chat.Options{{}, {NoThinking: true}} {
		c := constraint(t, tok, opts, co)
		for _, m := range []chat.Message{{Content: "a"}, {ReasoningContent: "hm", Content: "cab"}} {
			if opts.NoThinking {
				m.ReasoningContent = ""
			}
			if ok, at := follows(t, c, answerIDs(t, tok, m, opts)); !ok {
				t.Errorf("%+v: %+v refused at id %d", opts, m, at)
			}
		}
		for _, m := range []chat.Message{{Content: ""}, {Content: "abca"}, {Content: "x"}, {Content: "a", ToolCalls: []chat.ToolCall{call("search", `{"q": "x"}`)}}} {
			if ok, _ := follows(t, c, answerIDs(t, tok, m, opts)); ok {
				t.Errorf("%+v: %+v taken", opts, m)
			}
		}
	}
	if _, err := chat.AnswerGrammar(nil, chat.Options{ResponseFormat: &chat.ResponseFormat{Type: "json_object"}}, co); !errors.Is(err, chat.ErrConstraint) {
		t.Errorf("content grammar with a response format: %v, want ErrConstraint", err)
	}
}

func TestToolChoiceFunctionJSON(t *testing.T) {
	var o chat.Options
	if err := json.Unmarshal([]byte(`{"tool_choice":{"type":"function","function":{"name":"search"}}}`), &o); err != nil {
		t.Fatal(err)
	}
	if o.ToolChoice != chat.ToolChoiceRequired || o.ToolChoiceFunction != "search" {
		t.Fatalf("read %q, %q", o.ToolChoice, o.ToolChoiceFunction)
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var back chat.Options
	if err := json.Unmarshal(b, &back); err != nil || back.ToolChoiceFunction != "search" {
		t.Fatalf("round trip %s: %+v, %v", b, back, err)
	}
	if _, err := chat.ParseToolChoiceFunction(json.RawMessage(`{"type":"function","function":{}}`)); err == nil {
		t.Fatal("a function without a name is accepted")
	}
}

// TestAnswersRandomRelease runs random-logit generations through the XTML
// layer with the release tokenizer: free reasoning (whose close is made
// likely after a while, as a trained model would), then the constrained
// response or calls. Every answer must finish, parse with the format's
// parser (whole, and id by id as a stream does) into content or tool
// calls, and validate.
func TestAnswersRandomRelease(t *testing.T) {
	tok, v := grammartest.Release(t)
	closeID, _ := tok.ID(chat.TokClose)
	seeds := 20
	if testing.Short() {
		seeds = 3
	}
	params := map[string]*grammartest.Validator{
		"get_weather": grammartest.NewValidator(t, weatherParams),
		"search":      grammartest.NewValidator(t, searchParams),
	}
	answer := grammartest.NewValidator(t, answerSchema)
	cases := []struct {
		name  string
		opts  chat.Options
		check func(t *testing.T, m chat.Message)
	}{
		{"json_schema after thinking", chat.Options{ResponseFormat: schemaFormat(answerSchema)}, func(t *testing.T, m chat.Message) {
			if err := answer.Validate([]byte(m.Content)); err != nil || len(m.ToolCalls) > 0 {
				t.Fatalf("content %q: %v; calls %v", m.Content, err, m.ToolCalls)
			}
		}},
		{"json_schema without thinking", chat.Options{NoThinking: true, ResponseFormat: schemaFormat(answerSchema)}, func(t *testing.T, m chat.Message) {
			if err := answer.Validate([]byte(m.Content)); err != nil || m.ReasoningContent != "" {
				t.Fatalf("content %q: %v; reasoning %q", m.Content, err, m.ReasoningContent)
			}
		}},
		{"required", chat.Options{Tools: weatherTools(true), ToolChoice: chat.ToolChoiceRequired}, func(t *testing.T, m chat.Message) {
			if len(m.ToolCalls) == 0 {
				t.Fatal("no tool call")
			}
			for _, c := range m.ToolCalls {
				val := params[c.Function.Name]
				if val == nil {
					t.Fatalf("call of %q", c.Function.Name)
				}
				if err := val.Validate([]byte(c.Function.Arguments)); err != nil {
					t.Fatalf("%s(%s): %v", c.Function.Name, c.Function.Arguments, err)
				}
			}
		}},
		{"named, no thinking", chat.Options{NoThinking: true, Tools: weatherTools(true), ToolChoice: chat.ToolChoiceRequired, ToolChoiceFunction: "get_weather"}, func(t *testing.T, m chat.Message) {
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" {
				t.Fatalf("calls %v", m.ToolCalls)
			}
			if err := params["get_weather"].Validate([]byte(m.ToolCalls[0].Function.Arguments)); err != nil {
				t.Fatalf("arguments %s: %v", m.ToolCalls[0].Function.Arguments, err)
			}
		}},
		{"none", chat.Options{Tools: weatherTools(true), ToolChoice: chat.ToolChoiceNone}, func(t *testing.T, m chat.Message) {
			if len(m.ToolCalls) > 0 {
				t.Fatalf("calls %v", m.ToolCalls)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := chat.AnswerGrammar(nil, tc.opts, chat.ConstrainOptions{Grammar: grammar.Options{Style: grammar.DefaultStyle, MaxDepth: 4}, MaxToolCalls: 3})
			if err != nil {
				t.Fatal(err)
			}
			c, err := g.Constraint(v)
			if err != nil {
				t.Fatal(err)
			}
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(uint64(seed), 11))
				run := grammartest.Generate(t, c.NewMatcher(), v.MaskWords(),
					grammartest.Uniform(map[int]float64{closeID: 9}), rng, 4000, chat.StopIDs(tok))
				if !run.Finished {
					t.Fatalf("seed %d: not finished after %d tokens", seed, len(run.IDs))
				}
				if last := run.IDs[len(run.IDs)-1]; last != chat.StopIDs(tok)[0] {
					t.Fatalf("seed %d: ends with %d, not <|end_of_msg|>", seed, last)
				}
				m, err := chat.Parse(tok, run.IDs, tc.opts.Thinking())
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, m)
				// Streamed: the deltas add up to the same message.
				p, err := chat.NewParser(tok, tc.opts.Thinking())
				if err != nil {
					t.Fatal(err)
				}
				var content, reasoning strings.Builder
				var calls []chat.ToolCall
				for _, id := range run.IDs {
					d := p.Write(id)
					content.WriteString(d.Content)
					reasoning.WriteString(d.Reasoning)
					if d.ToolCall != nil {
						calls = append(calls, *d.ToolCall)
					}
				}
				d := p.Finish()
				content.WriteString(d.Content)
				reasoning.WriteString(d.Reasoning)
				if content.String() != m.Content || reasoning.String() != m.ReasoningContent || len(calls) != len(m.ToolCalls) {
					t.Fatalf("seed %d: the stream differs from the whole answer", seed)
				}
				for k := range calls {
					if calls[k] != m.ToolCalls[k] {
						t.Fatalf("seed %d: streamed call %v, whole %v", seed, calls[k], m.ToolCalls[k])
					}
				}
				if seed == 0 {
					t.Logf("%d tokens: content %q, calls %v", len(run.IDs), m.Content, m.ToolCalls)
				}
			}
		})
	}
}
