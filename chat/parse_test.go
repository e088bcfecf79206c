package chat

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/k3go/k3/tokenizer"
)

// sameCalls compares tool calls by name and by the typed value of their
// arguments.
func sameCalls(t *testing.T, got, want []ToolCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tool calls, want %d: %+v", len(got), len(want), got)
	}
	for k := range got {
		g, err := arguments(got[k].Function.Arguments)
		if err != nil {
			t.Fatalf("call %d: %v", k, err)
		}
		w, err := arguments(want[k].Function.Arguments)
		if err != nil {
			t.Fatal(err)
		}
		if got[k].Function.Name != want[k].Function.Name || g.format(pyDefault) != w.format(pyDefault) {
			t.Errorf("call %d = %s(%s), want %s(%s)", k, got[k].Function.Name, got[k].Function.Arguments, want[k].Function.Name, want[k].Function.Arguments)
		}
	}
}

// TestGoldenRoundTrip renders every assistant message of the goldens as a
// completion and parses it back, whole and one id at a time.
func TestGoldenRoundTrip(t *testing.T) {
	tok := standin(t)
	n := 0
	for _, c := range loadGoldens(t) {
		for i, m := range c.Messages {
			if m.Role != RoleAssistant {
				continue
			}
			n++
			segs, err := RenderAnswer(m, c.Options)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := Encode(tok, segs)
			if err != nil {
				t.Fatal(err)
			}
			thinking := c.Options.Thinking()
			wantReasoning := m.ReasoningContent
			if !thinking {
				wantReasoning = ""
			}
			got, err := Parse(tok, ids, thinking)
			if err != nil {
				t.Fatal(err)
			}
			if got.ReasoningContent != wantReasoning || got.Content != m.Text() {
				t.Errorf("%s message %d: parsed (%q, %q), want (%q, %q)", c.name, i, got.ReasoningContent, got.Content, wantReasoning, m.Text())
			}
			sameCalls(t, got.ToolCalls, m.ToolCalls)

			p, err := NewParser(tok, thinking)
			if err != nil {
				t.Fatal(err)
			}
			var reasoning, content strings.Builder
			var calls []ToolCall
			for _, id := range ids {
				d := p.Write(id)
				reasoning.WriteString(d.Reasoning)
				content.WriteString(d.Content)
				if d.ToolCall != nil {
					calls = append(calls, *d.ToolCall)
				}
			}
			if !p.Done() {
				t.Errorf("%s message %d: parser not done after <|end_of_msg|>", c.name, i)
			}
			if reasoning.String() != wantReasoning || content.String() != m.Text() {
				t.Errorf("%s message %d: streamed (%q, %q), want (%q, %q)", c.name, i, reasoning.String(), content.String(), wantReasoning, m.Text())
			}
			sameCalls(t, calls, m.ToolCalls)
		}
	}
	if n < 8 {
		t.Errorf("only %d assistant messages in the goldens", n)
	}
}

// tinyTok is a byte-level tokenizer with K3's control tokens.
func tinyTok(tb testing.TB) *tokenizer.Tokenizer {
	tb.Helper()
	ranks := map[string]int{}
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	tok, err := tokenizer.New(ranks, []tokenizer.AddedToken{
		{ID: 256, Content: TokEOS, Special: true}, {ID: 257, Content: TokEndOfMsg, Special: true},
		{ID: 258, Content: TokOpen, Special: true}, {ID: 259, Content: TokClose, Special: true},
		{ID: 260, Content: TokSep, Special: true}, {ID: 261, Content: "[BOS]", Special: true},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func TestParseCutOff(t *testing.T) {
	tok := tinyTok(t)
	ids := tok.EncodeOrdinary("still thinking about ")
	ids = append(ids, tok.EncodeOrdinary("é")[0]) // half a character
	m, err := Parse(tok, ids, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.ReasoningContent != "still thinking about \xc3" || m.Content != "" || m.ToolCalls != nil {
		t.Errorf("cut off: %+v", m)
	}
	// [EOS] ends an answer as <|end_of_msg|> does; what follows is ignored.
	ids = tok.Encode("r<|close|>think<|sep|><|open|>response<|sep|>hi[EOS]more")
	m, _ = Parse(tok, ids, true)
	if m.ReasoningContent != "r" || m.Content != "hi" {
		t.Errorf("[EOS]: %+v", m)
	}
	// Without thinking the answer starts in the response channel.
	m, _ = Parse(tok, tok.Encode("plain answer<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"), false)
	if m.Content != "plain answer" || m.ReasoningContent != "" {
		t.Errorf("no thinking: %+v", m)
	}
	// A call that never closes is not reported.
	m, _ = Parse(tok, tok.Encode(`<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="x" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>1`), true)
	if len(m.ToolCalls) != 0 {
		t.Errorf("unclosed call reported: %+v", m.ToolCalls)
	}
	// A number that is not JSON stays a string; other specials are ignored.
	m, _ = Parse(tok, tok.Encode(`<|close|>think<|sep|>[BOS]<|open|>tools<|sep|><|open|>call tool="x" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>1 2<|close|>argument<|sep|><|open|>argument key="b" type="object"<|sep|>{"é": [1.0]}<|close|>argument<|sep|><|close|>call<|sep|>`), true)
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"a": "1 2", "b": {"é": [1.0]}}` || m.ToolCalls[0].ID != "call_0" {
		t.Errorf("typed arguments: %+v", m.ToolCalls)
	}
}

func FuzzParser(f *testing.F) {
	tok := tinyTok(f)
	f.Add([]byte("r\x03\x04think\x04\x02response\x04hi"), true)
	f.Add([]byte("\x02tools\x04\x02call tool=\"x\x04\x02argument key=\"k\" type=\"array\x04[1\x03argument\x04\x03call\x04"), false)
	f.Fuzz(func(t *testing.T, data []byte, thinking bool) {
		// Bytes 1..5 stand for the control tokens, others for themselves.
		ids := make([]int, len(data))
		for k, b := range data {
			ids[k] = int(b)
			if b >= 1 && b <= 6 {
				ids[k] = 255 + int(b)
			}
		}
		m, err := Parse(tok, ids, thinking)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.ToolCalls {
			if _, err := arguments(c.Function.Arguments); err != nil {
				t.Fatalf("call arguments %q are not a JSON object: %v", c.Function.Arguments, err)
			}
		}
		p, _ := NewParser(tok, thinking)
		var calls int
		for _, id := range ids {
			if p.Write(id).ToolCall != nil {
				calls++
			}
		}
		p.Finish()
		if calls != len(m.ToolCalls) || !slices.EqualFunc(p.Message().ToolCalls, m.ToolCalls, func(a, b ToolCall) bool { return a == b }) {
			t.Fatalf("streamed %d calls, whole %d", calls, len(m.ToolCalls))
		}
	})
}

// TestClosing: an answer cut off anywhere, closed by Closing, is a whole
// message: it parses to the same reply and ends at <|end_of_msg|>.
func TestClosing(t *testing.T) {
	tok := tinyTok(t)
	full := `think<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="string"<|sep|>v<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>`
	ids := tok.Encode(full)
	for n := 0; n <= len(ids); n++ {
		p, _ := NewParser(tok, true)
		for _, id := range ids[:n] {
			p.Write(id)
		}
		before := p.Message()
		closing, err := Encode(tok, p.Closing())
		if err != nil {
			t.Fatal(err)
		}
		whole := append(slices.Clone(ids[:n]), closing...)
		if whole[len(whole)-1] != 257 {
			t.Fatalf("cut at %d: closed ids do not end at <|end_of_msg|>: %q", n, tok.DecodeLenient(whole))
		}
		m, _ := Parse(tok, whole, true)
		if m.ReasoningContent != before.ReasoningContent || m.Content != before.Content || len(m.ToolCalls) < len(before.ToolCalls) {
			t.Errorf("cut at %d: %+v, closed %+v (%q)", n, before, m, tok.DecodeLenient(whole))
		}
	}
	// [EOS] is closed as if it were not there.
	p, _ := NewParser(tok, false)
	for _, id := range tok.Encode("hi[EOS]") {
		p.Write(id)
	}
	if got := Text(p.Closing()); got != "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>" {
		t.Errorf("after [EOS]: %q", got)
	}
}

// FuzzRender: any request renders or fails with an error, never panics;
// what renders encodes, and every assistant message's answer parses.
func FuzzRender(f *testing.F) {
	tok := tinyTok(f)
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x","tool_calls":[{"function":{"name":"f","arguments":{"a":[1,2.5e3,"\u00e9"]}}}]},{"role":"tool","tool_call_id":"q","content":"r"}],"tools":[{"b":1}],"kwargs":{"thinking_effort":"low","tool_choice":"required","response_format":{"type":"json_schema","json_schema":{"schema":{"z":1}}}}}`))
	f.Add([]byte(`{"messages":[{"role":"system","tools":{"a":null}},{"role":"user","content":[{"type":"text","text":"x"}]}],"kwargs":{"thinking":false}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if json.Unmarshal(data, &r) != nil {
			return
		}
		segs, err := Render(r.Messages, r.Options)
		if err != nil {
			return
		}
		if _, err := Encode(tok, segs); err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if m.Role != RoleAssistant {
				continue
			}
			a, err := RenderAnswer(m, r.Options)
			if err != nil {
				t.Fatal(err)
			}
			ids, _ := Encode(tok, a)
			if _, err := Parse(tok, ids, r.Options.Thinking()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestCut: an answer cut anywhere inside a tool call gives the call so
// far: its arguments are a prefix of the whole call's (the text OpenAI
// returns for a call cut by max_tokens), and Closed is a JSON object of
// what is whole. Before the call tag is complete there is no call.
func TestCut(t *testing.T) {
	tok := standin(t)
	m := Message{Role: RoleAssistant, ReasoningContent: "r", ToolCalls: []ToolCall{
		{Function: FunctionCall{Name: "a", Arguments: `{"x": 1}`}},
		{Function: FunctionCall{Name: "get_weather", Arguments: `{"days": [1, 2], "city": "Paris \"east\" é", "n": 3}`}},
	}}
	segs, err := RenderAnswer(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Encode(tok, segs)
	if err != nil {
		t.Fatal(err)
	}
	const whole = `{"days": [1, 2], "city": "Paris \"east\" é", "n": 3}`
	cuts, longest := 0, ""
	for n := range len(ids) {
		p, err := NewParser(tok, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[:n] {
			p.Write(id)
		}
		p.Finish()
		c, ok := p.Cut()
		if !ok {
			continue
		}
		cuts++
		if len(p.Message().ToolCalls) == 0 {
			// Inside the first call.
			if c.Function.Name != "a" || !strings.HasPrefix(`{"x": 1}`, c.Function.Arguments) {
				t.Errorf("cut at %d: %+v", n, c)
			}
			continue
		}
		if c.Function.Name != "get_weather" || c.ID != "call_1" || c.Type != "function" {
			t.Errorf("cut at %d: %+v", n, c.ToolCall)
		}
		if !strings.HasPrefix(whole, c.Function.Arguments) || !strings.HasPrefix(c.Function.Arguments, "{") {
			t.Errorf("cut at %d: arguments %q are not a prefix of %q", n, c.Function.Arguments, whole)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.Closed), &obj); err != nil {
			t.Errorf("cut at %d: closed %q: %v", n, c.Closed, err)
		}
		if city, ok := obj["city"].(string); ok && !strings.HasPrefix("Paris \"east\" é", city) {
			t.Errorf("cut at %d: closed %q", n, c.Closed)
		}
		if len(c.Function.Arguments) > len(longest) {
			longest = c.Function.Arguments
		}
	}
	if cuts < 10 || !strings.HasPrefix(longest, `{"days": [1, 2], "city": "Paris \"east\" é", "n": `) {
		t.Errorf("%d cuts inside a call, longest arguments %q", cuts, longest)
	}
	// The whole answer has no cut call.
	p, _ := NewParser(tok, true)
	for _, id := range ids {
		p.Write(id)
	}
	p.Finish()
	if c, ok := p.Cut(); ok {
		t.Errorf("a whole answer has a cut call: %+v", c)
	}
}
