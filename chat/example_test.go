package chat_test

import (
	"encoding/json"
	"fmt"
	"log"

	"github.com/k3go/k3/chat"
	"github.com/k3go/k3/tokenizer"
)

// byteTokenizer is a tokenizer of single bytes with K3's control tokens,
// enough for the examples; a real one comes from tokenizer.Load.
func byteTokenizer() *tokenizer.Tokenizer {
	ranks := map[string]int{}
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	tok, err := tokenizer.New(ranks, []tokenizer.AddedToken{
		{ID: 256, Content: "[BOS]"}, {ID: 257, Content: "[EOS]"}, {ID: 258, Content: chat.TokEndOfMsg},
		{ID: 259, Content: chat.TokOpen}, {ID: 260, Content: chat.TokClose}, {ID: 261, Content: chat.TokSep},
	})
	if err != nil {
		log.Fatal(err)
	}
	return tok
}

func ExampleRender() {
	tools, _ := chat.ToolsJSON(chat.Tool{Function: chat.Function{Name: "bash", Parameters: json.RawMessage(`{"type":"object"}`)}})
	segs, err := chat.Render([]chat.Message{{Role: chat.RoleUser, Content: "List the files."}}, chat.Options{Tools: tools})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(chat.Text(segs))
	fmt.Println(segs[0], segs[1])
	// Output:
	// <|open|>message role="system" type="tool-declare"<|sep|># Tools
	// Here are the available tools, described in JSONSchema.
	//
	// ```json
	// [{"function":{"name":"bash","parameters":{"type":"object"}},"type":"function"}]
	// ```<|close|>message<|sep|><|end_of_msg|><|open|>message role="user"<|sep|>List the files.<|close|>message<|sep|><|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>
	// {<|open|> true} {message false}
}

func ExampleParse() {
	tok := byteTokenizer()
	// What a model generates after a prompt that thinks.
	answer := tok.Encode(`I should run ls.<|close|>think<|sep|><|open|>response<|sep|>Listing.<|close|>response<|sep|>` +
		`<|open|>tools<|sep|><|open|>call tool="bash" index="1"<|sep|><|open|>argument key="command" type="string"<|sep|>ls -la` +
		`<|close|>argument<|sep|><|open|>argument key="depth" type="number"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|>` +
		`<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>`)
	m, err := chat.Parse(tok, answer, true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q %q\n", m.ReasoningContent, m.Content)
	for _, c := range m.ToolCalls {
		fmt.Println(c.ID, c.Function.Name, c.Function.Arguments)
	}
	// Output:
	// "I should run ls." "Listing."
	// call_0 bash {"command": "ls -la", "depth": 2}
}

func ExampleParser() {
	tok := byteTokenizer()
	p, err := chat.NewParser(tok, true)
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range tok.Encode("Hmm.<|close|>think<|sep|><|open|>response<|sep|>Hi!") {
		if d := p.Write(id); !d.Empty() {
			fmt.Printf("%q %q\n", d.Reasoning, d.Content)
		}
	}
	// A reply cut off here is closed so: the message is whole again.
	fmt.Println(chat.Text(p.Closing()))
	// Output:
	// "H" ""
	// "m" ""
	// "m" ""
	// "." ""
	// "" "H"
	// "" "i"
	// "" "!"
	// <|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>
}
