module github.com/k3go/k3

go 1.26.0

require golang.org/x/sys v0.50.0

// huff0 codes the exponent bytes of the compressed packed trunk (k3 pack
// --compress): fuzzed, with an amd64 asm 4-stream decoder.
require github.com/klauspost/compress v1.20.4

// test-only: the official client proves that examples/server speaks the
// OpenAI API (tools, tool calls, streamed deltas) as real clients do.
require github.com/openai/openai-go/v3 v3.98.0

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
)

require github.com/dlclark/regexp2/v2 v2.13.0 // test-only: cross-checks the hand-written pre-tokenizer
