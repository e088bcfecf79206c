package tokenizer

import (
	"strings"
	"testing"
)

// benchProse, benchGo, benchPython and benchCJK make up the mixed text of
// BenchmarkEncode.
const benchProse = `The expert cache keeps the most recently used experts in memory and streams the rest from disk. When a token arrives, the router picks sixteen of the eight hundred and ninety-six experts in each layer; if they're already resident, the layer runs at memory speed, otherwise it waits on the drive. We measured a hit rate of 71% on ordinary English prose, and somewhat less on source code, which tends to wander across more of the network. Isn't it surprising how much of a trillion-parameter model sits idle for any given sentence? The answer, of course, is that the model was trained to specialise: a handful of experts handle punctuation, others numbers, and still others particular languages.

Dr. O'Neil said the results "weren't what we'd expected" - the cache needed 3.5 GB more than planned - but the throughput, about 27 tokens per second on a 2024 workstation, was good enough for interactive use. Tests ran on 12 March 2026 at 09:41 UTC; see https://example.org/k3/report?id=1234&run=7 for details.
`

const benchGo = `package main

import (
	"fmt"
	"os"
	"strings"
)

// wordCount returns how often each word occurs in text.
func wordCount(text string) map[string]int {
	counts := make(map[string]int)
	for _, w := range strings.Fields(text) {
		counts[strings.ToLower(w)]++
	}
	return counts
}

func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	for w, n := range wordCount(string(data)) {
		if n > 10 {
			fmt.Printf("%-20s %6d\n", w, n)
		}
	}
}
`

const benchPython = `import json
from dataclasses import dataclass


@dataclass
class Expert:
    layer: int
    index: int
    size_bytes: int = 17_547_264

    def key(self) -> str:
        return f"{self.layer}/{self.index}"


def load_trace(path):
    """Read (layer, expert) pairs and return the hit rate of an LRU cache."""
    hits, seen = 0, {}
    with open(path) as f:
        for i, line in enumerate(f):
            layer, expert = map(int, line.split())
            if (layer, expert) in seen:
                hits += 1
            seen[(layer, expert)] = i
    return hits / max(1, i + 1)


if __name__ == "__main__":
    print(json.dumps({"hit_rate": load_trace("trace.txt")}, indent=2))
`

const benchCJK = `大型语言模型通过预测下一个词元来生成文本。在混合专家架构中，每一层只激活一小部分专家，因此计算量远小于参数总量。本项目在普通中央处理器上运行该模型，并把不常用的专家保存在固态硬盘上，需要时再读入内存。
専門家の重みはディスクから読み込まれ、最近使われたものだけがメモリに残ります。この方式により、一般的なワークステーションでも大規模なモデルを動かすことができます。
전문가 캐시는 최근에 사용된 전문가를 메모리에 보관합니다. 토큰당 약 27초가 걸렸습니다.
`

// benchText returns about n bytes of mixed text: prose, Go, Python and CJK.
func benchText(n int) string {
	unit := benchProse + benchGo + benchPython + benchCJK
	return strings.Repeat(unit, n/len(unit)+1)[:n]
}

// BenchmarkEncode measures encoding of mixed English, code and CJK text
// with the fixture (o200k) vocabulary. Run it on one core:
//
//	go test ./tokenizer/ -run '^$' -bench 'Encode$' -cpu 1
func BenchmarkEncode(b *testing.B) {
	tok := fixtureTokenizer(b)
	text := benchText(1 << 20)
	dst := make([]int, 0, len(text))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		dst = tok.AppendEncode(dst[:0], text, EncodeOptions{})
		n = len(dst)
	}
	b.ReportMetric(float64(len(text))/float64(n), "bytes/token")
}

// BenchmarkEncodeParts breaks BenchmarkEncode down by kind of text.
func BenchmarkEncodeParts(b *testing.B) {
	tok := fixtureTokenizer(b)
	for _, c := range []struct{ name, unit string }{
		{"prose", benchProse}, {"go", benchGo}, {"python", benchPython}, {"cjk", benchCJK},
	} {
		b.Run(c.name, func(b *testing.B) {
			text := strings.Repeat(c.unit, (1<<18)/len(c.unit)+1)
			dst := make([]int, 0, len(text))
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				dst = tok.AppendEncode(dst[:0], text, EncodeOptions{})
			}
		})
	}
}

func BenchmarkPretokenize(b *testing.B) {
	text := benchText(1 << 20)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		for i := 0; i < len(text); {
			i = nextPiece(text, i)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := fixtureTokenizer(b)
	text := benchText(1 << 20)
	ids := tok.Encode(text)
	buf := make([]byte, 0, len(text))
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		buf, _ = tok.AppendDecode(buf[:0], ids)
	}
}

func BenchmarkLoad(b *testing.B) {
	dir := fixturesDir(b)
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
