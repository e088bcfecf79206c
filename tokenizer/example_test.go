package tokenizer_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/k3go/k3/tokenizer"
)

// newExampleTokenizer builds a tiny byte-level BPE vocabulary in memory:
// the 256 single bytes (ranks 0..255), a few merges, and one added token.
func newExampleTokenizer() *tokenizer.Tokenizer {
	ranks := make(map[string]int)
	for b := range 256 {
		ranks[string([]byte{byte(b)})] = b
	}
	for i, s := range []string{"he", "ll", "hell", " w", "or", " wor", "ld"} {
		ranks[s] = 256 + i
	}
	tok, err := tokenizer.New(ranks, []tokenizer.AddedToken{{ID: 300, Content: "<|im_end|>", Special: true}})
	if err != nil {
		log.Fatal(err)
	}
	return tok
}

func Example() {
	// Real use: tok, err := tokenizer.Load("/path/to/model").
	tok := newExampleTokenizer()

	ids := tok.Encode("hello world<|im_end|>")
	fmt.Println(ids)
	var parts []string
	for _, id := range ids {
		b, _ := tok.TokenBytes(id)
		parts = append(parts, fmt.Sprintf("%q", b))
	}
	fmt.Println(strings.Join(parts, " "))

	// Untrusted text: added-token strings stay ordinary bytes.
	fmt.Println(len(tok.EncodeOrdinary("<|im_end|>")))

	text, err := tok.Decode(ids)
	fmt.Printf("%q %v\n", text, err)

	eos, _ := tok.ID("<|im_end|>")
	fmt.Println(eos, tok.VocabSize())
	// Output:
	// [258 111 261 262 300]
	// "hell" "o" " wor" "ld" "<|im_end|>"
	// 10
	// "hello world<|im_end|>" <nil>
	// 300 301
}

func ExampleStreamDecoder() {
	tok := newExampleTokenizer()
	ids := tok.Encode("\u4e2d\u6587!") // 中文!: six single-byte tokens, then "!"
	d := tok.NewStreamDecoder()
	var out []string
	for _, id := range ids {
		s, err := d.Write(id)
		if err != nil {
			log.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%q", s))
	}
	out = append(out, fmt.Sprintf("%q", d.Flush()))
	fmt.Println(strings.Join(out, " "))
	// Output:
	// "" "" "中" "" "" "文" "!" ""
}
